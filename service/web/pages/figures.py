"""Plotly figure specs of the run and comparison pages, built from the typed stored documents
(``service.runs.documents``, ``service.comparisons.documents``). Colours come from Okabe and Ito's palette and every
colour is doubled by a marker symbol, a pattern or a legend entry in words, so that nothing is told by colour alone."""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from profiler_core import units
from profiler_core.documents.comparison import Finding
from profiler_core.documents.result import PHASES, Case, Kernel, LatencyStats, Peaks
from service.web.render import PALETTE, fmt_num, fmt_pct, fmt_us

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
# The findings that the comparison chart draws: relative changes of the timing and DRAM metrics (variance
# changes run to hundreds of percent and would flatten them; they stay in the table).
CHARTED_METRICS = ("latency", "bandwidth", "throughput", "dram_bytes")


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


def comparison_changes(findings: list[Finding], thresholds: dict[str, float], link_base: str) -> Spec | None:
    """Relative change (%) of each case's timing and DRAM findings with its confidence interval as error bars;
    regressions vermillion diamonds, improvements blue discs, the rest grey or orange open markers, each
    status a legend entry in words; the minimum effect of the timing metrics drawn as a band around zero."""
    charted = [(f, f.change) for f in findings if f.metric in CHARTED_METRICS and f.change is not None]
    if not charted:
        return None
    order = list(dict.fromkeys(f.case for f, _ in charted))
    data = []
    for status, (colour, symbol) in _STATUS_STYLE.items():
        group = [(f, 100.0 * change) for f, change in charted if f.status == status]
        if not group:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": status,
                "x": [f.case for f, _ in group],
                "y": [y for _, y in group],
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": [100.0 * f.ci.high - y if f.ci else 0 for f, y in group],
                    "arrayminus": [y - 100.0 * f.ci.low if f.ci else 0 for f, y in group],
                    "color": colour,
                },
                "marker": {"color": colour, "symbol": symbol, "size": 12, "line": {"color": colour, "width": 2}},
                "text": [_finding_hover(f) for f, _ in group],
                "hovertemplate": "%{text}<extra></extra>",
                "customdata": [f"{link_base}#{case_anchor(f.case)}" for f, _ in group],
            }
        )
    band = max((float(thresholds.get(m, 0.0)) for m in ("latency", "bandwidth", "throughput")), default=0.0)
    shapes = []
    if band > 0:
        shapes.append(
            {
                "type": "rect",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": -100.0 * band,
                "y1": 100.0 * band,
                "fillcolor": "rgba(89,89,89,0.12)",
                "line": {"width": 0},
                "layer": "below",
            }
        )
    return {
        "data": data,
        "layout": {
            "height": 380,
            "xaxis": {
                "type": "category",
                "tickangle": -35,
                "automargin": True,
                "categoryorder": "array",
                "categoryarray": order,
            },
            "yaxis": {"title": {"text": "change, candidate vs baseline (%)"}, "zeroline": True},
            "shapes": shapes,
            "legend": {"orientation": "h", "y": 1.12, "x": 0},
            "margin": {"l": 70, "r": 20, "t": 30, "b": 120},
        },
        "links": True,
    }


def _finding_hover(f: Finding) -> str:
    parts = [f"<b>{_plain(f.case)}</b> · {f.metric} {f.status}", f"change {fmt_pct(f.change, 1, True)}"]
    if f.ci:
        parts.append(f"{100 * f.ci.level:.0f}% CI {fmt_pct(f.ci.low, 1, True)} … {fmt_pct(f.ci.high, 1, True)}")
    if f.threshold is not None:
        parts.append(f"minimum effect ±{fmt_pct(f.threshold)}")
    if f.q is not None:
        parts.append(f"q = {f.q:.3g}")
    return "<br>".join(parts)
