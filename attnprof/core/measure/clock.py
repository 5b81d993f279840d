"""The SM clock under load: the mean SM clock each kernel ran at, read beside the step (CUDA, with Triton).

The profiler reads NVML's SM clock between timing batches; a tensor-core kernel on an H200 with its clocks
unlocked runs at a lower clock than that, set while it runs: 1,650-1,830 MHz where NVML read 1,905-1,980
(docs/findings.md#clock-handling). For some kernels the level they land on in a
process moves with that clock. So the clock a kernel ran at is recorded beside its time, as Nsight Compute reports
its SM frequency, and a comparison says when a case's clock moved by more than this pass's own spread.

The probe is one warp on a second stream. It starts with a hold queued before the flush, so that it is resident
before the flush and the step fill the SMs, and records (``%globaltimer``, ``%clock64``) every ``every`` SM
cycles until the step's stream, after the step, raises a flag the probe polls. Kineto traces the iterations;
the probe's own launch in the trace aligns its timer with Kineto's, and a kernel's clock is the cycles the probe
counted between the kernel's start and end over the time between them: the mean over the kernel, as Nsight
Compute's ``sm__cycles_elapsed.avg.per_second`` is.

The pass runs iterations of its own after the trace pass: the probe holds one warp of one SM, which lengthens
some kernels (a GEMM of one wave in ``llama7b/block`` by 15.6% on the H200), so no duration is read from these
iterations. Kernels are keyed by name: one launched in both passes of a step gets one clock, over both.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_SAMPLES = 16384
MIN_EVERY = 500  # SM cycles between a probe's samples: about 0.25 µs at 1,980 MHz
MARKER_MAX_US = 5.0  # a spin kernel shorter than this is a marker; a longer one is the hold
PROBE_NAME = "span_probe"
SPIN_NAME = "spin_kernel"

Event = tuple[str, float, float]  # kernel name, start µs, duration µs (Kineto's clock)
Series = list[tuple[int, int]]  # (globaltimer ns, clock64 cycles), in order


def split_iterations(events: list[Event]) -> list[tuple[list[Event], int | None, Event | None]]:
    """Per iteration (between a pair of one-cycle markers): the step's kernels, and the probe that started before
    its opening marker, with the probe's place among all the trace's probes (its samples' index), if any.

    ``events`` are the trace's kernels in start order. The gradients' reset, the hold (a spin kernel longer than a
    marker) and the flush run before the first marker and are left out. The probes run in order on a second
    stream, each starting with its iteration's hold; a probe that started only after its marker (the previous one
    still running) is taken by no iteration, and its kernels are left without a clock.
    """
    iterations: list[tuple[list[Event], int | None, Event | None]] = []
    inside = False
    pending: tuple[int, Event] | None = None
    probes = 0
    for e in events:
        name = e[0]
        if SPIN_NAME in name:
            if e[2] >= MARKER_MAX_US:
                continue
            inside = not inside
            if inside:
                iterations.append(([], pending[0], pending[1]) if pending else ([], None, None))
                pending = None
        elif PROBE_NAME in name:
            pending = None if inside else (probes, e)
            probes += 1
        elif inside:
            iterations[-1][0].append(e)
    return iterations


def align(probe: Event, series: Series) -> float:
    """The offset (µs) that turns the probe's timer into Kineto's time, ``kineto = ns / 1000 + offset``.

    The probe takes its first sample as it starts and its last as it ends, so the offset is the mean of the two
    ends' differences."""
    g0, g1 = series[0][0] / 1000.0, series[-1][0] / 1000.0
    start, end = probe[1], probe[1] + probe[2]
    return ((start - g0) + (end - g1)) / 2.0


def cycles_at(series: Series, ns: float) -> float | None:
    """The probe's cycle count at timer value ``ns``, interpolated between its samples; None outside them."""
    if len(series) < 2 or ns < series[0][0] or ns > series[-1][0]:
        return None
    i = bisect_left(series, (ns, -1))
    if i < len(series) and series[i][0] == ns:
        return float(series[i][1])
    (g0, c0), (g1, c1) = series[i - 1], series[i]
    return c0 + (c1 - c0) * (ns - g0) / (g1 - g0)


def cycles_over(series: Series, offset_us: float, start_us: float, dur_us: float) -> float | None:
    """The SM cycles the probe counted over [start, start + dur] (Kineto's µs); None unless it spans all of it."""
    if dur_us <= 0:
        return None
    a = cycles_at(series, (start_us - offset_us) * 1000.0)
    b = cycles_at(series, (start_us + dur_us - offset_us) * 1000.0)
    if a is None or b is None:
        return None
    return b - a


# The share of the step's kernel time the probe must have spanned for the case's clock to be given.
STEP_COVERED = 0.9


@dataclass
class StepClocks:
    """Cycles and microseconds the probe covered, per kernel name and over all the step's kernels, and the kernel
    time of the iterations it ran beside."""

    cycles: dict[str, float] = field(default_factory=dict)
    us: dict[str, float] = field(default_factory=dict)
    iterations: int = 0
    kernel_us: float = 0.0

    def add(self, name: str, cycles: float, us: float) -> None:
        self.cycles[name] = self.cycles.get(name, 0.0) + cycles
        self.us[name] = self.us.get(name, 0.0) + us

    def mhz(self, name: str) -> float | None:
        """The mean SM clock over every covered launch of kernel ``name`` (weighted by time), MHz."""
        us = self.us.get(name)
        return round(self.cycles[name] / us, 1) if us else None

    def covered(self) -> float:
        """The share of the kernel time of the probed iterations that the probe spanned."""
        return sum(self.us.values()) / self.kernel_us if self.kernel_us else 0.0

    def step_mhz(self) -> float | None:
        """The mean SM clock over all the step's covered kernel time, MHz; None where the probe spanned less than
        ``STEP_COVERED`` of it (a clock over part of a step is not the step's)."""
        us = sum(self.us.values())
        return round(sum(self.cycles.values()) / us, 1) if us and self.covered() >= STEP_COVERED else None


def read_clocks(iterations: list[tuple[list[Event], int | None, Event | None]], series: list[Series]) -> StepClocks:
    """Each iteration's kernels against its probe's samples (``series[index]``): the cycles over every kernel the
    probe spanned."""
    out = StepClocks()
    for kernels, index, probe in iterations:
        if probe is None or index is None or index >= len(series) or len(series[index]) < 2:
            continue
        samples = series[index]
        offset = align(probe, samples)
        out.iterations += 1
        for name, start, dur in kernels:
            out.kernel_us += dur
            cycles = cycles_over(samples, offset, start, dur)
            if cycles is not None:
                out.add(name, cycles, dur)
    return out


def probe_every(span_us: float, clock_mhz: float = 1980.0) -> int:
    """SM cycles between samples for the probe to cover ``span_us`` within ``MAX_SAMPLES`` samples."""
    return max(MIN_EVERY, math.ceil(span_us * clock_mhz / (MAX_SAMPLES - 1)))


def clock_pass(
    workload: Any,
    *,
    flusher: Callable[[], None],
    host_us: float | None,
    step_us: float,
    iterations: int = 5,
) -> StepClocks | None:
    """Run ``iterations`` more iterations with the probe beside each step; the clocks it read, or None where
    Triton is not installed, the probe does not compile for the GPU (its timers are PTX registers) or the pass
    fails: the clock is read beside the case's numbers, and its absence never fails a case that timed.

    The probe stops at the flag or after its samples, which cover the hold, the flush and three times the step's
    median (at 1,980 MHz, the H200's top clock; a lower clock only stretches them): a step that cannot start while
    the probe holds its warp (a cooperative launch that needs every SM) waits for it at most that long, and its
    kernels are then left without a clock."""
    try:
        from attnprof.core.measure.clock_probe import span_probe
    except ImportError:
        return None
    import torch
    from torch.profiler import ProfilerActivity, profile

    from attnprof.core.measure.timing import Holder
    from attnprof.core.measure.trace import _filtered_stderr

    hold = Holder(host_us or 0.0, 1980.0)
    every = probe_every(hold.cycles / 1980.0 + 3.0 * step_us + 300.0)
    flag: Any = None
    try:
        device = torch.device("cuda")
        buf = torch.zeros((iterations, MAX_SAMPLES, 2), dtype=torch.int64, device=device)
        counts = torch.zeros(iterations, dtype=torch.int64, device=device)
        flag = torch.zeros((), dtype=torch.int64, device=device)
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        main = torch.cuda.current_stream()
        # the probe compiles for this GPU and stops at once (its target already reached)
        span_probe[(1,)](buf[0], counts[0], flag, 0, 2, MIN_EVERY, num_warps=1)
        torch.cuda.synchronize()
        with _filtered_stderr(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(iterations):
                workload.zero_grads()
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    span_probe[(1,)](buf[i], counts[i], flag, i + 1, MAX_SAMPLES, every, num_warps=1)
                hold()
                flusher()
                torch.cuda._sleep(1)  # type: ignore[no-untyped-call]  # marker
                workload.step()
                torch.cuda._sleep(1)  # type: ignore[no-untyped-call]  # marker
                flag.fill_(i + 1)
            torch.cuda.synchronize()
        taken = counts.tolist()
        raw = buf.tolist()
        series = [[(int(g), int(c)) for g, c in raw[i][: taken[i]]] for i in range(iterations)]
        return read_clocks(split_iterations(_kernel_events(prof)), series)
    except Exception:  # the probe, Kineto or the step beside the probe: the case keeps its numbers, without a clock
        return None
    finally:
        if flag is not None:
            with contextlib.suppress(Exception):  # a probe still polling stops: its target is passed
                flag.fill_(1 << 62)
                torch.cuda.synchronize()


def kernel_events(prof: Any) -> list[dict[str, Any]]:
    """A finished ``torch.profiler`` profile's kernel events (Chrome trace form), in start order."""
    import json

    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        events = json.loads(Path(tmp).read_text()).get("traceEvents", [])
    finally:
        os.unlink(tmp)
    ks = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    ks.sort(key=lambda e: float(e["ts"]))
    return ks


def _kernel_events(prof: Any) -> list[Event]:
    """The trace's kernels in start order: name, start µs, duration µs."""
    return [(e["name"], float(e["ts"]), float(e["dur"])) for e in kernel_events(prof)]
