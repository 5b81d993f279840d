"""A bisection's page (docs/bisection.md): what it searches, each probe with its paired job, effect, interval and
outcome on a chart and in a table, the commits left, and what it found; live while it runs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import HTMLResponse

from attnprof.contract.links import PATHS
from attnprof.server.bisections.models import OPEN, STATUS_WORDS, Bisection
from attnprof.server.bisections.router import BisectionOut, out
from attnprof.server.db import INT_MAX, SessionDep
from attnprof.server.web.dependencies import ViewerDep, not_found
from attnprof.server.web.render import page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)
COLOURS = {"bad": "#D55E00", "good": "#009E73", "skip": "#999999", None: "#0072B2"}


def probes_chart(project: str, b: BisectionOut) -> dict[str, Any]:
    """Each probe's effect (the stepped cases' largest slowdown against the last good commit, %) at its candidate's
    place in the range, with its interval, coloured by outcome; the step as a band. A click opens the probe's job."""
    place = {c: i for i, c in enumerate(b.commits)}
    data: list[dict[str, Any]] = []
    for outcome, label in (
        ("bad", "holds the step"),
        ("good", "before the step"),
        ("skip", "could not be measured"),
        (None, "running"),
    ):
        probes = [p for p in b.probes if p.outcome == outcome and p.candidate in place]
        if not probes:
            continue
        y = [100 * (p.effect or 0.0) for p in probes]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": label,
                "x": [place[p.candidate] for p in probes],
                "y": y,
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": [100 * (p.high or p.effect or 0.0) - v for p, v in zip(probes, y, strict=True)],
                    "arrayminus": [v - 100 * (p.low or p.effect or 0.0) for p, v in zip(probes, y, strict=True)],
                },
                "marker": {"color": COLOURS[outcome], "size": 11},
                "customdata": [PATHS.ui_job(project, p.job_id) if p.job_id else "" for p in probes],
                "text": [f"{p.candidate[:10]} against {p.good[:10]}: {p.outcome or 'running'}" for p in probes],
                "hovertemplate": "%{text}<br>%{y:+.1f}%<extra></extra>",
            }
        )
    shapes = []
    if b.effect is not None:
        low, high = 100 * (b.low if b.low is not None else b.effect), 100 * (b.high if b.high is not None else b.effect)
        shapes.append(
            {
                "type": "rect",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": low,
                "y1": high,
                "fillcolor": "#D55E00",
                "opacity": 0.12,
                "line": {"width": 0},
            }
        )
    return {
        "data": data,
        "layout": {
            "xaxis": {
                "title": {"text": "commit in the range (0: the last good)"},
                "range": [-0.5, max(len(b.commits) - 0.5, 1)],
                "dtick": 1,
            },
            "yaxis": {"title": {"text": "slowdown against the last good commit (%)"}, "zeroline": True},
            "shapes": shapes,
            "height": 320,
            "margin": {"t": 20},
        },
    }


@router.get("/bisections/{bisection_id}", response_class=HTMLResponse)
def bisection_page(
    viewer: ViewerDep, session: SessionDep, bisection_id: Annotated[int, Path(ge=1, le=INT_MAX)]
) -> HTMLResponse:
    b = session.get(Bisection, bisection_id)
    if b is None or b.project_id != viewer.project.id:
        raise not_found(f"no bisection {bisection_id}")
    shown = out(session, b)
    return page(
        "bisection.html",
        viewer=viewer,
        b=shown,
        meaning=STATUS_WORDS.get(shown.status, ""),
        live=shown.status in OPEN,
        chart=probes_chart(viewer.project.name, shown) if shown.probes else None,
    )
