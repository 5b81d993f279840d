"""Plotly figure specs of the run and comparison pages, built from the typed stored documents
(``attnprof.server.runs.documents``, ``attnprof.server.comparisons.documents``). Colours come from Okabe and Ito's
palette and every colour is doubled by a marker symbol, a pattern or a legend entry in words, so that nothing is told
by colour alone."""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from attnprof.core import units
from attnprof.core.documents.comparison import Finding
from attnprof.core.documents.result import PHASES, Case, Kernel, LatencyStats, Peaks
from attnprof.server.github import regressions
from attnprof.server.web.render import PALETTE, fmt_num, fmt_pct, fmt_us

Spec = dict[str, Any]
# Yellow is left out of the markers: it hardly shows on white.
_MARKER_COLOURS = [c for c in PALETTE if c != "#F0E442"]
_SYMBOLS = [
    "circle",
    "square",
    "diamond",
    "triangle-up",
    "triangle-down",
    "cross",
    "x",
    "star",
    "pentagon",
    "hexagon",
    "triangle-left",
]
_PATTERNS = ["", "/", "\\", "x", "-", "|", "+", "."]
_BOUND_ORDER = ["compute", "memory", "balanced", "latency", None]
VERMILLION, BLUE, GREY, ORANGE = "#D55E00", "#0072B2", "#595959", "#E69F00"
_LEGEND_BELOW = {"orientation": "h", "y": -0.25, "x": 0}
# The findings that the comparison chart draws: the timing metrics, each as the change of the case's time per
# iteration (``time_change``), so that one quantity is plotted and up is worse. DRAM bytes and variance are other
# quantities (variance changes run to hundreds of percent); they stay in the findings table.
CHARTED_METRICS = ("latency", "bandwidth", "throughput")


def case_anchor(case_id: str) -> str:
    """A stable HTML id for a case (case ids hold brackets, commas and equals signs)."""
    return "case-" + hashlib.sha1(case_id.encode()).hexdigest()[:12]


def _plain(text: str) -> str:
    # Plotly reads a subset of HTML in hover text: a kernel name's template brackets must not look like tags.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def phase_style(phase: str) -> tuple[str, str]:
    """Marker colour and symbol of a phase: the same phase looks the same on every chart."""
    i = PHASES.index(phase) if phase in PHASES else len(PHASES) - 1
    return _MARKER_COLOURS[i % len(_MARKER_COLOURS)], _SYMBOLS[i % len(_SYMBOLS)]


def _positive(value: Any) -> float | None:
    if isinstance(value, int | float) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def kernel_intensity(kernel: Kernel) -> float | None:
    """Arithmetic intensity of a kernel, FLOP per byte: the document's, or its FLOPs over its bytes."""
    ai = _positive(kernel.arithmetic_intensity)
    if ai is not None:
        return ai
    flops, nbytes = _positive(kernel.flops), _positive(kernel.bytes)
    return flops / nbytes if flops is not None and nbytes is not None else None


def on_roofline(kernel: Kernel) -> bool:
    """Whether a kernel has a place on the roofline: floating-point work and bytes (copies and fills have none)."""
    return kernel_intensity(kernel) is not None and _positive(kernel.tflops) is not None


def roofline(case: Case, peaks: Peaks) -> Spec | None:
    """Arithmetic intensity (FLOP/byte) against achieved TFLOP/s on log-log axes: one point per kernel that does
    floating-point work, coloured and shaped by phase, under the device's bandwidth and compute ceilings (the
    document's peaks). None when no kernel of the case has a place on it."""
    kernels = [k for k in case.kernels if on_roofline(k)]
    if not kernels:
        return None
    bw_gbps = peaks.dram_gbps.value
    tflops_peaks = peaks.tflops
    dtype = str(case.params.get("dtype", ""))
    shown = [d for d in dict.fromkeys([dtype, "fp32"]) if d in tflops_peaks] or list(tflops_peaks)[:1]
    ais = [kernel_intensity(k) or 1.0 for k in kernels]
    ridges = {d: tflops_peaks[d].value * 1000.0 / bw_gbps for d in shown}
    lo = min([*ais, *ridges.values()]) / 4
    hi = max([*ais, *ridges.values()]) * 4
    data: list[dict[str, Any]] = []
    top = max(shown, key=lambda d: tflops_peaks[d].value)
    # Whole decades around the points and the ceilings, so that the axes are labelled at powers of ten.
    y_lo = 10 ** math.floor(math.log10(min(lo * bw_gbps / 1000.0, *(k.tflops or 0.0 for k in kernels))))
    y_hi = 10 ** math.ceil(math.log10(tflops_peaks[top].value * 1.2))
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"DRAM bandwidth ceiling {units.fmt_gbps(bw_gbps)} ({peaks.dram_gbps.source})",
            "x": [lo, ridges[top]],
            "y": [lo * bw_gbps / 1000.0, tflops_peaks[top].value],
            "line": {"color": GREY, "width": 2},
            "hoverinfo": "name",
        }
    )
    for i, d in enumerate(shown):
        peak = tflops_peaks[d]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{d} compute ceiling {units.fmt_tflops(peak.value)} ({peak.source})",
                "x": [ridges[d], hi],
                "y": [peak.value] * 2,
                "line": {"color": GREY, "width": 2, "dash": "solid" if i == 0 else "dash"},
                "hoverinfo": "name",
            }
        )
    by_phase: dict[str, list[Kernel]] = {}
    for k in kernels:
        by_phase.setdefault(k.phase, []).append(k)
    for phase in sorted(by_phase, key=lambda p: PHASES.index(p) if p in PHASES else len(PHASES)):
        colour, symbol = phase_style(phase)
        points = by_phase[phase]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": phase,
                "x": [kernel_intensity(k) for k in points],
                "y": [k.tflops for k in points],
                "text": [_kernel_hover(k) for k in points],
                "hovertemplate": "%{text}<extra></extra>",
                "marker": {"color": colour, "symbol": symbol, "size": 11, "line": {"color": "#000", "width": 1}},
            }
        )
    return {
        "data": data,
        "layout": {
            "height": 380,
            "xaxis": {
                "type": "log",
                "dtick": 1,
                "range": [math.log10(lo), math.log10(hi)],
                "title": {"text": "arithmetic intensity (FLOP/byte)"},
            },
            "yaxis": {
                "type": "log",
                "dtick": 1,
                "range": [math.log10(y_lo), math.log10(y_hi)],
                "title": {"text": "achieved TFLOP/s"},
            },
            "legend": _LEGEND_BELOW,
            "margin": {"l": 70, "r": 20, "t": 10, "b": 60},
        },
        "links": False,
    }


def _kernel_hover(k: Kernel) -> str:
    share = k.share
    return "<br>".join(
        [
            f"<b>{_plain(k.key)}</b>",
            f"{_plain(k.name)[:120]}",
            f"phase {k.phase} · {fmt_us(k.duration_us.median)} per iteration"
            + (f" ({fmt_pct(share)} of the case)" if share is not None else ""),
            f"{fmt_num(kernel_intensity(k))} FLOP/byte · {units.fmt_tflops(k.tflops)} · {units.fmt_gbps(k.gbps)}",
            f"bound: {k.bound or 'undecided'}",
        ]
    )


def _latency_hover(lat: LatencyStats) -> str:
    """``median 10.4 ms (p25–p75 10.3–10.6 ms)``: a bar's hover, in the unit the tables use."""
    return f"median {fmt_us(lat.median)} (p25–p75 {units.fmt_duration_range_us(lat.p25, lat.p75)})"


def _timed(cases: list[Case]) -> list[tuple[Case, LatencyStats]]:
    return [(c, c.latency_us) for c in cases if c.latency_us]


def case_latency(cases: list[Case], link_base: str) -> Spec | None:
    """The median latency of every timed case (µs) with its p25–p75 as error bars, one trace per bound (colour,
    pattern and legend entry); a click opens the case's details below."""
    timed = _timed(cases)
    if not timed:
        return None
    data = []
    for i, bound in enumerate(_BOUND_ORDER):
        group = [(c, lat) for c, lat in timed if (c.achieved.bound if c.achieved else None) == bound]
        if not group:
            continue
        data.append(
            {
                "type": "bar",
                "name": f"{bound}-bound" if bound else "bound undecided",
                "x": [c.id for c, _ in group],
                "y": [lat.median for _, lat in group],
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": [lat.p75 - lat.median for _, lat in group],
                    "arrayminus": [lat.median - lat.p25 for _, lat in group],
                },
                "marker": {"color": _MARKER_COLOURS[i], "pattern": {"shape": _PATTERNS[i]}},
                "customdata": [f"{link_base}#{case_anchor(c.id)}" for c, _ in group],
                "hovertext": [_latency_hover(lat) for _, lat in group],
                "hovertemplate": "%{x}<br>%{hovertext}<extra>%{fullData.name}</extra>",
            }
        )
    medians = [lat.median for _, lat in timed if lat.median > 0]
    wide = bool(medians) and max(medians) / min(medians) > 20
    return {
        "data": data,
        "layout": {
            "height": 340,
            "barmode": "overlay",
            "xaxis": {
                "type": "category",
                "tickangle": -35,
                "automargin": True,
                "categoryorder": "array",
                "categoryarray": [c.id for c, _ in timed],
            },
            "yaxis": _latency_axis(wide),
            "legend": {"orientation": "h", "y": 1.12, "x": 0},
            "margin": {"l": 70, "r": 20, "t": 30, "b": 120},
        },
        "links": True,
    }


def _latency_axis(wide: bool) -> dict[str, Any]:
    """A latency axis: logarithmic, labelled at each power of ten, when the values span more than 20 times."""
    axis: dict[str, Any] = {"title": {"text": "latency median (µs)"}, "type": "log" if wide else "linear"}
    if wide:
        axis["dtick"] = 1
    return axis


def _without_backend(case_id: str) -> str:
    label = re.sub(r"(?<=[\[,])backend=[^,\]]*,?", "", case_id).replace(",]", "]").replace("[]", "")
    return label or case_id


def backend_groups(cases: list[Case]) -> dict[str, list[tuple[str, Case]]]:
    """Cases that differ only in the backend they asked for, grouped by what they share (label → (backend,
    case) pairs); only groups with two backends or more."""
    groups: dict[str, list[tuple[str, Case]]] = {}
    labels: dict[str, str] = {}
    for c in cases:
        params = dict(c.params)
        backend = params.pop("backend", None) or c.backend_requested
        if not backend or not c.latency_us:
            continue
        key = json.dumps([c.target, c.name, params], sort_keys=True, default=str)
        labels.setdefault(key, _without_backend(c.id))
        groups.setdefault(key, []).append((str(backend), c))
    return {labels[k]: v for k, v in groups.items() if len({b for b, _ in v}) > 1}


def backend_comparison(cases: list[Case]) -> Spec | None:
    """Latency per backend (bars, µs, with p25–p75 error bars) for each group of cases that differ only in the
    backend; None when the suite ran one backend per case."""
    groups = backend_groups(cases)
    if not groups:
        return None
    backends = list(dict.fromkeys(b for members in groups.values() for b, _ in members))
    data: list[dict[str, Any]] = []
    for i, backend in enumerate(backends):
        xs: list[str] = []
        ys: list[float] = []
        hi: list[float] = []
        lo: list[float] = []
        hover: list[str] = []
        for label, members in groups.items():
            for b, c in members:
                lat = c.latency_us
                if b == backend and lat is not None:
                    xs.append(label)
                    ys.append(lat.median)
                    hover.append(_latency_hover(lat))
                    hi.append(lat.p75 - lat.median)
                    lo.append(lat.median - lat.p25)
        data.append(
            {
                "type": "bar",
                "name": backend,
                "x": xs,
                "y": ys,
                "error_y": {"type": "data", "symmetric": False, "array": hi, "arrayminus": lo},
                "marker": {
                    "color": _MARKER_COLOURS[i % len(_MARKER_COLOURS)],
                    "pattern": {"shape": _PATTERNS[i % len(_PATTERNS)]},
                },
                "text": [backend] * len(xs),
                "textposition": "outside",
                "hovertext": hover,
                "hovertemplate": "%{x}<br>" + backend + ": %{hovertext}<extra></extra>",
            }
        )
    medians = [y for t in data for y in t["y"] if y > 0]
    wide = bool(medians) and max(medians) / min(medians) > 20
    return {
        "data": data,
        "layout": {
            "height": 360,
            "barmode": "group",
            "xaxis": {"type": "category"},
            "yaxis": _latency_axis(wide),
            "legend": {"orientation": "h", "y": 1.12, "x": 0, "title": {"text": "backend"}},
            "margin": {"l": 70, "r": 20, "t": 30, "b": 60},
        },
        "links": False,
    }


_STATUS_STYLE = {
    "regressed": (VERMILLION, "diamond"),
    "improved": (BLUE, "circle"),
    "inconclusive": (ORANGE, "square-open"),
    "unchanged": (GREY, "circle-open"),
}
# Findings with no duration to plot, drawn as flags along the top of the comparison chart when they regressed.
_FLAG_STYLE = {
    "status": ("case failed", "x"),
    "backend": ("backend switched", "star"),
    "accuracy": ("accuracy regressed", "hourglass"),
}
_FLAG_HOVER_CHARS = 300
# An interval may widen the chart's range by at most this fraction of the points' own span on each side; beyond
# it the interval is cut at the edge and the cut end marked, so that one wide interval does not flatten the rest.
_INTERVAL_ROOM = 0.5


# The PR comment's and the answer's lines print the same change of time (``attnprof.server.github.regressions``).
time_change = regressions.time_change
_rate_metric = regressions.is_rate


def worse_percent(f: Finding) -> tuple[float, tuple[float, float] | None] | None:
    """What the comparison chart plots for a timing finding: its change of time per iteration and the interval,
    in percent, positive = worse; None when it has no change."""
    rate = _rate_metric(f)
    y = time_change(f.change, rate)
    if y is None:
        return None
    interval = None
    if f.ci is not None:
        # A rate's interval turns over: its low end is the time's high end.
        ends = (time_change(f.ci.high, rate), time_change(f.ci.low, rate)) if rate else (f.ci.low, f.ci.high)
        if ends[0] is not None and ends[1] is not None:
            interval = (100.0 * ends[0], 100.0 * ends[1])
    return 100.0 * y, interval


def _chart_range(points: list[tuple[float, tuple[float, float] | None]], band: float) -> tuple[float, float]:
    """The y range (%): every point, zero and the band, and the intervals as far as ``_INTERVAL_ROOM`` allows."""
    ys = [y for y, _ in points]
    lo, hi = min([*ys, 0.0, -band]), max([*ys, 0.0, band])
    room = _INTERVAL_ROOM * max(hi - lo, 1.0)
    ends = [e for _, ci in points if ci is not None for e in ci]
    lo = min([lo, *(max(e, lo - room) for e in ends)])
    hi = max([hi, *(min(e, hi + room) for e in ends)])
    pad = 0.06 * (hi - lo)
    return lo - pad, hi + pad


def _band_percent(thresholds: dict[str, float]) -> float:
    """The largest minimum effect of the timing metrics as a change of time (%): a rate falling by t is the time
    rising by t / (1 − t)."""
    out = 0.0
    for metric in CHARTED_METRICS:
        t = float(thresholds.get(metric) or 0.0)
        if 0.0 < t < 1.0:
            out = max(out, t if metric == "latency" else t / (1.0 - t))
    return 100.0 * out


def comparison_changes(findings: list[Finding], thresholds: dict[str, float], link_base: str) -> Spec | None:
    """One quantity for every case: the change of its time per iteration (%), positive = worse whatever the
    finding's metric (latency up, bandwidth or throughput down), with its confidence interval as error bars cut at
    the chart's edge (a cut end marked by a triangle); regressions vermillion diamonds, improvements blue discs, the
    rest grey or orange open markers, each status a legend entry in words. A case that failed, switched backend
    or lost accuracy is a flag along the top, its own legend entry. The minimum effect is a band around zero."""
    charted = [(f, w) for f in findings if f.metric in CHARTED_METRICS and (w := worse_percent(f)) is not None]
    flags = [f for f in findings if f.metric in _FLAG_STYLE and f.status == "regressed"]
    if not charted and not flags:
        return None
    band = _band_percent(thresholds)
    lo, top = _chart_range([w for _, w in charted], band)
    # The flags get a row of their own above the range of the values; intervals are cut at that range.
    hi = top + 0.12 * (top - lo) if flags else top
    order = list(dict.fromkeys([*(f.case for f in flags), *(f.case for f, _ in charted)]))
    data: list[dict[str, Any]] = []
    for status, (colour, symbol) in _STATUS_STYLE.items():
        group = [(f, y, ci) for f, (y, ci) in charted if f.status == status]
        if not group:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": status,
                "x": [f.case for f, _, _ in group],
                "y": [y for _, y, _ in group],
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": [max(0.0, min(ci[1], top) - y) if ci else 0 for _, y, ci in group],
                    "arrayminus": [max(0.0, y - max(ci[0], lo)) if ci else 0 for _, y, ci in group],
                    "color": colour,
                },
                "marker": {"color": colour, "symbol": symbol, "size": 12, "line": {"color": colour, "width": 2}},
                "text": [_finding_hover(f, y, ci) for f, y, ci in group],
                "hovertemplate": "%{text}<extra></extra>",
                "customdata": [f"{link_base}#{case_anchor(f.case)}" for f, _, _ in group],
            }
        )
    with_ci = [(f.case, ci) for f, (_, ci) in charted if ci is not None]
    cut = [(case, lo, ci) for case, ci in with_ci if ci[0] < lo] + [
        (case, top, ci) for case, ci in with_ci if ci[1] > top
    ]
    if cut:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "interval runs past the chart",
                "x": [case for case, _, _ in cut],
                "y": [end for _, end, _ in cut],
                "cliponaxis": False,
                "marker": {
                    "color": GREY,
                    "symbol": ["triangle-down" if end == lo else "triangle-up" for _, end, _ in cut],
                    "size": 9,
                },
                "text": [
                    f"<b>{_plain(case)}</b><br>interval {_pct(ci[0])} … {_pct(ci[1])} runs past the chart"
                    for case, _, ci in cut
                ],
                "hovertemplate": "%{text}<extra></extra>",
            }
        )
    for metric, (name, symbol) in _FLAG_STYLE.items():
        flagged = [f for f in flags if f.metric == metric]
        if not flagged:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": name,
                "x": [f.case for f in flagged],
                "y": [(top + hi) / 2] * len(flagged),
                "marker": {"color": VERMILLION, "symbol": symbol, "size": 14, "line": {"color": "#000", "width": 1}},
                "text": [_flag_hover(f) for f in flagged],
                "hovertemplate": "%{text}<extra></extra>",
                "customdata": [f"{link_base}#{case_anchor(f.case)}" for f in flagged],
            }
        )
    shapes = []
    if band > 0:
        shapes.append(
            {
                "type": "rect",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": -band,
                "y1": band,
                "fillcolor": "rgba(89,89,89,0.12)",
                "line": {"width": 0},
                "layer": "below",
            }
        )
    return {
        "data": data,
        "layout": {
            "height": 400,
            "xaxis": {
                "type": "category",
                "tickangle": -35,
                "automargin": True,
                "categoryorder": "array",
                "categoryarray": order,
            },
            "yaxis": {
                "title": {"text": "↑ worse: change of time (%)"},
                "zeroline": True,
                "range": [lo, hi],
                "autorange": False,
                "ticksuffix": "%",
            },
            "shapes": shapes,
            # Above the plot, bottom-anchored: Plotly widens the top margin for it, so on a phone the entries wrap
            # onto rows of their own instead of over the points.
            "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
            "margin": {"l": 70, "r": 20, "t": 10, "b": 120},
        },
        "links": True,
    }


def _pct(percent: float) -> str:
    return fmt_pct(percent / 100.0, 1, True)


def _finding_hover(f: Finding, y: float, ci: tuple[float, float] | None) -> str:
    parts = [f"<b>{_plain(f.case)}</b> · {f.metric} {f.status}", f"time per iteration {_pct(y)}"]
    if f.metric != "latency":
        parts.append(f"{f.metric} {fmt_pct(f.change, 1, True)}")
    if ci is not None and f.ci is not None:
        parts.append(f"{100 * f.ci.level:.0f}% CI {_pct(ci[0])} … {_pct(ci[1])}")
    if f.threshold is not None:
        parts.append(f"minimum effect ±{fmt_pct(f.threshold)}")
    if f.q is not None:
        parts.append(f"q = {units.fmt_probability(f.q)}")
    return "<br>".join(parts)


def _flag_hover(f: Finding) -> str:
    was = "–" if f.baseline is None else str(f.baseline)
    now = "–" if f.candidate is None else str(f.candidate)
    detail = f.detail or ""
    if len(detail) > _FLAG_HOVER_CHARS:
        detail = detail[: _FLAG_HOVER_CHARS - 1] + "…"
    lines = [f"<b>{_plain(f.case)}</b> · {f.metric} {_plain(was)} → {_plain(now)}", _plain(detail)]
    return "<br>".join(line for line in lines if line)
