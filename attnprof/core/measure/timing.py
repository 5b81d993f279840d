"""The timing pass: uninstrumented, one measurement per iteration, the cache flushed before each.

On CUDA each iteration is bracketed by CUDA events, after a read sweep over a 256 MiB buffer that
evicts the L2 (60 MiB on an H200) and leaves it holding clean lines only. ``triton.testing.do_bench``
and NVBench flush by *writing* such a buffer (``zero_()``, ``cudaMemsetAsync``): that leaves the L2 full
of dirty lines, whose write-back the timed kernel then pays. On the H200 a memory-bound decode kernel
(batch 8, 32 query heads over 8 KV heads, 4096 keys, head_dim 128, bf16) read 17% slower after a
``zero_()`` than Nsight Compute's replay on flushed caches, and within 1% of it after a read sweep
(``bench/reports/h200-truth.md``). Then, as NVBench does, a
blocking kernel (``torch.cuda._sleep``) holds the stream while the host queues the iteration, so the
events time the device's work and not the host's launch rate: an eager backward pass or a compiled
FlexAttention call can take longer to launch than to run, and without the hold the timings follow
the host's speed (measured on the H200: flex fwd_bwd medians of 589-887 µs across processes for
~435 µs of kernels). The hold is sized from the host time of one iteration measured in warm-up, and
comes before the flush: the step then starts right after a kernel that kept the whole GPU busy, as in
do_bench and in a model's stream of kernels. Right after the nearly idle hold, kernels ran 1-4% slower
on the H200 (docs/findings.md#the-hold-before-the-flush, ``bench/reports/h200-truth.md``).
On CPU the same protocol runs with the host's monotonic clock and a buffer larger than the
last-level cache.

The number of samples adapts: at least ``min_samples``, then in batches until the 95% confidence
interval of the median (distribution-free, from binomial order statistics) is narrower than
``target_rel_ci`` of the median, or the time budget or ``max_samples`` is reached.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnprof.core.rounds import relative_ci_half_width
from attnprof.core.suite import TimingConfig

FLUSH_BYTES_CUDA = 256 * 1024 * 1024
BATCH = 10


@dataclass
class TimingResult:
    samples_us: list[float]
    warmup: int
    stopped_by: str  # "precision", "budget" or "max_samples"
    wall_s: float
    host_us: float | None = None  # host time to queue one iteration (CUDA), microseconds
    clocks_mhz: list[float] | None = None  # SM clock read after each batch (CUDA)


class Holder:
    """A blocking kernel long enough for the host to queue one iteration behind it.

    ``lead()`` starts a batch: after the synchronisation that ended the previous batch the device is idle, and the
    host's first iteration (caches cold, a thread just woken) takes longer to queue than the others; with no more
    than one iteration's hold ahead of it, the device then waits between the start event and the step, and that
    sample reads several times the case's time. On the H200 one sample in ten (each batch's first) read 2-10x its
    case's median this way on a slow host (docs/findings.md#a-lead-hold-before-each-batch). The lead keeps the device
    busy for ``LEAD_US`` plus three iterations' host time while the host gets ahead.
    """

    LEAD_US = 500.0

    def __init__(self, host_us: float, clock_mhz: float) -> None:
        # 1.5x the host time plus 20 µs margin, in cycles of the SM clock.
        self.cycles = int((1.5 * host_us + 20.0) * clock_mhz)
        self.lead_cycles = int((self.LEAD_US + 3.0 * host_us) * clock_mhz)

    def __call__(self) -> None:
        torch.cuda._sleep(self.cycles)  # type: ignore[no-untyped-call]

    def lead(self) -> None:
        torch.cuda._sleep(self.lead_cycles)  # type: ignore[no-untyped-call]


def host_time_us(step: Callable[[], Any], before_each: Callable[[], None] | None, reps: int = 3) -> float:
    """Host time to queue one iteration (the device is drained first), microseconds."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        if before_each:
            before_each()
        t0 = time.perf_counter_ns()
        step()
        times.append((time.perf_counter_ns() - t0) / 1000.0)
    torch.cuda.synchronize()
    return statistics.median(times)


# A CPU sweep reads twice the largest cache, up to this: a server part's last-level cache (260 MiB on one 2-core VM
# here, over 1 GiB on some) is shared with cores the job does not have, and a sweep of twice it would cost every job
# as much memory as the profiler itself (docs/findings.md, "The CPU sweep's size").
CPU_FLUSH_MAX_BYTES = 256 * 1024 * 1024


def _cpu_cache_bytes() -> int:
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1024, "M": 1024**2}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return min(max(2 * best, 8 * 1024 * 1024), CPU_FLUSH_MAX_BYTES) if best else 64 * 1024 * 1024


# How the runner times, as a result document names it among its software (``environment.software``, under
# TIMING_KEY), so that a comparison across a change of it lists the change beside one of torch or cuDNN: each moves
# the numbers of unchanged code. The clean flush moved memory-bound decode kernels by 17% on the H200; a stream per
# case-round moved case medians by up to 0.4% (0.9% for cases under 100 us: docs/findings.md#a-stream-per-case-round).
# Change the words when, and only when, a change to the runner's timing moves what it reads: every project's next
# comparison lists any change of them. A paired run's sides time half rounds in ABBA pairs,
# one case at a time (``measure.paired``): their documents say so, since a paired head's run may become another
# run's baseline.
TIMING_KEY = "attnprof timing"
TIMING_METHOD = {
    "cuda": "hold, then a read sweep before each iteration; rounds over the suite, each built anew; a stream per "
    "case-round",
    "cpu": "a read sweep before each iteration; rounds over the suite, each built anew",
}
PAIRED_TIMING_METHOD = {
    "cuda": "hold, then a read sweep before each iteration; half rounds in ABBA pairs with the other side's process, "
    "each built anew; a stream per case-round",
    "cpu": "a read sweep before each iteration; half rounds in ABBA pairs with the other side's process, each built "
    "anew",
}


class Flusher:
    """Evicts the caches between iterations by reading a buffer larger than them.

    The buffer is written once, here; each flush only reads it (one reduction, a max into a preallocated
    scalar of the buffer's own dtype: a sum into a wider type would first write a converted copy of the
    whole buffer), so the lines it leaves in the cache are clean: the next kernel finds its own data
    evicted and pays no write-back of ours. Reading also evicts the previous iteration's dirty lines,
    whose write-back happens during the flush, outside the timed region.
    """

    def __init__(self, device: str) -> None:
        size = FLUSH_BYTES_CUDA if device == "cuda" else _cpu_cache_bytes()
        self.buffer = torch.ones(size // 4, dtype=torch.int32, device=device)
        self.sink = torch.zeros((), dtype=torch.int32, device=device)

    def __call__(self) -> None:
        torch.amax(self.buffer, dim=0, out=self.sink)


def time_iterations(
    step: Callable[[], Any],
    *,
    device: str,
    config: TimingConfig,
    before_each: Callable[[], None] | None = None,
    flusher: Flusher | None = None,
    progress: Callable[[int], None] | None = None,
    clock: Callable[[], float | None] | None = None,
) -> TimingResult:
    """Time ``step`` per iteration (microseconds) after ``config.warmup`` untimed iterations.

    ``before_each`` runs outside the timed region (e.g. clearing gradients); ``clock`` reads the
    SM clock (MHz) after each batch, so a case timed while the clocks moved can be told.
    """
    flush = flusher or Flusher(device)
    started = time.perf_counter()
    for _ in range(config.warmup):
        if before_each:
            before_each()
        step()
    host_us = None
    hold: Holder | None = None
    clocks: list[float] = []
    if device == "cuda":
        host_us = host_time_us(step, before_each)
        hold = Holder(host_us, (clock() if clock else None) or 1980.0)
    loop_start = time.perf_counter()
    samples: list[float] = []
    stopped_by = "max_samples"
    while len(samples) < config.max_samples:
        n = min(BATCH if samples else max(config.min_samples, BATCH), config.max_samples - len(samples))
        if hold is not None:
            samples.extend(_cuda_batch(step, n, flush, before_each, hold))
            reading = clock() if clock else None
            if reading:
                clocks.append(reading)
        else:
            samples.extend(_cpu_batch(step, n, flush, before_each))
        if progress:
            progress(len(samples))
        if len(samples) >= config.min_samples and relative_ci_half_width(samples) <= config.target_rel_ci:
            stopped_by = "precision"
            break
        if time.perf_counter() - loop_start >= config.budget_s and len(samples) >= config.min_samples:
            stopped_by = "budget"
            break
    return TimingResult(
        samples, config.warmup, stopped_by, time.perf_counter() - started, host_us, clocks if hold else None
    )


def _cuda_batch(
    step: Callable[[], Any], n: int, flush: Flusher, before_each: Callable[[], None] | None, hold: Holder
) -> list[float]:
    pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))  # type: ignore[no-untyped-call]
        for _ in range(n)
    ]
    # No collection while the batch is queued: a pause longer than the device's lead delays a step behind its start
    # event, and the sample reads the pause.
    collecting = gc.isenabled()
    gc.disable()
    try:
        hold.lead()
        for start, end in pairs:
            if before_each:
                before_each()
            hold()
            flush()
            start.record()
            step()
            end.record()
    finally:
        if collecting:
            gc.enable()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1000.0 for start, end in pairs]


def _cpu_batch(step: Callable[[], Any], n: int, flush: Flusher, before_each: Callable[[], None] | None) -> list[float]:
    out = []
    for _ in range(n):
        if before_each:
            before_each()
        flush()
        t0 = time.perf_counter_ns()
        step()
        out.append((time.perf_counter_ns() - t0) / 1000.0)
    return out


def summarize(samples_us: list[float]) -> dict[str, float]:
    """Median, quartiles, extremes and coefficient of variation of samples (microseconds)."""
    ordered = sorted(samples_us)
    q = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 3
    mean = statistics.fmean(ordered)
    cv = statistics.stdev(ordered) / mean if len(ordered) > 1 and mean > 0 else 0.0
    return {
        "median": statistics.median(ordered),
        "p25": q[0],
        "p75": q[2],
        "min": ordered[0],
        "max": ordered[-1],
        "cv": cv,
    }
