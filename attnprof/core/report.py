"""The per-kernel report a person reads first: what ran, how long, and what bounds it. Torch-free."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC

from attnprof.core.attribution.reconcile import case_reconciliation
from attnprof.core.attribution.sdpa_calls import backends_line
from attnprof.core.counter_cache import heavy as kernels_to_count
from attnprof.core.documents import Case, Kernel, Peaks, ResultDocument
from attnprof.core.rounds import round_levels
from attnprof.core.units import MISSING, fmt_duration_range_us, fmt_duration_us, fmt_gbps, fmt_percent, fmt_tflops

KERNEL_COLUMNS = (
    "phase",
    "kernel",
    "launches",
    "latency",
    "share",
    "bound",
    "BW util",
    "compute util",
    "work from",
    "occupancy",
)
# Where a kernel's FLOPs and bytes (and so its utilisations and bound) came from (``Kernel.work_source``).
WORK_FROM = {"launch_metadata": "launch_metadata", "factory": "factory", "model": "model", "case": "case's work"}
COUNTER_COLUMNS = ("DRAM %", "SM %", "tensor %", "ncu bound")


def _num(x: float | None, digits: int = 1) -> str:
    return MISSING if x is None else f"{x:,.{digits}f}"


def peaks_origin(peaks: Peaks) -> str | None:
    """Where a run's peaks came from: ``cached, <date> UTC`` or ``measured now`` (or the datasheet), with why a
    calibration was not cached; None for a document older than the field."""
    words = []
    if peaks.origin == "cached":
        when = f", {peaks.measured_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if peaks.measured_at else ""
        words.append(f"cached{when}")
    elif peaks.origin is not None:
        words.append(peaks.origin)
    if peaks.note:
        words.append(f"not cached: {peaks.note}")
    return " · ".join(words) or None


def peaks_line(peaks: Peaks) -> str:
    """The peaks, and where they came from: the cache (with when they were measured), measured now, the datasheet."""
    dram = peaks.dram_gbps
    line = f"peaks {fmt_gbps(dram.value)} ({dram.source})" + "".join(
        f", {k} {fmt_tflops(v.value)} ({v.source})" for k, v in peaks.tflops.items()
    )
    origin = peaks_origin(peaks)
    return f"{line} · {origin}" if origin else line


def short_kernel(k: Kernel, width: int = 60) -> str:
    return k.key if len(k.key) <= width else k.key[: width - 1] + "…"


def case_headline(case: Case) -> str:
    """One line: status, backend, latency (median [p25–p75]), rates, bound, accuracy."""
    if case.status == "skipped" and case.error:
        return f"skipped: {case.error.message}"
    if case.status != "ok":
        err = f": {case.error.type}: {case.error.message.splitlines()[0]}" if case.error else ""
        return f"{case.status}{err}"
    parts = []
    if case.backend_used:
        parts.append(f"backend {case.backend_used}")
    lat = case.latency_us
    if lat:
        parts.append(
            f"{fmt_duration_us(lat.median)} [{fmt_duration_range_us(lat.p25, lat.p75)}], n={len(lat.samples)}, "
            f"cv {fmt_percent(lat.cv, digits=1)}"
        )
    a = case.achieved
    if a:
        parts.append(
            f"{fmt_tflops(a.tflops)} ({fmt_percent(a.compute_util)}), {fmt_gbps(a.gbps)} "
            f"({fmt_percent(a.bandwidth_util)}), {a.bound or MISSING}-bound"
        )
    if case.sm_clock_mhz:
        parts.append(f"SM clock under load {case.sm_clock_mhz:,.0f} MHz")
    if case.accuracy:
        acc = case.accuracy
        parts.append(
            f"accuracy {'ok' if acc.ok else 'FAILED'} (rel L2 {acc.rel_l2_err:.1e} ≤ {acc.tolerance:.0e})"
            if acc.ok
            else f"accuracy FAILED (rel L2 {acc.rel_l2_err:.1e} > {acc.tolerance:.0e})"
        )
    return "; ".join(parts)


def counter_class(k: Kernel) -> str:
    """The counters' class and where it came from: ``memory (ncu)``, ``compute (cached 2026-12-07)``; the model's
    guess is in the bound column beside it."""
    if k.counter_bound is None:
        return MISSING
    if k.counters_from == "cache":
        when = f" {k.counters_measured_at.astimezone(UTC):%Y-%m-%d}" if k.counters_measured_at else ""
        return f"{k.counter_bound} (cached{when})"
    return f"{k.counter_bound} (ncu)" if k.counters_from == "ncu" else k.counter_bound


def sdpa_line(case: Case) -> str | None:
    """The line under a case that made SDPA calls: the backend that ran and why PyTorch refused the fused ones it
    skipped, in its own words (``attnprof.core.attribution.sdpa_calls``)."""
    return backends_line(case.sdpa_calls or [], case.backend_used) if case.status == "ok" else None


def advice_lines(case: Case, *, limit: int = 3) -> list[str]:
    """The advice that helped, fastest first, each with both times as measured here; a rule's other tries are left
    out. Empty where none helped or none was tried."""
    helped = sorted((a for a in case.advice or [] if a.helps), key=lambda a: a.alternative_us / max(a.current_us, 1e-9))
    out = []
    for a in helped[:limit]:
        gain = 1.0 - a.alternative_us / a.current_us if a.current_us else 0.0
        line = (
            f"ADVICE ({a.rule}): {a.suggestion}: would take {fmt_duration_us(a.alternative_us)} instead of "
            f"{fmt_duration_us(a.current_us)} ({fmt_percent(gain, digits=0)} less, measured here)"
        )
        out.append(line + (f"; {a.note}" if a.note else ""))
    return out


def levels_line(case: Case) -> str | None:
    """The line under a case whose rounds landed on distinct levels (``attnprof.core.rounds``), else ``None``."""
    levels = round_levels(case.latency_us) if case.status == "ok" else None
    return f"LEVELS: {levels.describe()}" if levels else None


def kernel_rows(case: Case) -> Iterator[list[str]]:
    with_counters = any(k.counters for k in case.kernels)
    for k in case.kernels:
        row = [
            k.phase,
            short_kernel(k),
            _num(k.launches_per_iter, 0 if k.launches_per_iter.is_integer() else 1),
            fmt_duration_us(k.duration_us.median),
            fmt_percent(k.share),
            k.bound or MISSING,
            fmt_percent(k.bandwidth_util),
            fmt_percent(k.compute_util),
            WORK_FROM.get(k.work_source or "", MISSING),
            fmt_percent(k.theoretical_occupancy),
        ]
        if with_counters:
            c = k.counters or {}
            row += [
                _num(c.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"), 0),
                _num(c.get("sm__throughput.avg.pct_of_peak_sustained_elapsed"), 0),
                _num(c.get("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"), 0),
                counter_class(k),
            ]
        yield row


def reconciliation_line(case: Case, mode: str) -> str | None:
    """The line under a kernel table: the kernels' sum beside the case latency and the gap named.

    ``mode``: the run's (``cuda`` or ``cpu``), for documents older than the recorded reconciliation.
    """
    r = case_reconciliation(case, mode)
    if r is None:
        return None
    gap = f"gap {fmt_duration_us(r.gap_us)}" if r.gap_us >= 0 else f"{fmt_duration_us(-r.gap_us)} over"
    return (
        f"kernels {fmt_duration_us(r.kernel_sum_us)} of {fmt_duration_us(r.latency_us)} case latency "
        f"({fmt_percent(r.kernel_sum_us / r.latency_us)}); {gap}: {r.reason}"
    )


def no_kernels_line(case: Case) -> str | None:
    """The line in place of the kernel table of a timed case whose trace recorded no kernel: its latency stands
    unexplained, and the report says so rather than print nothing."""
    if case.status != "ok" or case.kernels or case.latency_us is None:
        return None
    return f"no kernels traced: {fmt_duration_us(case.latency_us.median)} of case latency without a kernel table"


def counters_line(doc: ResultDocument, min_share: float = 0.05) -> str | None:
    """How many of the kernels that take >= 5% of a case carry Nsight Compute's class, and from where; None for a run
    without counters."""
    if doc.run.counters == "none":
        return None
    heavy = [k for c in doc.cases for k in kernels_to_count(c, min_share)]
    if not heavy:
        return None
    cached = sum(1 for k in heavy if k.counter_bound and k.counters_from == "cache")
    fresh = sum(1 for k in heavy if k.counter_bound and k.counters_from != "cache")
    model = len(heavy) - cached - fresh
    return (
        f"counter class for {cached + fresh} of {len(heavy)} kernels >= {min_share:.0%} of a case "
        f"({fresh} replayed under ncu now, {cached} from the cache); the model's guess for {model}"
    )


def header(doc: ResultDocument) -> list[str]:
    e = doc.environment
    lines = [
        f"suite {doc.suite.name} · run {doc.run.id} · {doc.run.created_at:%Y-%m-%d %H:%M:%S} UTC · mode {doc.run.mode}"
        f" · counters {doc.run.counters}",
        f"device {e.device.name}"
        + (
            f" (sm_{e.device.compute_capability.replace('.', '')}, {e.device.sm_count} SMs)"
            if e.device.compute_capability
            else ""
        )
        + f" · torch {e.torch} · CUDA {e.cuda or '—'} · cuDNN {e.cudnn or '—'} · triton {e.triton or '—'}"
        + f" · testbed {e.testbed_key}",
        peaks_line(e.peaks),
    ]
    counted = counters_line(doc)
    if counted:
        lines.append(counted + (f" ({doc.run.counters_note})" if doc.run.counters_note else ""))
    if doc.run.suspect:
        lines.append("SUSPECT: " + "; ".join(doc.run.suspect))
    return lines


def render_markdown(doc: ResultDocument) -> str:
    out = ["# attnprof report", "", *[f"- {h}" for h in header(doc)], ""]
    for case in doc.cases:
        out += [f"## {case.id}", "", case_headline(case), ""]
        for line in (levels_line(case), sdpa_line(case), *advice_lines(case)):
            if line:
                out += [line, ""]
        if case.kernels:
            cols = list(KERNEL_COLUMNS) + (list(COUNTER_COLUMNS) if any(k.counters for k in case.kernels) else [])
            out.append("| " + " | ".join(cols) + " |")
            out.append("|" + "---|" * len(cols))
            for row in kernel_rows(case):
                out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
            out.append("")
            summary = reconciliation_line(case, doc.run.mode)
            if summary:
                out += [summary, ""]
        empty = no_kernels_line(case)
        if empty:
            out += [empty, ""]
    return "\n".join(out)


def render_table(doc: ResultDocument, *, width: int = 160) -> str:
    """The report as rich tables, rendered to text (no colour codes) for terminals and CI logs."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # Rendered into a buffer: a recording console also writes to stdout, and the caller prints the text.
    console = Console(file=io.StringIO(), width=width, record=True, force_terminal=False, color_system=None)
    for line in header(doc):
        console.print(escape(line), highlight=False, soft_wrap=True)
    for case in doc.cases:
        console.print()
        console.print(f"[bold]{escape(case.id)}[/bold]  {escape(case_headline(case))}", highlight=False, soft_wrap=True)
        for note in (levels_line(case), sdpa_line(case), *advice_lines(case)):
            if note:
                console.print(escape(note), highlight=False, soft_wrap=True)
        if not case.kernels:
            empty = no_kernels_line(case)
            if empty:
                console.print(escape(empty), highlight=False, soft_wrap=True)
            continue
        with_counters = any(k.counters for k in case.kernels)
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for col in KERNEL_COLUMNS + (COUNTER_COLUMNS if with_counters else ()):
            right = col not in ("phase", "kernel", "bound", "work from", "ncu bound")
            table.add_column(col, justify="right" if right else "left", overflow="fold")
        for row in kernel_rows(case):
            table.add_row(*row)
        console.print(table)
        summary = reconciliation_line(case, doc.run.mode)
        if summary:
            console.print(escape(summary), highlight=False, soft_wrap=True)
    return console.export_text()
