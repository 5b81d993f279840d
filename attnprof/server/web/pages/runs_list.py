"""The project's runs, however each came: stored by a job's worker, or uploaded from a self-hosted runner
(``attnprof upload``). A paged list, newest first, filtered by branch, pull request and testbed."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from attnprof.contract.provenance import BRANCH_CHARS, INT_MAX
from attnprof.server import paging
from attnprof.server.db import SessionDep
from attnprof.server.errors import BadRequest
from attnprof.server.web import pull_repository as pulls
from attnprof.server.web import repository
from attnprof.server.web.dependencies import PageError, ViewerDep
from attnprof.server.web.pages.overview import verdict_chart
from attnprof.server.web.render import page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)
PAGE_RUNS = 50
TESTBED_CHARS = 100


def bad(param: str, detail: str) -> PageError:
    return PageError(422, "Invalid input", f"{param}: {detail}")


def pr_number(raw: str, param: str = "pr") -> int:
    """A pull request's number from a page's query or path, or the error page naming ``param``."""
    if not raw.isdigit() or not 1 <= int(raw) <= INT_MAX:
        raise bad(param, f"{raw[:40]!r} is not a pull request number (a whole number from 1 to {INT_MAX})")
    return int(raw)


def checked_branch(raw: str) -> str:
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
        raise bad("branch", "a branch name holds no control characters")
    return raw


@router.get("/runs", response_class=HTMLResponse)
def runs_page(
    viewer: ViewerDep,
    session: SessionDep,
    branch: Annotated[str | None, Query(max_length=BRANCH_CHARS)] = None,
    pr: Annotated[str | None, Query(max_length=12)] = None,
    testbed: Annotated[str | None, Query(max_length=TESTBED_CHARS)] = None,
    before: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    project = viewer.project
    number = pr_number(pr) if pr else None
    testbed_id = None
    in_use = [t.name for t in repository.testbeds_in_use(session, project.id)]
    if testbed:
        testbed_id = pulls.testbed_named(session, project.id, testbed)
        if testbed_id is None:
            known = ", ".join(in_use[:20]) or "none yet"
            raise bad("testbed", f"{testbed[:60]!r} is not a testbed this project has runs on (its testbeds: {known})")
    try:
        cursor = paging.decode(before)
    except BadRequest as exc:
        raise bad("before", "not a page link this site made") from exc
    rows = pulls.list_runs(
        session,
        project.id,
        branch=checked_branch(branch) if branch else None,
        pr=number,
        testbed_id=testbed_id,
        before=cursor,
        limit=PAGE_RUNS + 1,
    )
    filters = {k: v for k, v in {"branch": branch, "pr": pr, "testbed": testbed}.items() if v}
    runs, older = paging.page_of(rows, PAGE_RUNS, filters)
    return page(
        "runs.html",
        viewer=viewer,
        runs=runs,
        branch=branch or "",
        pr=pr or "",
        testbed=testbed or "",
        testbeds=in_use,
        filtered=bool(filters),
        paged=cursor is not None,
        older=older,
        newest=filters,
        chart=verdict_chart(project.name, runs) if runs else None,
        pull=pulls.pr_counts(session, project.id, number) if number is not None else None,
        number=number,
    )
