"""The project overview: testbeds, the default branch's latest runs and verdicts, alerts, the latest pull requests
(their jobs and uploads counted alike), jobs with live state."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, JSONResponse

from attnprof.contract.links import PATHS
from attnprof.server.comparisons import alert_webhook
from attnprof.server.comparisons.models import Alert
from attnprof.server.db import SessionDep
from attnprof.server.jobs.models import FINAL
from attnprof.server.web import pull_repository, repository
from attnprof.server.web.dependencies import ViewerDep
from attnprof.server.web.render import fmt_time, page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)
_RUNS, _ALERTS, _JOBS, _PULLS = 20, 20, 20, 10


def verdict_chart(project: str, runs: list[dict[str, object]]) -> dict[str, object]:
    """One bar per run of ``runs`` (newest first), coloured by its verdict, oldest on the left; a click opens it."""
    ordered = list(reversed(runs))
    colours = {"pass": "#009E73", "warn": "#E69F00", "fail": "#D55E00", None: "#999999"}
    return {
        "data": [
            {
                "type": "bar",
                "x": [str(r["commit"])[:8] + " · " + str(r["id"])[:4] for r in ordered],
                "y": [1] * len(ordered),
                "marker": {"color": [colours.get(r["verdict"], "#999999") for r in ordered]},  # type: ignore[call-overload]
                "customdata": [PATHS.ui_run(project, str(r["id"])) for r in ordered],
                "text": [str(r["verdict"] or "not compared") for r in ordered],
                "hovertemplate": "%{x}<br>%{text}<extra></extra>",
            }
        ],
        "layout": {
            # the slanted "commit · run" labels take their room below and, the first of them, to the left
            "height": 170,
            "margin": {"l": 60, "r": 10, "t": 10, "b": 10},
            "yaxis": {"visible": False},
            "xaxis": {"type": "category", "tickangle": -45, "automargin": True},
        },
        "links": True,
    }


def _alert_row(project: str, found: dict[str, Any]) -> dict[str, Any]:
    """An alert as the overview lists it: its step in its unit with its interval, the commits around it, whether
    someone acknowledged it, and a link to it on its case's trend."""
    alert: Alert = found["alert"]
    trend = PATHS.ui_trends(project, case=alert.case_id, metric=alert.metric, testbed=found["testbed"])
    return {
        "id": alert.id,
        "case_id": alert.case_id,
        "metric": alert.metric,
        "testbed": found["testbed"],
        "regression": alert.regression,
        "size": alert_webhook.size(alert),
        "interval": alert_webhook.interval(alert),
        "commit": found["commit"],
        "before_commit": found["before_commit"],
        "run_id": alert.run_id,
        "before_run_id": alert.before_run_id,
        "acknowledged_at": alert.acknowledged_at,
        "acknowledged_by": alert.acknowledged_by,
        "acknowledged_note": alert.acknowledged_note,
        "href": f"{trend}#alert-{alert.id}",
        "bisection_id": alert.bisection_id,
        "culprit": alert.culprit,
    }


@router.get("", response_class=HTMLResponse)
def overview(viewer: ViewerDep, session: SessionDep) -> HTMLResponse:
    project = viewer.project
    runs = [r._asdict() for r in repository.latest_runs(session, project.id, project.default_branch, _RUNS)]
    jobs = [j._asdict() for j in repository.recent_jobs(session, project.id, _JOBS)]
    return page(
        "overview.html",
        viewer=viewer,
        testbeds=repository.testbeds_in_use(session, project.id),
        runs=runs,
        alerts=[_alert_row(project.name, a) for a in repository.recent_alerts(session, project.id, _ALERTS)],
        jobs=jobs,
        pulls=pull_repository.recent_pulls(session, project.id, _PULLS),
        live_ids=",".join(j["id"] for j in jobs if j["status"] not in FINAL),
        verdict_chart=verdict_chart(project.name, runs) if runs else None,
    )


@router.get("/jobs/state")
def job_states(
    viewer: ViewerDep, session: SessionDep, ids: Annotated[str, Query(max_length=37 * 50)] = ""
) -> JSONResponse:
    """The live fields of up to 50 jobs, for the pages that show jobs in progress (polled, no reload)."""
    wanted = [i for i in ids.split(",") if i][:50]
    fields: dict[str, str] = {}
    links: dict[str, str | None] = {}
    done = True
    for row in repository.job_states(session, viewer.project.id, wanted):
        fields[f"{row.id}.status"] = row.status
        fields[f"{row.id}.verdict"] = row.verdict or "–"
        fields[f"{row.id}.reason"] = row.reason or ""
        fields[f"{row.id}.attempts"] = f"{row.attempts} of {row.max_attempts}"
        fields[f"{row.id}.started_at"] = fmt_time(row.started_at) if row.started_at else ""
        fields[f"{row.id}.finished_at"] = fmt_time(row.finished_at) if row.finished_at else ""
        project = viewer.project.name
        links[f"{row.id}.run"] = PATHS.ui_run(project, row.run_id) if row.run_id else None
        has_comparison = row.run_id and row.comparison_id
        links[f"{row.id}.comparison"] = PATHS.ui_run_comparison(project, row.run_id) if has_comparison else None
        done = done and row.status in FINAL
    return JSONResponse({"fields": fields, "links": links, "done": done}, headers={"Cache-Control": "no-store"})
