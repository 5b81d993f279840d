"""The trend chart: which points of a long series are drawn, and the Plotly figure of the drawn ones (median
line, p25-p75 band, change points, baseline pins and excluded runs marked, each kind with its own symbol)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from attnprof.contract.links import PATHS
from service.web.render import PALETTE, fmt_num, fmt_pct, fmt_time, fmt_us

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
    "change": ("change point", "diamond", PALETTE[3]),
    "pin": ("baseline pin", "star", PALETTE[2]),
    "exclude": ("excluded from baselines", "x-thin-open", PALETTE[7]),
    "accept": ("accepted change", "triangle-up", PALETTE[4]),
}
_BAND = "rgba(0, 114, 178, 0.18)"


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
    """A drawn or tabled run of the series (its commit and PR filled in after the window is read)."""

    run_id: str
    created_at: datetime
    median: float | None
    p25: float | None
    p75: float | None
    marks: tuple[str, ...] = ()
    commit: str = ""
    pr: int | None = None


def _hover(p: ChartPoint, unit_kind: str, unit: str, banded: bool) -> str:
    where = f"PR #{p.pr}" if p.pr is not None else "no PR"
    value = fmt_value(unit_kind, p.median)
    if unit_kind == "rate" and p.median is not None:
        value += f" {unit}"
    lines = [f"commit {p.commit[:10]} · {where}", fmt_time(p.created_at), f"median {value}"]
    if banded:
        lines.append(f"p25–p75 {fmt_value(unit_kind, p.p25)} – {fmt_value(unit_kind, p.p75)}")
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
    shown: Sequence[ChartPoint],
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
    links = [PATHS.ui_run(project, p.run_id) for p in shown]
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
                "customdata": [PATHS.ui_run(project, p.run_id) for p in marked],
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
