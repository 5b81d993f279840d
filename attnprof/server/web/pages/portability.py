"""The portability page: two runs of the project on two GPU models read apart (``attnprof.core.analysis.portability``):
per case and kernel, the time on each, each as a share of that GPU's own measured peaks, and whether the hardware
explains the difference or the code uses one GPU worse. Never a pass or a fail. Without runs chosen, it offers the
latest run of each testbed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from attnprof.core.analysis.portability import Portability, portability
from attnprof.server.db import SessionDep
from attnprof.server.runs import documents
from attnprof.server.runs import repository as runs
from attnprof.server.web import repository
from attnprof.server.web.dependencies import PageError, ViewerDep, not_found
from attnprof.server.web.render import page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)
RunRef = Annotated[str | None, Query(max_length=100, description="a run id (the service's or the document's)")]
COLOURS = {"hardware": "#56B4E9", "worse": "#D55E00", "better": "#009E73", "same": "#999999", "other": "#E69F00"}


def ratio_chart(report: Portability) -> dict[str, Any]:
    """Each case's time on B over its time on A, beside what B's peaks predict for its bound resource."""
    cases = [r for r in report.rows if r.kernel is None]
    return {
        "data": [
            {
                "type": "bar",
                "name": f"measured: {report.b_name} / {report.a_name}",
                "x": [r.case for r in cases],
                "y": [r.ratio for r in cases],
                "marker": {"color": [COLOURS.get(r.reading, "#999999") for r in cases]},
                "text": [r.reading for r in cases],
                "hovertemplate": "%{x}<br>×%{y:.2f}: %{text}<extra></extra>",
            },
            {
                "type": "scatter",
                "mode": "markers",
                "name": "what the peaks predict",
                "x": [r.case for r in cases],
                "y": [r.expected for r in cases],
                "marker": {"symbol": "line-ew-open", "size": 24, "color": "#000000", "line": {"width": 2}},
            },
        ],
        "layout": {"yaxis": {"title": {"text": "time ratio (B / A)"}}, "height": 340, "margin": {"t": 20, "b": 120}},
    }


def _run(session: SessionDep, project_id: int, ref: str, field: str) -> str:
    try:
        found = runs.resolve_run_id(session, project_id, ref)
    except runs.AmbiguousRunId as exc:
        raise PageError(422, "Invalid input", f"{field}: {exc}") from exc
    if found is None:
        raise not_found(f"{field}: no run {ref!r} in this project")
    return found


@router.get("/portability", response_class=HTMLResponse)
def portability_page(viewer: ViewerDep, session: SessionDep, a: RunRef = None, b: RunRef = None) -> HTMLResponse:
    latest = repository.latest_run_per_testbed(session, viewer.project.id)
    if not a or not b:
        return page("portability.html", viewer=viewer, report=None, latest=latest, a=a, b=b, chart=None)
    run_a, run_b = _run(session, viewer.project.id, a, "a"), _run(session, viewer.project.id, b, "b")
    report = portability(documents.result_of(session, run_a), documents.result_of(session, run_b))
    counts = {k: sum(1 for r in report.rows if r.reading == k) for k in COLOURS}
    return page(
        "portability.html",
        viewer=viewer,
        report=report,
        latest=latest,
        a=run_a,
        b=run_b,
        counts=counts,
        same_gpu=report.a_name == report.b_name,
        chart=ratio_chart(report) if any(r.kernel is None for r in report.rows) else None,
    )
