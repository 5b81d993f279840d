"""The kernel table against the case latency: their sum beside the latency, and the gap named
(docs/architecture.md, "How the profiler measures").

Torch-free. Durations are microseconds per iteration. The timed latency and the kernel table come from two
passes: the timing pass runs uninstrumented, the trace pass under ``torch.profiler``. So the gap between the
table's sum and the latency has these sources, and the trace tells them apart:

- launch gaps / host time between kernels (sum below the latency on a GPU): the device idles between kernels
  while the host launches the next one, or waits on the host. The trace shows the same idle time directly:
  a traced iteration's span (first kernel start to last kernel end) against the time at least one kernel ran.
- host time between the ops (sum below the latency on CPU): Python, dispatch, views and allocations, which
  are not ops that play kernels.
- trace-pass overhead (sum above the latency on CPU): on CPU the kernels *are* the profiled ops, and the
  profiler lengthens every op it records (its callbacks, ``record_shapes``), more so for small ops and for
  ops with many recorded children (``aten::mul`` by a Python scalar records four more for the conversion).
  The traced iteration's host span against the timed latency measures it. Not a counting error: the ops
  counted never overlap (:func:`.cpu.cpu_kernels` subtracts what an op delegates).
- overlapping kernels on several streams (sum above the busy time): concurrent kernels add up to more than
  the wall time they occupy; on CPU, ops on several threads (a workload that forks work, say) add up to more
  than the iteration's host range, which one thread's ops cannot.

No view truncates the kernel table (the report and the dashboard list every kernel), so there is no
"kernels under the display limit" share to name.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from attnprof.core.attribution.cpu import cpu_kernels
from attnprof.core.attribution.kineto import ITER_PREFIX, KernelEvent, ParsedTrace
from attnprof.core.documents.result import Case, GapCause, Kernel, KernelReconciliation
from attnprof.core.units import fmt_duration_us, fmt_percent

TOLERANCE = 0.02
"""A gap within this fraction of the latency reconciles: the two passes differ by that much run to run."""


@dataclass(frozen=True)
class IterationTime:
    """One traced iteration, microseconds.

    ``span_us``: on a GPU the device span (first kernel start to last kernel end); on CPU the host range of the
    iteration (its ``attnprof/iter/<i>`` annotation, else first op start to last op end). ``busy_us``: the time
    at least one kernel ran. ``kernel_sum_us``: the kernels' durations summed (above ``busy_us`` when they
    overlap).
    """

    iteration: int
    span_us: float
    busy_us: float
    kernel_sum_us: float

    @property
    def idle_us(self) -> float:
        """Time in the span when no kernel ran."""
        return max(0.0, self.span_us - self.busy_us)


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    end = float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def iteration_times(parsed: ParsedTrace) -> list[IterationTime]:
    """Span, busy time and kernel sum of each traced iteration that has kernels (in iteration order)."""
    kernels: list[KernelEvent] = parsed.kernels if parsed.on_gpu else cpu_kernels(parsed)
    by_iter: dict[int, list[KernelEvent]] = {}
    for k in kernels:
        if k.iteration is not None:
            by_iter.setdefault(k.iteration, []).append(k)
    host_span: dict[int, float] = {}
    if not parsed.on_gpu:
        for op in parsed.ops:
            if op.category == "user_annotation" and op.name.startswith(ITER_PREFIX):
                host_span[int(op.name.removeprefix(ITER_PREFIX))] = op.dur_us
        if not parsed.annotated and parsed.ops:
            host_span[0] = max(op.end_us for op in parsed.ops) - min(op.ts_us for op in parsed.ops)
    out = []
    for it in parsed.iterations:
        ks = by_iter.get(it)
        if not ks:
            continue
        total = sum(k.dur_us for k in ks)
        if parsed.on_gpu:
            # Offsets from the first start: trace timestamps are ~1e12 µs, where ts + dur - ts loses the ns.
            first = min(k.ts_us for k in ks)
            intervals = [(k.ts_us - first, k.ts_us - first + k.dur_us) for k in ks]
            span = max(stop for _, stop in intervals)
            busy = _union_us(intervals)
        else:
            # The ops counted as kernels never overlap: each one's time excludes what it delegated.
            span = host_span.get(it, total)
            busy = total
        out.append(IterationTime(iteration=it, span_us=span, busy_us=busy, kernel_sum_us=total))
    return out


_pct = fmt_percent
_us = fmt_duration_us


def _cause(gap_fraction: float, on_gpu: bool, overlap: bool) -> GapCause:
    if overlap and gap_fraction < -TOLERANCE:
        return "overlap"
    if abs(gap_fraction) <= TOLERANCE:
        return "none"
    if gap_fraction < 0:
        return "trace_overhead"
    return "launch_gaps" if on_gpu else "host_time"


def _reason(cause: GapCause, on_gpu: bool, latency_us: float, t: IterationTime | None) -> str:
    if cause == "overlap" and t is not None and not on_gpu:
        return (
            f"ops overlap on several threads: the traced ops sum to {_us(t.kernel_sum_us)} in the iteration's "
            f"{_us(t.span_us)} host range"
        )
    if cause == "overlap" and t is not None:
        return (
            f"kernels overlap on several streams: the traced kernels sum to {_us(t.kernel_sum_us)} "
            f"in {_us(t.busy_us)} of busy device time"
        )
    if cause == "none":
        words = f"the kernels account for the case latency within {_pct(TOLERANCE)}"
    elif cause == "launch_gaps" and t is not None and t.idle_us < (latency_us - t.busy_us) / 2:
        # The traced kernels ran back to back: the gap lies at the iteration's edges, not between kernels.
        words = "launch gaps: launch latency and the timing events around the kernels"
    elif cause == "launch_gaps":
        words = "launch gaps / host time between kernels"
    elif cause == "host_time":
        words = "host time between the ops that play the kernels (Python, dispatch, views, allocations)"
    elif on_gpu:
        words = "the kernels ran longer in the trace pass than in the timed pass (profiler, clocks, run-to-run)"
    else:
        words = "trace-pass overhead: on CPU the profiler lengthens every op it records"
    if t is None:
        return words
    if on_gpu:
        return f"{words} (traced iteration: kernels busy {_us(t.busy_us)} of its {_us(t.span_us)} span)"
    if t.span_us > latency_us * (1 + TOLERANCE):
        return f"{words} (traced iteration {_us(t.span_us)} against {_us(latency_us)} timed)"
    return f"{words} (traced iteration: ops {_us(t.busy_us)} of its {_us(t.span_us)} span)"


def _median_iteration(times: list[IterationTime]) -> IterationTime | None:
    if not times:
        return None
    return IterationTime(
        iteration=-1,
        span_us=statistics.median(t.span_us for t in times),
        busy_us=statistics.median(t.busy_us for t in times),
        kernel_sum_us=statistics.median(t.kernel_sum_us for t in times),
    )


def reconcile(
    kernels: Sequence[Kernel], latency_us: float, *, parsed: ParsedTrace | None, on_gpu: bool | None = None
) -> KernelReconciliation | None:
    """The kernel table's sum (medians per iteration, µs) beside the case's median latency (µs), the gap named.

    ``parsed``: the case's trace, for the traced iterations' span and busy time (medians over iterations);
    None leaves those null. ``on_gpu`` defaults to the trace's. None when there are no kernels or no latency.
    """
    if not kernels or latency_us <= 0:
        return None
    gpu = on_gpu if on_gpu is not None else bool(parsed is not None and parsed.on_gpu)
    kernel_sum = sum(k.duration_us.median for k in kernels)
    gap = latency_us - kernel_sum
    fraction = gap / latency_us
    t = _median_iteration(iteration_times(parsed)) if parsed is not None else None
    # concurrent kernels: on a GPU their sum beyond the time at least one ran; on CPU, where the busy time is the
    # ops' sum, beyond the iteration's host range (one thread's ops never overlap)
    overlap = t is not None and t.kernel_sum_us > (t.busy_us if gpu else t.span_us) * (1 + TOLERANCE)
    cause = _cause(fraction, gpu, overlap)
    return KernelReconciliation(
        kernel_sum_us=round(kernel_sum, 4),
        latency_us=round(latency_us, 4),
        gap_us=round(gap, 4),
        gap_fraction=round(fraction, 6),
        trace_span_us=round(t.span_us, 4) if t else None,
        trace_busy_us=round(t.busy_us, 4) if t else None,
        trace_kernel_sum_us=round(t.kernel_sum_us, 4) if t else None,
        cause=cause,
        reason=_reason(cause, gpu, latency_us, t),
    )


def case_reconciliation(case: Case, mode: str) -> KernelReconciliation | None:
    """The case's reconciliation as recorded, else (a document older than the field) computed from its kernels
    and latency alone, without the trace's figures. ``mode``: the run's, ``cuda`` or ``cpu``."""
    if case.reconciliation is not None:
        return case.reconciliation
    if case.latency_us is None:
        return None
    return reconcile(case.kernels, case.latency_us.median, parsed=None, on_gpu=mode == "cuda")
