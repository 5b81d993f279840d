"""The trend chart: which points of a long series are drawn, and the Plotly figure of the drawn ones (median
line, p25-p75 band, the baseline and its minimum-effect band, alerts, failed comparisons, baseline pins and
excluded runs marked, each kind with its own symbol, and pull-request runs over the branch), on a commit or a time
axis."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from attnprof.contract.links import PATHS
from attnprof.core import units
from attnprof.server.web.render import PALETTE, fmt_num, fmt_pct, fmt_time, fmt_us

# metric -> (label, unit shown, kind of value). Utilisations and occupancy are fractions, shown as %.
METRICS: dict[str, tuple[str, str, str]] = {
    "latency": ("latency median", "µs", "us"),
    "throughput": ("throughput", "TFLOP/s", "rate"),
    "bandwidth": ("bandwidth", "GB/s", "rate"),
    "compute_util": ("compute utilisation", "%", "fraction"),
    "bandwidth_util": ("bandwidth utilisation", "%", "fraction"),
    "occupancy": ("theoretical occupancy", "%", "fraction"),
}
# Marks on the chart: rule or alert kind -> (legend name, Plotly marker symbol, colour). Symbols differ, so no
# mark is told by its colour alone.
MARKS = {
    # A failed comparison's open square is drawn first and larger: an alert's diamond on the same run shows inside.
    "fail": ("comparison failed", "square-x-open", PALETTE[7]),
    "change": ("alert (step)", "diamond", PALETTE[3]),
    "pin": ("baseline pin", "star", PALETTE[2]),
    "exclude": ("excluded from baselines", "x-thin-open", PALETTE[7]),
    "accept": ("accepted change", "triangle-up", PALETTE[4]),
}
_BAND = "rgba(0, 114, 178, 0.18)"
_EFFECT_BAND = "rgba(0, 158, 115, 0.14)"
# metric -> the unit ``attnprof.core.units.fmt_in_unit`` writes it in.
UNITS = {
    "latency": "us",
    "throughput": "TFLOP/s",
    "bandwidth": "GB/s",
    "compute_util": "fraction",
    "bandwidth_util": "fraction",
    "occupancy": "fraction",
}


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


def fmt_value(kind: str, value: float | None) -> str:
    """A trend's value: a duration in its unit, a fraction as a percentage, a rate as a number (its unit beside)."""
    if kind == "us":
        return fmt_us(value)
    if kind == "fraction":
        return fmt_pct(value)
    return fmt_num(value)


@dataclass(slots=True)
class ChartPoint:
    """A drawn or tabled run of the series (its commit, PR, baseline and marks filled in after the window is read).
    ``x``: its place on the commit axis (None on the time axis, or a run the commit order does not place)."""

    run_id: str
    created_at: datetime
    median: float | None
    p25: float | None
    p75: float | None
    marks: tuple[str, ...] = ()
    commit: str = ""
    pr: int | None = None
    branch: str = ""
    x: float | None = None
    baseline: float | None = None
    notes: tuple[str, ...] = ()


def fmt_in(metric: str, value: float | None) -> str:
    """A value of ``metric`` with its unit, as ``attnprof.core.units`` writes it: ``87.8 µs``, ``3,350 GB/s``."""
    return units.fmt_in_unit(value, UNITS[metric])


def _hover(p: ChartPoint, metric: str, banded: bool) -> str:
    where = f"PR #{p.pr}" if p.pr is not None else "no PR"
    if p.branch:
        where += f" · {p.branch}"
    lines = [f"commit {p.commit[:10]} · {where}", fmt_time(p.created_at), f"median {fmt_in(metric, p.median)}"]
    if banded:
        lines.append(f"p25–p75 {fmt_in(metric, p.p25)} – {fmt_in(metric, p.p75)}")
    if p.baseline is not None and p.median is not None and p.baseline:
        change = units.fmt_change(p.median / p.baseline - 1)
        lines.append(f"baseline {fmt_in(metric, p.baseline)} ({change} against it)")
    names = [MARKS[m][0] for m in p.marks if m in MARKS]
    if names:
        lines.append(", ".join(names))
    lines.extend(p.notes)
    return "<br>".join(lines)


def _value(v: float | None) -> float | None:
    """A value for the chart, to 6 significant digits (the page carries hundreds of them)."""
    return None if v is None or not math.isfinite(v) else float(f"{v:.6g}")


def _x(at: datetime) -> str:
    """A run's time on the chart's date axis, to the millisecond (runs uploaded in one second stay apart)."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@dataclass(frozen=True)
class Axis:
    """The chart's x axis: ``commit`` (the branch's commits in first-parent order, ``ticks`` labelling some) or
    ``time`` (when each run was stored)."""

    kind: str
    ticks: tuple[list[float], list[str]] = ([], [])

    def of(self, p: ChartPoint) -> float | str | None:
        return p.x if self.kind == "commit" else _x(p.created_at)


def _scatter(name: str, points: Sequence[ChartPoint], axis: Axis, y: list[float | None], **more: Any) -> dict[str, Any]:
    return {"type": "scatter", "name": name, "x": [axis.of(p) for p in points], "y": y, **more}


def chart_spec(
    shown: Sequence[ChartPoint],
    *,
    project: str,
    metric: str,
    banded: bool,
    axis: Axis,
    min_effect: float | None = None,
    prs: Sequence[ChartPoint] = (),
) -> dict[str, Any]:
    """The Plotly figure, back to front: the baseline the comparisons used with the minimum-effect band around it,
    the p25-p75 band, the median line with a marker per run, one trace per kind of mark (each its own legend entry
    and symbol: alerts at their step, failed comparisons, baseline rules), and the pull-request runs over it in
    another style. No text is written on the plot: what a mark means is in its hover and in the lists under it."""
    label, unit, kind = METRICS[metric]
    if axis.kind == "commit":
        shown = sorted((p for p in shown if p.x is not None), key=lambda p: (p.x, p.created_at))
        prs = sorted((p for p in prs if p.x is not None), key=lambda p: (p.x, p.created_at))
    links = [PATHS.ui_run(project, p.run_id) for p in shown]
    data: list[dict[str, Any]] = []
    if any(p.baseline is not None for p in shown):
        base = [_value(p.baseline) for p in shown]
        if min_effect:
            share = units.fmt_percent(min_effect, digits=1)
            low = [None if b is None else _value(b * (1 - min_effect)) for b in base]
            high = [None if b is None else _value(b * (1 + min_effect)) for b in base]
            common = {"mode": "lines", "line": {"width": 0, "shape": "hv"}, "hoverinfo": "skip"}
            data.append(_scatter(f"baseline −{share}", shown, axis, low, showlegend=False, **common))
            data.append(
                _scatter(
                    f"minimum-effect band (±{share})",
                    shown,
                    axis,
                    high,
                    fill="tonexty",
                    fillcolor=_EFFECT_BAND,
                    **common,
                )
            )
        data.append(
            _scatter(
                "baseline",
                shown,
                axis,
                base,
                mode="lines",
                line={"color": PALETTE[2], "width": 1.5, "dash": "dash", "shape": "hv"},
                hoverinfo="skip",
            )
        )
    if banded:
        skip = {"mode": "lines", "line": {"width": 0}, "hoverinfo": "skip"}
        data.append(_scatter("p25", shown, axis, [_value(p.p25) for p in shown], showlegend=False, **skip))
        data.append(
            _scatter(
                "p25–p75 band", shown, axis, [_value(p.p75) for p in shown], fill="tonexty", fillcolor=_BAND, **skip
            )
        )
    data.append(
        _scatter(
            "median",
            shown,
            axis,
            [_value(p.median) for p in shown],
            mode="lines+markers",
            line={"color": PALETTE[0], "width": 1.5},
            marker={"color": PALETTE[0], "size": 5, "symbol": "circle"},
            customdata=links,
            text=[_hover(p, metric, banded) for p in shown],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    for mark, (name, symbol, colour) in MARKS.items():
        marked = [p for p in shown if mark in p.marks]
        if not marked:
            continue
        data.append(
            _scatter(
                name,
                marked,
                axis,
                [_value(p.median) for p in marked],
                mode="markers",
                marker={
                    "symbol": symbol,
                    "size": 20 if mark == "fail" else 12,
                    "color": colour,
                    "line": {"width": 2, "color": colour},
                },
                customdata=[PATHS.ui_run(project, p.run_id) for p in marked],
                text=[_hover(p, metric, banded) for p in marked],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    if prs:
        data.append(
            _scatter(
                "pull-request runs",
                prs,
                axis,
                [_value(p.median) for p in prs],
                mode="markers",
                marker={"symbol": "circle-open", "size": 9, "color": PALETTE[4], "line": {"width": 2}},
                customdata=[PATHS.ui_run(project, p.run_id) for p in prs],
                text=[_hover(p, metric, banded) for p in prs],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    yaxis: dict[str, Any] = {
        "title": {"text": f"{label} ({unit})"},
        "rangemode": "tozero" if kind != "us" else "normal",
    }
    if kind == "fraction":
        yaxis["tickformat"] = ".0%"
    if axis.kind == "commit":
        xaxis: dict[str, Any] = {
            "type": "linear",
            "title": {"text": "commit, in first-parent order (pull requests just after their merge base)"},
            "tickmode": "array",
            "tickvals": axis.ticks[0],
            "ticktext": axis.ticks[1],
            "zeroline": False,
        }
    else:
        xaxis = {"type": "date", "title": {"text": "run time (UTC)"}}
    return {
        "data": data,
        "layout": {
            "height": 440,
            "margin": {"l": 70, "r": 20, "t": 20, "b": 60},
            "xaxis": xaxis,
            "yaxis": yaxis,
            "legend": {"orientation": "h", "y": -0.2},
        },
        "links": True,
    }
