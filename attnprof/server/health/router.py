from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from attnprof.contract.tasks import profile_queue
from attnprof.server import queue
from attnprof.server.db import SessionDep
from attnprof.server.dependencies import SettingsDep
from attnprof.server.errors import Unavailable
from attnprof.server.health import repository
from attnprof.server.metrics import Metrics
from attnprof.server.openapi import errors

log = logging.getLogger(__name__)
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
    """Prometheus text format: the counts of every server process, and the jobs and queues as they are now
    (``attnprof.server.metrics`` lists the series; ``attnprof_broker_up`` is 0, with no queue depths, while the broker
    is down)."""
    m: Metrics = request.app.state.metrics
    counts = repository.jobs_by_state(session)
    jobs = {state: counts.get(state, 0) for state in repository.STATES}
    known = [profile_queue(name) for name in repository.testbed_names(session)]
    depths: dict[str, int] | None
    try:
        depths = queue.queue_depths(settings, known)
    except Exception as exc:  # a scrape must not fail because the broker does: it says the broker is down
        log.warning("metrics: cannot read the broker's queues: %s: %s", type(exc).__name__, exc)
        depths = None
    return Response(m.exposition(jobs=jobs, queue_depths=depths), media_type=CONTENT_TYPE_LATEST)
