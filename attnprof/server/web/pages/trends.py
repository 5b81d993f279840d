"""Trends of a case (or one of its kernels) over a branch's runs: the median with its p25-p75 band, the baseline
the comparisons used with the minimum-effect band around it, alerts at their step, failed comparisons, baseline
pins and excluded runs marked, pull-request runs over the default branch, on a commit-order or a time axis; the
case's alerts listed under the chart (an admin acknowledges one there) and the numbers in a paged table below.

The series is read whole for the chosen window (one index range scan, see ``attnprof.server.trends.repository``) and
downsampled for drawing only: the table pages through every point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any, cast
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy import select

from attnprof.contract.links import PATHS
from attnprof.server.bisections import service as bisections
from attnprof.server.bisections.models import Bisection
from attnprof.server.comparisons import alert_webhook, alerts
from attnprof.server.comparisons import repository as comparison_rows
from attnprof.server.config import Settings
from attnprof.server.db import INT_MAX, SessionDep
from attnprof.server.errors import Conflict, InvalidPayload
from attnprof.server.testbeds import repository as testbeds_repo
from attnprof.server.trends import repository as trends
from attnprof.server.web import repository, trend_repository
from attnprof.server.web.dependencies import PageError, ViewerDep, not_found, signer
from attnprof.server.web.pages import trend_context
from attnprof.server.web.pages.trend_chart import MARKS, METRICS, Axis, ChartPoint, chart_spec, downsample, fmt_value
from attnprof.server.web.render import page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)

# The most points of one window read for a page; a longer window is cut and the page says so.
MAX_POINTS = 20_000
TABLE_ROWS = 50
CHOICES = 200
CASE_METRICS = tuple(trends.CASE_METRICS)
KERNEL_METRICS = tuple(trends.KERNEL_METRICS)
AXES = ("commit", "time")
TICKS = 12
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
    axis: str = "commit"
    prs: str = "on"

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
            "x": self.axis,
            "prs": self.prs,
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
    x: str | None = None,
    prs: str | None = None,
) -> tuple[Choice, list[str], list[str]]:
    """Check every query value against what the project has; a wrong one is a 422 naming it. Returns the choice,
    the branches and the cases to offer. The case defaults to the one that regressed last on the branch and testbed
    (the newest failed comparison's, or the newest regression alert's), else to the first case of the newest run."""
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
    axis = x or "commit"
    if axis not in AXES:
        raise _bad("x", f"{axis!r} is not one of {', '.join(AXES)} (commit order, or when each run was stored)")
    shown_prs = prs or "on"
    if shown_prs not in ("on", "off"):
        raise _bad("prs", f"{shown_prs!r} is not on or off (pull-request runs over the default branch)")
    first, last = _day("since", since), _day("until", until)
    if first is not None and last is not None and first > last:
        raise _bad("since", f"{first} is after until ({last})")
    cases = trend_repository.trend_case_ids(session, project.id, tb.id, chosen_branch, CHOICES)
    chosen_case = case or trend_context.most_recently_regressed(
        session, project.id, tb.id, chosen_branch, project.default_branch
    )
    chosen_case = chosen_case or (cases[0] if cases else "")
    if chosen_case and chosen_case not in cases:
        cases = [chosen_case, *cases]
    choice = Choice(tb.id, tb.name, chosen_branch, chosen_case, kernel, metric, first, last, axis, shown_prs)
    return choice, branches, cases


def _series(session: SessionDep, viewer: ViewerDep, c: Choice) -> tuple[list[Any], bool]:
    """Every point of the window as rows (run_id, created_at, median, p25, p75), oldest first, and whether the
    window held more than ``MAX_POINTS``. Rows, not ``ChartPoint``s: only the drawn and tabled ones become objects."""
    tq = _tq(viewer, c, MAX_POINTS + 1)
    if c.kernel:
        rows = trend_repository.kernel_series(session, tq, c.kernel, c.metric)
    else:
        rows = trend_repository.case_series(session, tq, c.metric)
    cut = len(rows) > MAX_POINTS
    return cast(list[Any], rows[:MAX_POINTS] if cut else rows), cut


def _tq(viewer: ViewerDep, c: Choice, limit: int) -> trends.TrendQuery:
    since = datetime.combine(c.since, time(), UTC) if c.since else None
    until = datetime.combine(c.until + timedelta(days=1), time(), UTC) if c.until else None
    return trends.TrendQuery(
        project_id=viewer.project.id,
        testbed_id=c.testbed_id,
        branch=c.branch,
        case_id=c.case,
        since=since,
        until=until,
        after=None,
        limit=limit,
    )


def _ticks(order: trend_context.CommitOrder, xs: Sequence[float]) -> tuple[list[float], list[str]]:
    """At most ``TICKS`` labelled commits, evenly spread over those drawn."""
    places = sorted({int(x) for x in xs if x == int(x)})
    if not places:
        return [], []
    step = max(1, math.ceil(len(places) / TICKS))
    kept = places[::step]
    return [float(p) for p in kept], [order.commits[p][:7] for p in kept]


def _alert_rows(session: SessionDep, found: Sequence[Any]) -> list[dict[str, Any]]:
    """The case's alerts for the list under the chart, newest first, each with its size and interval in units
    and the commits around it."""
    commits = comparison_rows.commits_of(session, [r for a in found for r in (a.before_run_id, a.run_id)])
    ids = [a.bisection_id for a in found if a.bisection_id is not None]
    states = dict(session.execute(select(Bisection.id, Bisection.status).where(Bisection.id.in_(ids))).all())
    out = []
    for a in reversed(found):
        out.append(
            {
                "alert": a,
                "size": alert_webhook.size(a),
                "interval": alert_webhook.interval(a),
                "last_good": commits.get(a.before_run_id, ("", None))[0],
                "first_bad": commits.get(a.run_id, ("", None))[0],
                # a person may bisect the step again once its bisection ended without a culprit
                "bisection_ended": states.get(a.bisection_id) in ("failed", "cancelled", "not_reproduced"),
            }
        )
    return out


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
    x: Annotated[str | None, Query(max_length=32)] = None,
    prs: Annotated[str | None, Query(max_length=32)] = None,
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
        x=x,
        prs=prs,
    )
    keys = trend_repository.kernel_keys(session, project.id, c.testbed_id, c.branch, c.case, CHOICES)
    kernels = [k._asdict() for k in keys]
    if c.kernel and c.kernel not in {k["key"] for k in kernels}:
        kernels.insert(0, {"key": c.kernel, "phase": "?", "duration_median_us": None})
    rows, cut = _series(session, viewer, c) if c.case else ([], False)
    ids = [r[0] for r in rows]
    at = {run_id: i for i, run_id in enumerate(ids)}
    marks: dict[int, tuple[str, ...]] = {}
    notes: dict[str, list[str]] = {}

    def mark(run_id: str, kind: str) -> None:
        if run_id in at:
            marks[at[run_id]] = (*marks.get(at[run_id], ()), kind)

    found_alerts = (
        [] if c.kernel else trend_repository.trend_alerts(session, project.id, c.testbed_id, c.case, c.metric)
    )
    alert_list = _alert_rows(session, found_alerts)
    for row in alert_list:
        a = row["alert"]
        mark(a.run_id, "change")
        what = "regression" if a.regression else "improvement"
        notes.setdefault(a.run_id, []).append(
            f"alert: {what} {row['size']}, after {row['last_good'][:10]}"
            + (" (acknowledged)" if a.acknowledged_at else "")
        )
    failed = (
        {} if c.kernel else trend_context.failed_for_case(session, c.case, trend_repository.failed_of(session, ids))
    )
    for run_id, why in failed.items():
        mark(run_id, "fail")
        notes.setdefault(run_id, []).append(f"comparison failed: {why}")
    reasons: dict[tuple[str, str], str] = {}
    for rule in trend_repository.baseline_marks(session, project.id):
        if rule.run_id in at and rule.kind in MARKS:
            mark(rule.run_id, rule.kind)
            if rule.reason:
                reasons[(rule.kind, rule.run_id)] = rule.reason
    order = trend_context.commit_order(
        (run_id, commit, nearest, rows[at[run_id]][1])
        for run_id, commit, nearest in (trend_repository.commits_of(session, ids) if c.axis == "commit" else [])
    )
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
        points[i] = ChartPoint(run_id, at_time, median, p25, p75, marks.get(i, ()), notes=tuple(notes.get(run_id, ())))
    details = trend_repository.run_details(session, [p.run_id for p in points.values()])
    compared = {} if c.kernel else trend_repository.comparisons_of(session, [p.run_id for p in points.values()])
    levels = trend_context.baseline_levels(session, c.case, c.metric, compared)
    for p in points.values():
        found = details.get(p.run_id)
        if found is not None:
            p.commit, p.pr = found.commit, found.pr
            p.x = float(order.place[found.commit]) if found.commit in order.place else None
        p.baseline = levels.get(p.run_id)
    banded = c.metric == "latency"
    shown = [points[i] for i in drawn]
    table = [points[i] for i in tabled]
    others = [b for b in branches if b != project.default_branch]
    overlay, unplaced = _pull_requests(session, viewer, c, order, others, settings.dashboard.series_points)
    min_effect = None
    if rows and not c.kernel:
        min_effect = trend_context.minimum_effect(session, ids[-1], c.case, c.metric)
    ticks = _ticks(order, [p.x for p in (*shown, *overlay) if p.x is not None]) if c.axis == "commit" else ([], [])
    axis = Axis(c.axis, ticks)
    spec = chart_spec(
        shown, project=project.name, metric=c.metric, banded=banded, axis=axis, min_effect=min_effect, prs=overlay
    )
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
        alerts={row["alert"].run_id: row["alert"] for row in alert_list},
        alert_list=alert_list,
        failed=failed,
        min_effect=min_effect,
        baselined=any(p.baseline is not None for p in shown),
        prs_drawn=len(overlay),
        prs_unplaced=unplaced,
        reasons=reasons,
        marks=MARKS,
        axes=AXES,
    )


def _pull_requests(
    session: SessionDep,
    viewer: ViewerDep,
    c: Choice,
    order: trend_context.CommitOrder,
    branches: Sequence[str],
    limit: int,
) -> tuple[list[ChartPoint], int]:
    """The pull-request runs drawn over the default branch (``prs=on``, a case's trend on the default branch): on
    the commit axis each just after its merge base; and how many the commit axis could not place (none of their
    ancestors has runs here)."""
    if c.prs != "on" or c.kernel or not c.case or c.branch != viewer.project.default_branch or not branches:
        return [], 0
    rows = trend_repository.pr_series(session, _tq(viewer, c, limit), c.metric, branches, limit)
    compared = trend_repository.comparisons_of(session, [r[0] for r in rows])
    levels = trend_context.baseline_levels(session, c.case, c.metric, compared)
    out, unplaced = [], 0
    for run_id, at_time, median, p25, p75, commit, pr, branch, base_commit, *nearest in rows:
        p = ChartPoint(run_id, at_time, median, p25, p75, commit=commit, pr=pr, branch=branch)
        p.baseline = levels.get(run_id)
        p.x = order.of_ancestors(base_commit, [a for a in nearest if a])
        if p.x is None and c.axis == "commit":
            unplaced += 1
        out.append(p)
    return out, unplaced


def _who(session: SessionDep, viewer: ViewerDep) -> str:
    """The acknowledging admin as the alert records it (an admin signs in with a token)."""
    if viewer.token_id is None:
        return f"{viewer.signed_in_as} (dashboard)"
    return alerts.who(session, viewer.token_id, via="dashboard")


@router.post("/alerts/{alert_id}/acknowledgement")
def acknowledge_alert(
    request: Request,
    viewer: ViewerDep,
    session: SessionDep,
    alert_id: Annotated[int, Path(ge=1, le=INT_MAX)],
    csrf: Annotated[str, Form(max_length=200)] = "",
    note: Annotated[str, Form(max_length=2000)] = "",
) -> RedirectResponse:
    """An admin acknowledges an alert from the trends page, with a note; back to the trend, at its alert list."""
    if not signer(request).check_csrf(viewer.session, csrf):
        raise PageError(403, "Form expired", "the form's security token is missing or stale: reload the page and retry")
    if not viewer.is_admin:
        raise PageError(
            403, "Not allowed", f"this token's role ({viewer.role}) cannot acknowledge alerts; it needs admin"
        )
    found = comparison_rows.get_alert(session, viewer.project.id, alert_id)
    if found is None:
        raise not_found(f"no alert {alert_id} in project {viewer.project.name}")
    if not note.strip():
        raise PageError(
            422, "Invalid input", "note: say why the alert needs no more attention (at most 2,000 characters)"
        )
    try:
        alerts.acknowledge(
            session,
            project_id=viewer.project.id,
            alert_id=alert_id,
            note=note.strip(),
            by=_who(session, viewer),
            token_id=viewer.token_id,
        )
    except Conflict as exc:
        raise PageError(409, "Already acknowledged", exc.detail) from exc
    testbed = testbeds_repo.get(session, found.testbed_id)
    back = PATHS.ui_trends(
        viewer.project.name, case=found.case_id, metric=found.metric, testbed=testbed.name if testbed else None
    )
    return RedirectResponse(f"{back}#alert-{alert_id}", status_code=303)


@router.post("/alerts/{alert_id}/bisect")
def bisect_alert(
    request: Request,
    viewer: ViewerDep,
    session: SessionDep,
    alert_id: Annotated[int, Path(ge=1, le=INT_MAX)],
    csrf: Annotated[str, Form(max_length=200)] = "",
) -> RedirectResponse:
    """A submit or admin token's person starts a bisection of the alert's step from the trends page (whatever its
    age, acknowledged or not); on to the bisection's page."""
    if not signer(request).check_csrf(viewer.session, csrf):
        raise PageError(403, "Form expired", "the form's security token is missing or stale: reload the page and retry")
    if viewer.github is not None or viewer.role not in ("submit", "admin"):
        raise PageError(
            403,
            "Not allowed",
            f"this sign-in's role ({viewer.role}) cannot start a bisection; it needs submit or admin",
        )
    found = comparison_rows.get_alert(session, viewer.project.id, alert_id)
    if found is None:
        raise not_found(f"no alert {alert_id} in project {viewer.project.name}")
    try:
        b = bisections.for_alert(session, found, by=_who(session, viewer), via="dashboard")
    except Conflict as exc:
        raise PageError(409, "Already searched", exc.detail) from exc
    except InvalidPayload as exc:
        raise PageError(422, "Invalid input", exc.detail) from exc
    session.commit()
    return RedirectResponse(PATHS.ui_bisection(viewer.project.name, b.id), status_code=303)
