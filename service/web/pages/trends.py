"""Trends of a case (or one of its kernels) over a branch's runs: the median with its p25-p75 band, change points,
baseline pins and excluded runs marked, and the numbers in a paged table below.

The series is read whole for the chosen window (one index range scan, see ``service.trends.repository``) and
downsampled for drawing only: the table pages through every point.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any, cast
from urllib.parse import urlencode

import numpy as np
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from service.config import Settings
from service.db import SessionDep
from service.trends import repository as trends
from service.web import repository
from service.web.dependencies import PageError, ViewerDep
from service.web.render import PALETTE, fmt_pct, fmt_time, fmt_us, page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)

# The most points of one window read for a page; a longer window is cut and the page says so.
MAX_POINTS = 20_000
TABLE_ROWS = 50
CHOICES = 200
# metric -> (label, unit shown, kind of value). Utilisations and occupancy are fractions, shown as %.
METRICS: dict[str, tuple[str, str, str]] = {
    "latency": ("latency median", "µs", "us"),
    "throughput": ("throughput", "TFLOP/s", "rate"),
    "bandwidth": ("bandwidth", "GB/s", "rate"),
    "compute_util": ("compute utilisation", "%", "fraction"),
    "bandwidth_util": ("bandwidth utilisation", "%", "fraction"),
    "occupancy": ("theoretical occupancy", "%", "fraction"),
}
CASE_METRICS = tuple(trends.CASE_METRICS)
KERNEL_METRICS = tuple(trends.KERNEL_METRICS)
# Marks on the chart: rule or alert kind -> (legend name, Plotly marker symbol, colour). Symbols differ, so no
# mark is told by its colour alone.
MARKS = {
    "change": ("change point", "diamond", PALETTE[3]),
    "pin": ("baseline pin", "star", PALETTE[2]),
    "exclude": ("excluded from baselines", "x-thin-open", PALETTE[7]),
    "accept": ("accepted change", "triangle-up", PALETTE[4]),
}
_BAND = "rgba(0, 114, 178, 0.18)"

Param = Annotated[str | None, Query(max_length=500)]


def downsample(values: Sequence[float | None], keep: Collection[int], budget: int) -> list[int]:
    """Indices of at most about ``budget`` points of ``values`` to draw, in order: the first and last, every index
    in ``keep`` (marked points, kept even past the budget), and the lowest and highest value of each of
    equal-width buckets of the rest, so a spike survives however long the series. ``None`` values are gaps and are
    never picked by a bucket."""
    n = len(values)
    if n <= budget:
        return list(range(n))
    chosen = {i for i in keep if 0 <= i < n} | {0, n - 1}
    buckets = max(1, (budget - len(chosen)) // 2)
    y = np.array([math.nan if v is None else float(v) for v in values], dtype=float)
    inner = np.arange(1, n - 1)
    bucket = (inner - 1) * buckets // (n - 2)
    finite = np.isfinite(y[inner])
    inner, bucket = inner[finite], bucket[finite]
    if inner.size:
        # Sorted by bucket, then value: each bucket's first entry is its lowest point, its last its highest.
        order = np.lexsort((y[inner], bucket))
        by_bucket = bucket[order]
        starts = np.flatnonzero(np.r_[True, by_bucket[1:] != by_bucket[:-1]])
        ends = np.r_[starts[1:], order.size] - 1
        chosen.update(inner[order[starts]].tolist())
        chosen.update(inner[order[ends]].tolist())
    return sorted(chosen)


def _bad(param: str, detail: str) -> PageError:
    return PageError(422, "Invalid input", f"{param}: {detail}")


def _day(param: str, value: str | None) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise _bad(param, f"{value!r} is not a date (YYYY-MM-DD)") from exc


def _fmt(kind: str, value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    if kind == "us":
        return fmt_us(value)
    if kind == "fraction":
        return fmt_pct(value)
    return f"{value:.4g}"


@dataclass(slots=True)
class Point:
    """A drawn or tabled run of the series (its commit and PR filled in after the window is read)."""

    run_id: str
    created_at: datetime
    median: float | None
    p25: float | None
    p75: float | None
    marks: tuple[str, ...] = ()
    commit: str = ""
    pr: int | None = None


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


def _hover(p: Point, unit_kind: str, unit: str, banded: bool) -> str:
    where = f"PR #{p.pr}" if p.pr is not None else "no PR"
    value = _fmt(unit_kind, p.median)
    if unit_kind == "rate" and p.median is not None:
        value += f" {unit}"
    lines = [f"commit {p.commit[:10]} · {where}", fmt_time(p.created_at), f"median {value}"]
    if banded:
        lines.append(f"p25–p75 {_fmt(unit_kind, p.p25)} – {_fmt(unit_kind, p.p75)}")
    names = [MARKS[m][0] for m in p.marks if m in MARKS]
    if names:
        lines.append(", ".join(names))
    return "<br>".join(lines)


def _value(v: float | None) -> float | None:
    """A value for the chart, to 6 significant digits (the page carries hundreds of them)."""
    return None if v is None or not math.isfinite(v) else float(f"{v:.6g}")


def _x(at: datetime) -> str:
    """A run's time on the chart's date axis, to the millisecond (runs uploaded in one second stay apart)."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def chart_spec(
    shown: Sequence[Point],
    *,
    project: str,
    metric: str,
    banded: bool,
    alerts: dict[str, Any],
) -> dict[str, Any]:
    """The Plotly figure: band, median line with markers, then one trace per kind of mark (so each has a legend
    entry and its own marker symbol), change points also as dashed vertical lines annotated with their change."""
    label, unit, kind = METRICS[metric]
    x = [_x(p.created_at) for p in shown]
    links = [f"/ui/p/{project}/runs/{p.run_id}" for p in shown]
    data: list[dict[str, Any]] = []
    if banded:
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "p25",
                "x": x,
                "y": [_value(p.p25) for p in shown],
                "line": {"width": 0},
                "hoverinfo": "skip",
                "showlegend": False,
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "p25–p75 band",
                "x": x,
                "y": [_value(p.p75) for p in shown],
                "line": {"width": 0},
                "fill": "tonexty",
                "fillcolor": _BAND,
                "hoverinfo": "skip",
            }
        )
    data.append(
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "median",
            "x": x,
            "y": [_value(p.median) for p in shown],
            "line": {"color": PALETTE[0], "width": 1.5},
            "marker": {"color": PALETTE[0], "size": 5, "symbol": "circle"},
            "customdata": links,
            "text": [_hover(p, kind, unit, banded) for p in shown],
            "hovertemplate": "%{text}<extra></extra>",
        }
    )
    for mark, (name, symbol, colour) in MARKS.items():
        marked = [p for p in shown if mark in p.marks]
        if not marked:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": name,
                "x": [_x(p.created_at) for p in marked],
                "y": [_value(p.median) for p in marked],
                "marker": {"symbol": symbol, "size": 14, "color": colour, "line": {"width": 2, "color": colour}},
                "customdata": [f"/ui/p/{project}/runs/{p.run_id}" for p in marked],
                "text": [_hover(p, kind, unit, banded) for p in marked],
                "hovertemplate": "%{text}<extra></extra>",
            }
        )
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for p in shown:
        alert = alerts.get(p.run_id)
        if alert is None:
            continue
        colour = PALETTE[3] if alert.regression else PALETTE[0]
        when = _x(p.created_at)
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": when,
                "x1": when,
                "y0": 0,
                "y1": 1,
                "line": {"color": colour, "width": 1.5, "dash": "dash"},
            }
        )
        what = "regression" if alert.regression else "improvement"
        notes.append(
            {
                "x": when,
                "xref": "x",
                "yref": "paper",
                "y": 1.0,
                "yanchor": "bottom",
                "text": f"{fmt_pct(alert.change, 1, True)} {what}",
                "showarrow": False,
                # Neighbouring change points take turns on two rows, so their labels do not overlap.
                "yshift": 14 * (len(notes) % 2),
                "font": {"color": colour, "size": 11},
            }
        )
    axis: dict[str, Any] = {"title": {"text": f"{label} ({unit})"}, "rangemode": "tozero" if kind != "us" else "normal"}
    if kind == "fraction":
        axis["tickformat"] = ".0%"
    return {
        "data": data,
        "layout": {
            "height": 420,
            "margin": {"l": 70, "r": 20, "t": 40, "b": 50},
            "xaxis": {"type": "date", "title": {"text": "run time (UTC)"}},
            "yaxis": axis,
            "legend": {"orientation": "h", "y": -0.18},
            "shapes": shapes,
            "annotations": notes,
        },
        "links": True,
    }


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
    branches = repository.branches(session, project.id, CHOICES)
    if branch:
        if branch not in branches:
            if not repository.has_branch(session, project.id, branch):
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
    cases = repository.trend_case_ids(session, project.id, tb.id, chosen_branch, CHOICES)
    chosen_case = case or (cases[0] if cases else "")
    if chosen_case and chosen_case not in cases:
        cases = [chosen_case, *cases]
    choice = Choice(tb.id, tb.name, chosen_branch, chosen_case, kernel, metric, first, last)
    return choice, branches, cases


def _series(session: SessionDep, viewer: ViewerDep, c: Choice) -> tuple[list[Any], bool]:
    """Every point of the window as rows (run_id, created_at, median, p25, p75), oldest first, and whether the
    window held more than ``MAX_POINTS``. Rows, not ``Point``s: only the drawn and tabled ones become objects."""
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
        rows = repository.kernel_series(session, tq, c.kernel, c.metric)
    else:
        rows = repository.case_series(session, tq, c.metric)
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
    keys = repository.kernel_keys(session, project.id, c.testbed_id, c.branch, c.case, CHOICES)
    kernels = [k._asdict() for k in keys]
    if c.kernel and c.kernel not in {k["key"] for k in kernels}:
        kernels.insert(0, {"key": c.kernel, "phase": "?", "duration_median_us": None})
    rows, cut = _series(session, viewer, c) if c.case else ([], False)
    at = {r[0]: i for i, r in enumerate(rows)}
    marks: dict[int, tuple[str, ...]] = {}
    alerts = {}
    if not c.kernel:
        alerts = {a.run_id: a for a in repository.trend_alerts(session, project.id, c.testbed_id, c.case, c.metric)}
    for run_id in alerts:
        if run_id in at:
            marks[at[run_id]] = (*marks.get(at[run_id], ()), "change")
    reasons: dict[tuple[str, str], str] = {}
    for rule in repository.baseline_marks(session, project.id):
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
        points[i] = Point(run_id, at_time, median, p25, p75, marks.get(i, ()))
    details = repository.run_details(session, [p.run_id for p in points.values()])
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
        fmt=lambda v: _fmt(kind, v),
        banded=banded,
        alerts=alerts,
        reasons=reasons,
        marks=MARKS,
    )
