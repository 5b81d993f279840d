"""The project's jobs: a filtered, paged list and one job's page, both live while jobs are in progress (the
overview's ``jobs/state`` endpoint is polled; no page reload)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from attnprof.contract.links import PATHS
from attnprof.server import paging
from attnprof.server.config import Fairness, Settings
from attnprof.server.db import SessionDep, utcnow
from attnprof.server.errors import BadRequest
from attnprof.server.jobs import matrix as matrices
from attnprof.server.jobs import service as job_service
from attnprof.server.jobs.models import FINAL, STATES, Job
from attnprof.server.testbeds import repository as testbed_rows
from attnprof.server.web import pull_repository, repository
from attnprof.server.web.dependencies import PageError, ViewerDep, not_found
from attnprof.server.web.render import page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)
PAGE_JOBS = 50
# What a job's end means, in words, for the reason box (the reason itself says why).
ENDINGS = {
    "failed": "The job failed.",
    "timed_out": "The job timed out.",
    "cancelled": "The job was cancelled.",
}


def _bad(param: str, detail: str) -> PageError:
    return PageError(422, "Invalid input", f"{param}: {detail}")


def _seconds(start: Any, end: Any) -> float | None:
    return (end - start).total_seconds() if start is not None and end is not None else None


def duration(seconds: float | None) -> str:
    """A duration in seconds, in the unit that reads best (``–`` for none)."""
    if seconds is None:
        return "–"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


_LABEL_ROOM = 1.2
"""The y axis's top over the tallest bar: room for the status written above it."""


def durations_chart(project: str, jobs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
    """One stacked bar per job of the page, oldest on the left: seconds waited in the queue, then seconds run (up
    to now for a job still in progress); the status is written on each bar, and a click opens the job."""
    ordered = list(reversed(jobs))
    names = [f"{j['id'][:8]}" for j in ordered]
    waited = [_seconds(j["created_at"], j["started_at"] or j["finished_at"] or now) or 0.0 for j in ordered]
    ran = [_seconds(j["started_at"], j["finished_at"] or now) or 0.0 for j in ordered]
    links = [PATHS.ui_job(project, j["id"]) for j in ordered]
    hover = [
        f"job {j['id'][:8]} · {j['status']}<br>{j['branch']}"
        + (f" (PR #{j['pr']})" if j["pr"] else "")
        + f"<br>waited {duration(w)}, ran {duration(r)}"
        for j, w, r in zip(ordered, waited, ran, strict=True)
    ]
    common = {"type": "bar", "x": names, "customdata": links, "text": hover, "hovertemplate": "%{text}<extra></extra>"}
    # Plotly's autorange leaves no room above a stack for its text: the tallest bar's status would be cut at the top.
    tallest = max((w + r for w, r in zip(waited, ran, strict=True)), default=0.0)
    return {
        "data": [
            {
                **common,
                "name": "waited in the queue (s)",
                "y": waited,
                "marker": {"color": "#E69F00"},
                "textposition": "none",
            },
            {
                **common,
                "name": "ran (s)",
                "y": ran,
                "marker": {"color": "#0072B2", "pattern": {"shape": "/"}},
                "texttemplate": [j["status"] for j in ordered],
                "textposition": "outside",
            },
        ],
        "layout": {
            "barmode": "stack",
            "height": 280,
            "margin": {"l": 60, "r": 10, "t": 30, "b": 90},
            "xaxis": {
                "type": "category",
                "tickangle": -45,
                "title": {"text": "job (oldest on the left)", "standoff": 12},
            },
            "yaxis": {"title": {"text": "seconds"}, "range": [0, _LABEL_ROOM * tallest or 1.0]},
            "legend": {"orientation": "h", "y": 1.15},
        },
        "links": True,
    }


def testbed_waits(session: Session, names: Iterable[str], fairness: Fairness, now: datetime) -> list[str]:
    """Why the jobs waiting on each of the testbeds ``names`` do not start, where something holds them all (no live
    worker, or every live worker on a quarantined host), one line per testbed."""
    lines = []
    for name in sorted(set(names)):
        testbed = testbed_rows.get_by_name(session, name)
        if testbed is None:
            continue
        why = job_service.testbed_notice(session, testbed_id=testbed.id, name=name, fairness=fairness, now=now)
        if why:
            lines.append(why)
    return lines


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(
    request: Request,
    viewer: ViewerDep,
    session: SessionDep,
    status: Annotated[str | None, Query(max_length=16)] = None,
    branch: Annotated[str | None, Query(max_length=255)] = None,
    pr: Annotated[str | None, Query(max_length=12)] = None,
    before: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    if status and status not in STATES:
        raise _bad("status", f"{status!r} is not one of {', '.join(STATES)}")
    pr_number = None
    if pr:
        if not pr.isdigit() or int(pr) < 1:
            raise _bad("pr", f"{pr!r} is not a pull request number")
        pr_number = int(pr)
    try:
        cursor = paging.decode(before)
    except BadRequest as exc:
        raise _bad("before", "not a page link this site made") from exc
    rows = repository.list_jobs(
        session,
        viewer.project.id,
        status=status or None,
        branch=branch or None,
        pr=pr_number,
        before=cursor,
        limit=PAGE_JOBS + 1,
    )
    filters = {k: v for k, v in {"status": status, "branch": branch, "pr": pr}.items() if v}
    jobs, older = paging.page_of(rows, PAGE_JOBS, filters)
    settings: Settings = request.app.state.settings
    waits = testbed_waits(session, (j["testbed"] for j in jobs if j["status"] == "queued"), settings.fairness, utcnow())
    return page(
        "jobs.html",
        viewer=viewer,
        jobs=jobs,
        states=STATES,
        status=status or "",
        branch=branch or "",
        pr=pr or "",
        paged=cursor is not None,
        older=older,
        newest=filters,
        live_ids=",".join(j["id"] for j in jobs if j["status"] not in FINAL),
        chart=durations_chart(viewer.project.name, jobs, datetime.now(UTC)) if jobs else None,
        # A pull request profiled on a self-hosted runner has uploads and no job: counted beside its jobs.
        pull=pull_repository.pr_counts(session, viewer.project.id, pr_number) if pr_number is not None else None,
        number=pr_number,
        waits=waits,
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(
    request: Request, viewer: ViewerDep, session: SessionDep, job_id: Annotated[str, Path(max_length=36)]
) -> HTMLResponse:
    job = repository.job_in_project(session, viewer.project.id, job_id)
    if job is None:
        raise not_found(f"no job {job_id}")
    waiting = None
    if job.status == "queued":  # why it waits, as the API's notice says it
        row = session.get(Job, job.id)
        settings: Settings = request.app.state.settings
        waiting = job_service.to_out(session, row, settings.fairness).notice if row is not None else None
    return page(
        "job.html",
        viewer=viewer,
        job=job,
        live=job.status not in FINAL,
        ending=ENDINGS.get(job.status),
        waited=duration(_seconds(job.created_at, job.started_at)),
        ran=duration(_seconds(job.started_at, job.finished_at)),
        gpu=duration(job.gpu_seconds or 0.0),
        waiting=waiting,
        reproduce=reproduce(job.commit, job.suite_path),
        matrix=matrices.of(session, job.matrix_id) if job.matrix_id else None,
    )


def reproduce(commit: str, suite_path: str | None) -> str | None:
    """The commands that profile a job's suite in a checkout of its repository, from its root (None: the job has no
    suite path, sent by an older client). The path is quoted for a POSIX shell."""
    if not suite_path:
        return None
    return f"git checkout {shlex.quote(commit)}\nattnprof profile {shlex.quote(suite_path)} --out result.json"
