"""A pull request's page: everything the project knows of it, jobs and uploads alike, newest first, each with its
verdict and the page that shows it; the latest verdict at the top. A job that has no run yet (queued, running) or
never will (failed, timed out, cancelled) is there too, with its status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import HTMLResponse

from attnprof.server.db import SessionDep
from attnprof.server.jobs.models import FINAL
from attnprof.server.web import pull_repository as pulls
from attnprof.server.web.dependencies import ViewerDep
from attnprof.server.web.pages.runs_list import pr_number
from attnprof.server.web.render import page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)
# A pull request gets a few runs per push; past these the page says how many it left out.
MOST = 200


@dataclass(frozen=True)
class Entry:
    """One row of the page: a job (with its run once it has one) or an upload (a run no job made)."""

    kind: str  # "job" or "upload"
    created_at: datetime
    branch: str
    commit: str
    testbed: str
    status: str  # a job's status; "done" for an upload
    verdict: str | None
    job_id: str | None
    run_id: str | None
    comparison_id: str | None
    suspect: bool
    reason: str | None


def entries(jobs: list[Any], runs: list[Any]) -> list[Entry]:
    """The jobs and runs of a pull request as rows, newest first: a job's run joins its job's row; a run whose job
    is not among ``jobs`` (one past the page's limit) stands for that job."""
    by_run = {r.id: r for r in runs}
    rows: list[Entry] = []
    seen_runs: set[str] = set()
    for j in jobs:
        run = by_run.get(j.run_id) if j.run_id else None
        if run is not None:
            seen_runs.add(run.id)
        rows.append(
            Entry(
                kind="job",
                created_at=j.created_at,
                branch=j.branch,
                commit=j.commit,
                testbed=j.testbed,
                status=j.status,
                verdict=j.verdict or (run.verdict if run is not None else None),
                job_id=j.id,
                run_id=j.run_id,
                comparison_id=run.comparison_id if run is not None else None,
                suspect=bool(run.suspect) if run is not None else False,
                reason=j.reason if j.status in FINAL and j.status != "done" else None,
            )
        )
    for r in runs:
        if r.id in seen_runs:
            continue
        rows.append(
            Entry(
                kind="job" if r.job_id else "upload",
                created_at=r.created_at,
                branch=r.branch,
                commit=r.commit,
                testbed=r.testbed,
                status="done",
                verdict=r.verdict,
                job_id=r.job_id,
                run_id=r.id,
                comparison_id=r.comparison_id,
                suspect=bool(r.suspect),
                reason=None,
            )
        )
    rows.sort(key=lambda e: (e.created_at, e.run_id or e.job_id or ""), reverse=True)
    return rows


@router.get("/pulls/{number}", response_class=HTMLResponse)
def pull_page(viewer: ViewerDep, session: SessionDep, number: Annotated[str, Path(max_length=12)]) -> HTMLResponse:
    pr = pr_number(number, "number")
    project = viewer.project
    jobs = pulls.jobs_of_pr(session, project.id, pr, MOST + 1)
    runs = pulls.runs_of_pr(session, project.id, pr, MOST + 1)
    rows = entries(jobs[:MOST], runs[:MOST])
    jobs_count, uploads_count = pulls.pr_counts(session, project.id, pr)
    latest = next((e for e in rows if e.verdict is not None), None)
    newer = [e for e in rows if latest is None or e.created_at > latest.created_at]
    return page(
        "pull.html",
        viewer=viewer,
        number=pr,
        rows=rows,
        latest=latest,
        pending=[e for e in newer if e.status not in FINAL],
        ended=[e for e in newer if e.status in FINAL and e.verdict is None],
        jobs_count=jobs_count,
        uploads_count=uploads_count,
        truncated=len(jobs) > MOST or len(runs) > MOST,
        repos=sorted({j.repo for j in jobs if j.repo} | {r.repo for r in runs if r.repo}),
    )
