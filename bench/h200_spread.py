"""Does a kernel's level across processes follow the SM clock over the whole kernel?

    PYTHONPATH=. python3 bench/h200_spread.py SUITE... [--case GLOB...] --out FILE

The five profile processes of the truth report land some cases' medians 0.5-1.9% apart, and the clock a short
probe reads at a kernel's start does not follow that level (``bench/h200_clock.py``). Here a probe spans the
whole step instead: one warp on a second stream, started with the hold (so that it is resident before the flush and
the step fill the SMs), records (``%globaltimer``, ``%clock64``) every ``every`` SM cycles until the step's stream,
after the step, raises a flag it polls. Kineto traces the step (as the trace pass
does) and the probe; the probe's own launch in the trace aligns its timer with Kineto's, and the clock over a
kernel is the cycles the probe counted between the kernel's start and end over the nanoseconds between them: the
average over the kernel, as ncu's ``sm__cycles_elapsed.avg.per_second`` is. A kernel's cycles are its duration
times that clock: if a process's level is the clock's, the cycles land together where the durations do not.

Each case's iterations run in blocks that alternate between two contexts, so that drift cancels:

  plain   hold, flush, step, traced: the trace pass (the hold lets the host queue the step ahead)
  span    the same, with the probe beside the step on one warp of one SM

NVML's GPU and memory temperatures, power and clocks are read at each block's start and end (its energy counter
gives the block's mean power), with the block's wall-clock time, so a process's level can be set against them.

Writes {"cases": {case: {"kernels": [{"name", "grid", "us": {context: [per iteration]}, "mhz": [per iteration,
None where the probe did not cover the kernel]}], "step": {...}, "blocks": [...]} or {"error": ...}}} and prints one
line per case.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from attnprof.core.measure import clock

CONTEXTS = ("plain", "span")
MAX_SAMPLES = 8192
MIN_EVERY = clock.MIN_EVERY
MARKER_MAX_US = clock.MARKER_MAX_US
HEAVY_US = 10.0  # kernels shorter than this are left out of the record

Event = tuple[str, tuple[int, ...], tuple[int, ...], float, float]  # name, grid, block, start µs, duration µs
Series = list[tuple[int, int]]  # (globaltimer ns, clock64 cycles), in order


def split_iterations(
    events: list[Event], drop: set[tuple[str, tuple[int, ...], tuple[int, ...]]]
) -> list[tuple[list[Event], Event | None]]:
    """Per iteration (between a pair of one-cycle markers): the step's kernels and the span probe, if any. Holds
    (spin kernels longer than a marker) and the flush's kernels are dropped; the probe runs on a second stream, starts
    with the hold, before the iteration's first marker, and belongs to the iteration that marker opens."""
    iterations: list[tuple[list[Event], Event | None]] = []
    inside = False
    pending: Event | None = None
    for e in events:
        name = e[0]
        if "spin_kernel" in name:
            if e[4] >= MARKER_MAX_US:
                continue
            inside = not inside
            if inside:
                iterations.append(([], pending))
                pending = None
        elif "span_probe" in name:
            pending = e
        elif e[:3] in drop:
            continue
        elif inside:
            iterations[-1][0].append(e)
    return iterations


def align(probe: Event, series: Series) -> tuple[float, float]:
    """The profiler's alignment of the probe's timer with Kineto's (``attnprof.core.measure.clock.align``), and the
    residual: Kineto's length of the probe less the timer's."""
    offset = clock.align((probe[0], probe[3], probe[4]), series)
    return offset, probe[4] - (series[-1][0] - series[0][0]) / 1000.0


def clock_over(series: Series, offset_us: float, start_us: float, dur_us: float) -> float | None:
    """The mean SM clock (MHz) the probe counted over [start, start + dur] (Kineto's µs), None if it did not
    span all of it."""
    cycles = clock.cycles_over(series, offset_us, start_us, dur_us)
    return None if cycles is None else cycles / dur_us


def spread(values: list[float]) -> float:
    """(max - min) / median, in per cent."""
    return (max(values) - min(values)) / statistics.median(values) * 100.0


def correlation(xs: list[float], ys: list[float]) -> float | None:
    """Pearson's r; None where either side does not vary."""
    if len(xs) < 3:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if sx == 0 or sy == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / (sx * sy)


def kernel_levels(processes: list[dict[str, Any]], case: str, index: int) -> dict[str, list[float]] | None:
    """One kernel (the ``index``-th of its case's step) across processes: per process the median duration without the
    probe and with it, the median clock over it, and the median cycles (duration times clock, per iteration);
    None where a process lacks the case or the probe never covered the kernel."""
    out: dict[str, list[float]] = {"plain": [], "span": [], "mhz": [], "cycles": []}
    for p in processes:
        r = p["cases"].get(case)
        k = None if not r or "error" in r else next((k for k in r["kernels"] if k["index"] == index), None)
        if k is None:
            return None
        pairs = [(d, m) for d, m in zip(k["us"]["span"], k["mhz"], strict=True) if m is not None]
        if not pairs or not k["us"]["plain"]:
            return None
        out["plain"].append(statistics.median(k["us"]["plain"]))
        out["span"].append(statistics.median(d for d, _ in pairs))
        out["mhz"].append(statistics.median(m for _, m in pairs))
        out["cycles"].append(statistics.median(d * m for d, m in pairs))
    return out


class Nvml:
    """NVML's readings at a block's edges: temperatures, power, clocks and the energy counter."""

    def __init__(self, index: int) -> None:
        import pynvml

        pynvml.nvmlInit()
        self.n = pynvml
        self.h = pynvml.nvmlDeviceGetHandleByIndex(index)

    def read(self) -> dict[str, float | None]:
        n, h = self.n, self.h
        out: dict[str, float | None] = {"t": time.time()}
        reads = {
            "temp_c": lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
            "power_w": lambda: n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "energy_j": lambda: n.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0,
            "sm_mhz": lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "mem_mhz": lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
            "mem_temp_c": lambda: _field(n, h, getattr(n, "NVML_FI_DEV_MEMORY_TEMP", 82)),
        }
        for key, fn in reads.items():
            try:
                out[key] = float(fn())
            except Exception:  # a reading this driver does not give is left out, not fatal
                out[key] = None
        return out


def _field(n: Any, h: Any, field: int) -> float | None:
    v = n.nvmlDeviceGetFieldValues(h, [field])[0]
    if getattr(v, "nvmlReturn", 0) != 0:
        return None
    return float(v.value.uiVal)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--case", action="append", default=None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--blocks", type=int, default=4, help="blocks per case, the contexts alternating")
    parser.add_argument("--per-block", type=int, default=10)
    args = parser.parse_args()
    import torch

    from bench.h200_hold import cases_matching
    from bench.h200_isolation import flush_and_signature

    flush, flush_kernels = flush_and_signature()
    nvml = Nvml(torch.cuda.current_device())
    side = torch.cuda.Stream()
    buf = torch.zeros((args.per_block, MAX_SAMPLES, 2), dtype=torch.int64, device="cuda")
    counts = torch.zeros(args.per_block, dtype=torch.int64, device="cuda")
    flag = torch.zeros((), dtype=torch.int64, device="cuda")
    from attnprof.core.measure.clock_probe import span_probe

    span_probe[(1,)](buf[0], counts[0], flag, 1, 4, MIN_EVERY, num_warps=1)  # compile
    torch.cuda.synchronize()
    results: dict[str, Any] = {"max_samples": MAX_SAMPLES, "heavy_us": HEAVY_US, "start": nvml.read(), "cases": {}}
    started = time.perf_counter()
    chosen = cases_matching(args.suites, args.case or ["*"])
    for n, (suite, spec) in enumerate(chosen, 1):
        key = f"{suite.name}/{spec.id}"
        try:
            r = _case(spec, flush, flush_kernels, nvml, side, (buf, counts, flag), args.blocks, args.per_block)
        except Exception as exc:  # a case that cannot run is reported, the rest go on
            r = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        torch.cuda.empty_cache()
        results["cases"][key] = r
        if "error" in r:
            line = r["error"]
        else:
            line = ", ".join(
                f"{k['name'][:28]} {statistics.median(k['us']['plain']):.1f}us {_median_or_none(k['mhz'])}MHz"
                for k in r["kernels"][:3]
            )
        print(f"[{n}/{len(chosen)} {time.perf_counter() - started:.0f}s] {key}: {line}", flush=True)
        args.out.write_text(json.dumps(results))
    results["end"] = nvml.read()
    args.out.write_text(json.dumps(results))
    return 0


def _median_or_none(xs: list[float | None]) -> str:
    v = [x for x in xs if x is not None]
    return f"{statistics.median(v):.0f}" if v else "-"


def _case(
    spec: Any,
    flush: Any,
    flush_kernels: set[tuple[str, tuple[int, ...], tuple[int, ...]]],
    nvml: Nvml,
    side: Any,
    probe_bufs: tuple[Any, Any, Any],
    blocks: int,
    per_block: int,
) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from attnprof.core.measure.clock_probe import span_probe
    from attnprof.core.measure.targets import build_workload
    from attnprof.core.measure.timing import Holder, host_time_us
    from bench.h200_isolation import _events, _marker

    torch._dynamo.reset()
    w = build_workload(spec, "cuda")
    with w.context():
        for _ in range(3):
            w.zero_grads()
            w.step()
        host_us = host_time_us(w.step, w.zero_grads)
        hold = Holder(host_us, 1980.0)
        step_us = _device_us(w, flush, hold)
        # the probe spans the hold, the flush and the step: room for twice the step and 200 µs besides
        span_cycles = int((hold.cycles / 1980.0 + 2.0 * step_us + 200.0) * 1980.0)
        every = max(MIN_EVERY, math.ceil(span_cycles / (MAX_SAMPLES - 1)))
        samples = MAX_SAMPLES
        buf, counts, flag = probe_bufs
        flag.zero_()
        raised = 0
        taken_all: list[int] = []
        durations: dict[str, list[list[float]]] = {c: [] for c in CONTEXTS}
        step_span: dict[str, list[float]] = {c: [] for c in CONTEXTS}
        mhz: list[list[float | None]] = []
        step_mhz: list[float | None] = []
        residuals: list[float] = []
        reference: list[tuple[str, tuple[int, ...]]] = []
        block_log: list[dict[str, Any]] = []
        for b in range(blocks):
            context = CONTEXTS[b % 2] if (b // 2) % 2 == 0 else CONTEXTS[1 - b % 2]
            edge = nvml.read()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(per_block):
                    w.zero_grads()
                    if context == "span":
                        side.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(side):
                            span_probe[(1,)](buf[i], counts[i], flag, raised + 1, samples, every, num_warps=1)
                    hold()
                    flush()
                    _marker()
                    w.step()
                    _marker()
                    if context == "span":
                        raised += 1
                        flag.fill_(raised)
                torch.cuda.synchronize()
            block_log.append({"context": context, "start": edge, "end": nvml.read()})
            series_all = buf[:per_block].tolist() if context == "span" else None
            taken = counts.tolist()
            if context == "span":
                taken_all += taken[:per_block]
            iterations = split_iterations(_events(prof), flush_kernels)
            if len(iterations) != per_block:
                raise RuntimeError(f"{len(iterations)} marked iterations under {context}, not {per_block}")
            for i, (kernels, probe) in enumerate(iterations):
                names = [(e[0], e[1]) for e in kernels]
                if not reference:
                    reference = names
                if names != reference:
                    msg = f"kernel sequence under {context} differs: {len(names)} against {len(reference)}"
                    raise RuntimeError(msg)
                durations[context].append([e[4] for e in kernels])
                first, last = kernels[0], kernels[-1]
                span_us = last[3] + last[4] - first[3]
                step_span[context].append(span_us)
                if context == "span":
                    if probe is None or series_all is None:
                        raise RuntimeError("an iteration under span has no probe in the trace")
                    series = [(int(g), int(c)) for g, c in series_all[i][: taken[i]]]
                    offset, residual = align(probe, series)
                    residuals.append(residual)
                    mhz.append([clock_over(series, offset, e[3], e[4]) for e in kernels])
                    step_mhz.append(clock_over(series, offset, first[3], span_us))
    heavy = [j for j in range(len(reference)) if statistics.median(it[j] for it in durations["plain"]) >= HEAVY_US]
    return {
        "host_us": round(host_us, 1),
        "step_us": round(step_us, 1),
        "every": every,
        "samples": samples,
        "taken": [min(taken_all), max(taken_all)] if taken_all else None,
        "align_residual_us": round(statistics.median(residuals), 3) if residuals else None,
        "blocks": block_log,
        "step": {
            "us": {c: [round(x, 3) for x in step_span[c]] for c in CONTEXTS},
            "mhz": [None if m is None else round(m, 2) for m in step_mhz],
        },
        "kernels": [
            {
                "name": reference[j][0],
                "grid": list(reference[j][1]),
                "index": j,
                "us": {c: [round(it[j], 3) for it in durations[c]] for c in CONTEXTS},
                "mhz": [None if it[j] is None else round(it[j], 2) for it in mhz],
            }
            for j in heavy
        ],
    }


def _device_us(w: Any, flush: Any, hold: Any, reps: int = 5) -> float:
    """The step's device time from CUDA events, after the hold and the flush (median of ``reps``)."""
    import torch

    times = []
    for _ in range(reps):
        w.zero_grads()
        hold()
        flush()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        w.step()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0)
    return statistics.median(times)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
