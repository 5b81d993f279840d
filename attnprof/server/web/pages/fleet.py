"""The fleet page: each testbed's hosts (live or not, what they run), its queue, how long jobs waited, how much of
its hosts' time jobs held, and GPU time, the viewer's project beside all others together, over a window."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from attnprof.server.config import Settings
from attnprof.server.db import SessionDep, utcnow
from attnprof.server.web import fleet_repository
from attnprof.server.web.dependencies import PageError, ViewerDep
from attnprof.server.web.pages.jobs import duration
from attnprof.server.web.render import page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)
WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


def gpu_chart(rows: list[fleet_repository.TestbedRow], project: str, window: str) -> dict[str, Any]:
    """GPU hours per testbed over the window: the viewer's project, then every other project together."""
    names = [r.name for r in rows]
    return {
        "data": [
            {
                "type": "bar",
                "name": project,
                "x": names,
                "y": [r.own_gpu_s / 3600 for r in rows],
                "marker": {"color": "#0072B2"},
            },
            {
                "type": "bar",
                "name": "other projects",
                "x": names,
                "y": [r.others_gpu_s / 3600 for r in rows],
                "marker": {"color": "#BBBBBB"},
            },
        ],
        "layout": {
            "barmode": "stack",
            "yaxis": {"title": {"text": f"GPU hours, last {window}"}},
            "height": 300,
            "margin": {"t": 20},
        },
    }


@router.get("/fleet", response_class=HTMLResponse)
def fleet_page(
    request: Request,
    viewer: ViewerDep,
    session: SessionDep,
    window: Annotated[str, Query(max_length=8, description="24h, 7d or 30d")] = "24h",
) -> HTMLResponse:
    if window not in WINDOWS:
        raise PageError(422, "Invalid input", f"window: one of {', '.join(WINDOWS)}; got {window[:8]!r}")
    settings: Settings = request.app.state.settings
    rows = fleet_repository.fleet(
        session,
        project_id=viewer.project.id,
        now=utcnow(),
        live_s=settings.fairness.worker_live_s,
        window=WINDOWS[window],
        cfg=settings.health,
    )
    return page(
        "fleet.html",
        viewer=viewer,
        rows=rows,
        window=window,
        windows=list(WINDOWS),
        duration=duration,
        chart=gpu_chart(rows, viewer.project.name, window)
        if any(r.own_gpu_s or r.others_gpu_s for r in rows)
        else None,
    )
