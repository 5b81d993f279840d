from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service import queue
from service.db import SessionDep
from service.dependencies import SettingsDep
from service.errors import Unavailable
from service.health import repository
from service.metrics import Metrics
from service.openapi import errors

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", responses=errors(503))
def readyz(session: SessionDep, settings: SettingsDep) -> dict[str, str]:
    """The database and the broker answer."""
    try:
        repository.ping(session)
    except Exception as exc:
        raise Unavailable(f"database: {type(exc).__name__}") from exc
    try:
        queue.ping(settings)
    except Exception as exc:
        raise Unavailable(f"broker: {type(exc).__name__}: {exc}") from exc
    return {"status": "ready", "database": "ok", "broker": "ok"}


@router.get(
    "/metrics", response_class=Response, responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}}
)
def metrics(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    """Prometheus text format."""
    m: Metrics = request.app.state.metrics
    counts = repository.jobs_by_state(session)
    for state in repository.STATES:
        m.jobs.labels(state).set(counts.get(state, 0))
    try:
        for name, depth in queue.queue_depths(settings).items():
            m.queue_depth.labels(name).set(depth)
    except Exception:  # a scrape must not fail because the broker does
        pass
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)
