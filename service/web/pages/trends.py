"""Trends of a case (or one of its kernels) over a branch's runs: the median with its p25-p75 band, change points,
baseline pins and excluded runs marked, and the numbers in a paged table below.

The series is read whole for the chosen window (one index range scan, see ``service.trends.repository``) and
downsampled for drawing only: the table pages through every point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any, cast
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from service.config import Settings
from service.db import SessionDep
from service.trends import repository as trends
from service.web import repository, trend_repository
from service.web.dependencies import PageError, ViewerDep
from service.web.pages.trend_chart import MARKS, METRICS, ChartPoint, chart_spec, downsample, fmt_value
from service.web.render import page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)

# The most points of one window read for a page; a longer window is cut and the page says so.
MAX_POINTS = 20_000
TABLE_ROWS = 50
CHOICES = 200
CASE_METRICS = tuple(trends.CASE_METRICS)
KERNEL_METRICS = tuple(trends.KERNEL_METRICS)
Param = Annotated[str | None, Query(max_length=500)]


def _bad(param: str, detail: str) -> PageError:
    return PageError(422, "Invalid input", f"{param}: {detail}")


def _day(param: str, value: str | None) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise _bad(param, f"{value!r} is not a date (YYYY-MM-DD)") from exc


@dataclass(frozen=True)
class Choice:
    """The trend asked for, every value checked."""

    testbed_id: int
    testbed: str
    branch: str
    case: str
    kernel: str
    metric: str
    since: date | None
    until: date | None

    def query(self, **changes: Any) -> str:
        """This choice as the page's query string (``changes`` replace or add parameters)."""
        params: dict[str, Any] = {
            "case": self.case,
            "metric": self.metric,
            "testbed": self.testbed,
            "branch": self.branch,
            "kernel": self.kernel,
            "since": self.since.isoformat() if self.since else "",
            "until": self.until.isoformat() if self.until else "",
            **changes,
        }
        return urlencode({k: v for k, v in params.items() if v not in ("", None)})


def _choose(
    session: SessionDep,
    viewer: ViewerDep,
    testbeds: Sequence[Any],
    *,
    case: str | None,
    metric: str | None,
    testbed: str | None,
    branch: str | None,
    kernel: str | None,
    since: str | None,
    until: str | None,
) -> tuple[Choice, list[str], list[str]]:
    """Check every query value against what the project has; a wrong one is a 422 naming it. Returns the choice,
    the branches and the cases to offer."""
    project = viewer.project
    by_name = {t.name: t for t in testbeds}
    if testbed:
        if testbed not in by_name:
            raise _bad("testbed", f"this project has no runs on testbed {testbed!r}")
        tb = by_name[testbed]
    else:
        tb = testbeds[0]
    branches = trend_repository.branches(session, project.id, CHOICES)
    if branch:
        if branch not in branches:
            if not trend_repository.has_branch(session, project.id, branch):
                raise _bad("branch", f"this project has no runs on branch {branch!r}")
            branches = [branch, *branches]
        chosen_branch = branch
    else:
        chosen_branch = project.default_branch if project.default_branch in branches else branches[0]
    kernel = kernel or ""
    metric = metric or "latency"
    allowed = KERNEL_METRICS if kernel else CASE_METRICS
    if metric not in allowed:
        extra = " (occupancy is a kernel's: choose a kernel)" if metric == "occupancy" else ""
        raise _bad("metric", f"{metric!r} is not one of {', '.join(allowed)}{extra}")
    first, last = _day("since", since), _day("until", until)
    if first is not None and last is not None and first > last:
        raise _bad("since", f"{first} is after until ({last})")
    cases = trend_repository.trend_case_ids(session, project.id, tb.id, chosen_branch, CHOICES)
    chosen_case = case or (cases[0] if cases else "")
    if chosen_case and chosen_case not in cases:
        cases = [chosen_case, *cases]
    choice = Choice(tb.id, tb.name, chosen_branch, chosen_case, kernel, metric, first, last)
    return choice, branches, cases


def _series(session: SessionDep, viewer: ViewerDep, c: Choice) -> tuple[list[Any], bool]:
    """Every point of the window as rows (run_id, created_at, median, p25, p75), oldest first, and whether the
    window held more than ``MAX_POINTS``. Rows, not ``ChartPoint``s: only the drawn and tabled ones become objects."""
    since = datetime.combine(c.since, time(), UTC) if c.since else None
    until = datetime.combine(c.until + timedelta(days=1), time(), UTC) if c.until else None
    tq = trends.TrendQuery(
        project_id=viewer.project.id,
        testbed_id=c.testbed_id,
        branch=c.branch,
        case_id=c.case,
        since=since,
        until=until,
        after=None,
        limit=MAX_POINTS + 1,
    )
    if c.kernel:
        rows = trend_repository.kernel_series(session, tq, c.kernel, c.metric)
    else:
        rows = trend_repository.case_series(session, tq, c.metric)
    cut = len(rows) > MAX_POINTS
    return cast(list[Any], rows[:MAX_POINTS] if cut else rows), cut


@router.get("/trends", response_class=HTMLResponse)
def trend_page(
    request: Request,
    viewer: ViewerDep,
    session: SessionDep,
    case: Param = None,
    metric: Annotated[str | None, Query(max_length=32)] = None,
    testbed: Annotated[str | None, Query(max_length=100)] = None,
    branch: Annotated[str | None, Query(max_length=255)] = None,
    kernel: Param = None,
    since: Annotated[str | None, Query(max_length=32)] = None,
    until: Annotated[str | None, Query(max_length=32)] = None,
    page_no: Annotated[int, Query(alias="page", ge=1, le=1_000_000)] = 1,
) -> HTMLResponse:
    settings: Settings = request.app.state.settings
    project = viewer.project
    testbeds = repository.testbeds_in_use(session, project.id)
    base: dict[str, Any] = {
        "viewer": viewer,
        "metrics": METRICS,
        "case_metrics": CASE_METRICS,
        "kernel_metrics": KERNEL_METRICS,
    }
    if not testbeds:
        return page("trends.html", **base, choice=None)
    c, branches, cases = _choose(
        session,
        viewer,
        testbeds,
        case=case,
        metric=metric,
        testbed=testbed,
        branch=branch,
        kernel=kernel,
        since=since,
        until=until,
    )
    keys = trend_repository.kernel_keys(session, project.id, c.testbed_id, c.branch, c.case, CHOICES)
    kernels = [k._asdict() for k in keys]
    if c.kernel and c.kernel not in {k["key"] for k in kernels}:
        kernels.insert(0, {"key": c.kernel, "phase": "?", "duration_median_us": None})
    rows, cut = _series(session, viewer, c) if c.case else ([], False)
    at = {r[0]: i for i, r in enumerate(rows)}
    marks: dict[int, tuple[str, ...]] = {}
    alerts = {}
    if not c.kernel:
        alerts = {
            a.run_id: a for a in trend_repository.trend_alerts(session, project.id, c.testbed_id, c.case, c.metric)
        }
    for run_id in alerts:
        if run_id in at:
            marks[at[run_id]] = (*marks.get(at[run_id], ()), "change")
    reasons: dict[tuple[str, str], str] = {}
    for rule in trend_repository.baseline_marks(session, project.id):
        if rule.run_id in at and rule.kind in MARKS:
            marks[at[rule.run_id]] = (*marks.get(at[rule.run_id], ()), rule.kind)
            if rule.reason:
                reasons[(rule.kind, rule.run_id)] = rule.reason
    drawn = downsample([r[2] for r in rows], sorted(marks), settings.dashboard.series_points)
    total = len(rows)
    pages = max(1, math.ceil(total / TABLE_ROWS))
    if page_no > pages:
        raise _bad("page", f"there are {pages} page(s) of points")
    newest = total - 1 - (page_no - 1) * TABLE_ROWS
    tabled = list(range(newest, max(-1, newest - TABLE_ROWS), -1))
    points = {}
    for i in {*drawn, *tabled}:
        run_id, at_time, median, p25, p75 = rows[i]
        points[i] = ChartPoint(run_id, at_time, median, p25, p75, marks.get(i, ()))
    details = trend_repository.run_details(session, [p.run_id for p in points.values()])
    for p in points.values():
        found = details.get(p.run_id)
        if found is not None:
            p.commit, p.pr = found.commit, found.pr
    banded = c.metric == "latency"
    shown = [points[i] for i in drawn]
    table = [points[i] for i in tabled]
    spec = chart_spec(shown, project=project.name, metric=c.metric, banded=banded, alerts=alerts)
    label, unit, kind = METRICS[c.metric]
    return page(
        "trends.html",
        **base,
        choice=c,
        testbeds=testbeds,
        branches=branches,
        cases=cases,
        kernels=kernels,
        total=total,
        drawn=len(drawn),
        cut=cut,
        max_points=MAX_POINTS,
        spec=spec if total else None,
        table=table,
        page_no=page_no,
        pages=pages,
        newer=c.query(page=page_no - 1) if page_no > 1 else None,
        older=c.query(page=page_no + 1) if page_no < pages else None,
        label=label,
        unit=unit,
        fmt=lambda v: fmt_value(kind, v),
        banded=banded,
        alerts=alerts,
        reasons=reasons,
        marks=MARKS,
    )
