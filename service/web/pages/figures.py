"""Plotly figure specs of the run and comparison pages, built from stored documents (plain dicts, validated when
they were stored). Colours come from Okabe and Ito's palette and every colour is doubled by a marker symbol, a
pattern or a legend entry in words, so that nothing is told by colour alone."""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from profiler_core.documents.result import PHASES
from service.web.render import PALETTE, fmt_pct, fmt_us

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


def kernel_intensity(kernel: dict[str, Any]) -> float | None:
    """Arithmetic intensity of a kernel, FLOP per byte: the document's, or its FLOPs over its bytes."""
    ai = _positive(kernel.get("arithmetic_intensity"))
    if ai is not None:
        return ai
    flops, nbytes = _positive(kernel.get("flops")), _positive(kernel.get("bytes"))
    return flops / nbytes if flops is not None and nbytes is not None else None


def on_roofline(kernel: dict[str, Any]) -> bool:
    """Whether a kernel has a place on the roofline: floating-point work and bytes (copies and fills have none)."""
    return kernel_intensity(kernel) is not None and _positive(kernel.get("tflops")) is not None


def roofline(case: dict[str, Any], peaks: dict[str, Any]) -> Spec | None:
    """Arithmetic intensity (FLOP/byte) against achieved TFLOP/s on log-log axes: one point per kernel that does
    floating-point work, coloured and shaped by phase, under the device's bandwidth and compute ceilings (the
    document's peaks). None when no kernel of the case has a place on it."""
    kernels = [k for k in case.get("kernels", []) if on_roofline(k)]
    if not kernels:
        return None
    bw_gbps = float(peaks["dram_gbps"]["value"])
    tflops_peaks: dict[str, dict[str, Any]] = peaks.get("tflops", {})
    dtype = str(case.get("params", {}).get("dtype", ""))
    shown = [d for d in dict.fromkeys([dtype, "fp32"]) if d in tflops_peaks] or list(tflops_peaks)[:1]
    ais = [kernel_intensity(k) or 1.0 for k in kernels]
    ridges = {d: float(tflops_peaks[d]["value"]) * 1000.0 / bw_gbps for d in shown}
    lo = min([*ais, *ridges.values()]) / 4
    hi = max([*ais, *ridges.values()]) * 4
    data: list[dict[str, Any]] = []
    top = max(shown, key=lambda d: float(tflops_peaks[d]["value"]))
    # Whole decades around the points and the ceilings, so that the axes are labelled at powers of ten.
    y_lo = 10 ** math.floor(math.log10(min(lo * bw_gbps / 1000.0, *(float(k["tflops"]) for k in kernels))))
    y_hi = 10 ** math.ceil(math.log10(float(tflops_peaks[top]["value"]) * 1.2))
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"DRAM bandwidth ceiling {bw_gbps:,.0f} GB/s ({peaks['dram_gbps']['source']})",
            "x": [lo, ridges[top]],
            "y": [lo * bw_gbps / 1000.0, float(tflops_peaks[top]["value"])],
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
                "name": f"{d} compute ceiling {float(peak['value']):,.0f} TFLOP/s ({peak['source']})",
                "x": [ridges[d], hi],
                "y": [float(peak["value"])] * 2,
                "line": {"color": GREY, "width": 2, "dash": "solid" if i == 0 else "dash"},
                "hoverinfo": "name",
            }
        )
    by_phase: dict[str, list[dict[str, Any]]] = {}
    for k in kernels:
        by_phase.setdefault(str(k.get("phase", "other")), []).append(k)
    for phase in sorted(by_phase, key=lambda p: PHASES.index(p) if p in PHASES else len(PHASES)):
        colour, symbol = phase_style(phase)
        points = by_phase[phase]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": phase,
                "x": [kernel_intensity(k) for k in points],
                "y": [k["tflops"] for k in points],
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


def _kernel_hover(k: dict[str, Any]) -> str:
    duration = k.get("duration_us", {}).get("median")
    share = k.get("share")
    return "<br>".join(
        [
            f"<b>{_plain(str(k.get('key', '')))}</b>",
            f"{_plain(str(k.get('name', '')))[:120]}",
            f"phase {k.get('phase')} · {fmt_us(duration)} per iteration"
            + (f" ({fmt_pct(share)} of the case)" if share is not None else ""),
            f"{kernel_intensity(k) or 0:.3g} FLOP/byte · {float(k.get('tflops') or 0):.3g} TFLOP/s"
            + f" · {float(k.get('gbps') or 0):,.0f} GB/s",
            f"bound: {k.get('bound') or 'undecided'}",
        ]
    )


def case_latency(cases: list[dict[str, Any]], link_base: str) -> Spec | None:
    """The median latency of every timed case (µs) with its p25–p75 as error bars, one trace per bound (colour,
    pattern and legend entry); a click opens the case's details below."""
    timed = [c for c in cases if c.get("latency_us")]
    if not timed:
        return None
    data = []
    for i, bound in enumerate(_BOUND_ORDER):
        group = [c for c in timed if (c.get("achieved") or {}).get("bound") == bound]
        if not group:
            continue
        lat = [c["latency_us"] for c in group]
        data.append(
            {
                "type": "bar",
                "name": f"{bound}-bound" if bound else "bound undecided",
                "x": [c["id"] for c in group],
                "y": [x["median"] for x in lat],
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": [x["p75"] - x["median"] for x in lat],
                    "arrayminus": [x["median"] - x["p25"] for x in lat],
                },
                "marker": {"color": _MARKER_COLOURS[i], "pattern": {"shape": _PATTERNS[i]}},
                "customdata": [f"{link_base}#{case_anchor(c['id'])}" for c in group],
                "hovertemplate": "%{x}<br>median %{y:.4g} µs<extra>%{fullData.name}</extra>",
            }
        )
    medians = [c["latency_us"]["median"] for c in timed if c["latency_us"]["median"] > 0]
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
                "categoryarray": [c["id"] for c in timed],
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


def backend_groups(cases: list[dict[str, Any]]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Cases that differ only in the backend they asked for, grouped by what they share (label → (backend,
    case) pairs); only groups with two backends or more."""
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    labels: dict[str, str] = {}
    for c in cases:
        params = dict(c.get("params") or {})
        backend = params.pop("backend", None) or c.get("backend_requested")
        if not backend or not c.get("latency_us"):
            continue
        key = json.dumps([c.get("target"), c.get("name"), params], sort_keys=True, default=str)
        labels.setdefault(key, _without_backend(str(c["id"])))
        groups.setdefault(key, []).append((str(backend), c))
    return {labels[k]: v for k, v in groups.items() if len({b for b, _ in v}) > 1}


def backend_comparison(cases: list[dict[str, Any]]) -> Spec | None:
    """Latency per backend (bars, µs, with p25–p75 error bars) for each group of cases that differ only in the
    backend; None when the suite ran one backend per case."""
    groups = backend_groups(cases)
    if not groups:
        return None
    backends = list(dict.fromkeys(b for members in groups.values() for b, _ in members))
    data = []
    for i, backend in enumerate(backends):
        xs, ys, hi, lo = [], [], [], []
        for label, members in groups.items():
            for b, c in members:
                if b == backend:
                    lat = c["latency_us"]
                    xs.append(label)
                    ys.append(lat["median"])
                    hi.append(lat["p75"] - lat["median"])
                    lo.append(lat["median"] - lat["p25"])
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
                "hovertemplate": "%{x}<br>" + backend + ": median %{y:.4g} µs<extra></extra>",
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


def comparison_changes(findings: list[dict[str, Any]], thresholds: dict[str, float], link_base: str) -> Spec | None:
    """Relative change (%) of each case's timing and DRAM findings with its confidence interval as error bars;
    regressions vermillion diamonds, improvements blue discs, the rest grey or orange open markers, each
    status a legend entry in words; the minimum effect of the timing metrics drawn as a band around zero."""
    charted = [f for f in findings if f.get("metric") in CHARTED_METRICS and isinstance(f.get("change"), int | float)]
    if not charted:
        return None
    order = list(dict.fromkeys(str(f["case"]) for f in charted))
    data = []
    for status, (colour, symbol) in _STATUS_STYLE.items():
        group = [f for f in charted if f.get("status") == status]
        if not group:
            continue
        change = [100.0 * f["change"] for f in group]
        ci = [f.get("ci") or {} for f in group]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": status,
                "x": [str(f["case"]) for f in group],
                "y": change,
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": [100.0 * c["high"] - y if "high" in c else 0 for c, y in zip(ci, change, strict=True)],
                    "arrayminus": [y - 100.0 * c["low"] if "low" in c else 0 for c, y in zip(ci, change, strict=True)],
                    "color": colour,
                },
                "marker": {"color": colour, "symbol": symbol, "size": 12, "line": {"color": colour, "width": 2}},
                "text": [_finding_hover(f) for f in group],
                "hovertemplate": "%{text}<extra></extra>",
                "customdata": [f"{link_base}#{case_anchor(str(f['case']))}" for f in group],
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


def _finding_hover(f: dict[str, Any]) -> str:
    ci = f.get("ci") or {}
    parts = [
        f"<b>{_plain(str(f['case']))}</b> · {f['metric']} {f['status']}",
        f"change {fmt_pct(f.get('change'), 2, True)}",
    ]
    if ci:
        level = f"{100 * ci.get('level', 0):.0f}% CI"
        parts.append(f"{level} {fmt_pct(ci['low'], 2, True)} … {fmt_pct(ci['high'], 2, True)}")
    if f.get("threshold") is not None:
        parts.append(f"minimum effect ±{fmt_pct(f['threshold'])}")
    if f.get("q") is not None:
        parts.append(f"q = {float(f['q']):.3g}")
    return "<br>".join(parts)
