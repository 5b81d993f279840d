"""The SM clock each kernel runs at, read without Nsight Compute: does ncu's replay run a kernel at another clock?

    PYTHONPATH=. python3 bench/h200_clock.py SUITE... [--case GLOB...] --out FILE

ncu reports the SM clock of every replayed kernel (``sm__cycles_elapsed.avg.per_second``); the trace pass has no
counters. Here every case's step is traced (Kineto, as the trace pass does) in three contexts, interleaved in
blocks so that drift cancels:

  sequence  zero_grads, flush, step: the trace pass itself, with NVML sampled alongside (SM clock, power, and the
            reasons the driver gives for holding the clock down)
  between   a clock probe queued before every operator on the step's stream: the clock right after its
            predecessor ends and right before it starts
  during    a shorter clock probe queued before every operator on a second stream that waits for the step's stream:
            it starts when the step's stream reaches the operator (later, when the probe before it still runs) and
            runs beside the operator's first kernel on one warp of one SM

A probe is one warp that spins ``--probe-cycles`` SM cycles and records ``%clock64`` and ``%globaltimer`` at its
start and end: the clock is the cycles over the nanoseconds (``%globaltimer`` steps by 32 ns on the H200). A step
kernel gets the probes right before and after it (between) and the probe beside it that lies at least 90% inside it
(during): that probe samples the clock over its own few microseconds, not over the whole kernel as ncu's average
does. Its durations under the probes are recorded too, so a probe that moved the kernel is seen.

Writes {case: {"kernels": [{"name", "grid", "us": {context: median}, "mhz": {"before", "after", "during"}}],
"nvml": {...}} or {"error": ...}} and prints one line per case.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnprof.core.measure.targets import build_workload
from attnprof.core.measure.timing import Flusher
from attnprof.core.measure.triton_hooks import launch_enter_hook
from bench.h200_isolation import Event, _events, _Switch, trace_block

CONTEXTS = ("sequence", "between", "during")
SLOTS = 1 << 16
# Kineto reads a one-warp spin of n cycles as n / clock + 0.70 µs on the H200 (the ncu-grid data, 5-50 µs spins)
KINETO_SPIN_OFFSET_US = 0.70
INSIDE = 0.9  # the share of a beside-probe's time that must fall inside the kernel it is read for


class Probe:
    """Queues clock probes into a device buffer, one slot each, in launch order; re-entry (the probe's own Triton
    launch reaching the launch hook) does nothing."""

    def __init__(self, cycles: int, side: torch.cuda.Stream | None) -> None:
        from bench.h200_clock_kernel import clock_probe

        self.kernel = clock_probe
        self.cycles = cycles
        self.side = side
        self.buf = torch.zeros(2 * SLOTS, dtype=torch.int64, device="cuda")
        self.slot = 0
        self._busy = False

    def __call__(self) -> None:
        if self._busy or self.slot >= SLOTS:
            return
        self._busy = True
        try:
            if self.side is None:
                self.kernel[(1,)](self.buf, self.slot, self.cycles, num_warps=1)
            else:
                self.side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(self.side):
                    self.kernel[(1,)](self.buf, self.slot, self.cycles, num_warps=1)
            self.slot += 1
        finally:
            self._busy = False

    def readings(self) -> list[tuple[int, int]]:
        """(cycles, ns) per probe in launch order; the buffer is then reused from slot 0."""
        torch.cuda.synchronize()
        raw = self.buf[: 2 * self.slot].view(-1, 2).tolist()
        self.slot = 0
        return [(int(c), int(ns)) for c, ns in raw]


def split_step(
    events: list[Event], drop: set[tuple[str, tuple[int, ...], tuple[int, ...]]]
) -> list[tuple[list[Event], list[tuple[int, Event]]]]:
    """Per iteration (between a pair of markers): the step's kernels, and the probes with their index among all
    probes of the trace (the flush's kernels dropped). A probe on the second stream can start before the step's
    first kernel or end after its last one; it belongs to the iteration its start falls in."""
    iterations: list[tuple[list[Event], list[tuple[int, Event]]]] = []
    inside = False
    n_probe = 0
    for e in events:
        name = e[0]
        if "spin_kernel" in name:
            inside = not inside
            if inside:
                iterations.append(([], []))
        elif "clock_probe" in name:
            if iterations:
                iterations[-1][1].append((n_probe, e))
            n_probe += 1
        elif e[:3] in drop:
            continue
        elif inside:
            iterations[-1][0].append(e)
    return iterations


def mhz(reading: tuple[int, int]) -> float | None:
    cycles, ns = reading
    return cycles / ns * 1000.0 if ns > 0 else None


def _overlap(a: Event, b: Event) -> float:
    return max(0.0, min(a[3] + a[4], b[3] + b[4]) - max(a[3], b[3]))


def around(kernels: list[Event], clocks: list[tuple[Event, float | None]]) -> tuple[list[float | None], ...]:
    """Per kernel, the clock of the last probe that ended before it started and of the first that started after it
    ended (probes on the kernels' own stream)."""
    before = [next((c for e, c in reversed(clocks) if e[3] + e[4] <= k[3]), None) for k in kernels]
    after = [next((c for e, c in clocks if e[3] >= k[3] + k[4]), None) for k in kernels]
    return before, after


def inside(kernels: list[Event], clocks: list[tuple[Event, float | None]], share: float = INSIDE) -> list[float | None]:
    """Per kernel, the clock of the probe (on the second stream) that lies most inside it, if at least ``share`` of
    that probe's time does: a probe that ran only partly beside the kernel read another kernel's clock as well."""
    out: list[float | None] = []
    for k in kernels:
        best = max(clocks, key=lambda ec: _overlap(ec[0], k), default=None)
        ok = best is not None and best[0][4] > 0 and _overlap(best[0], k) >= share * best[0][4]
        out.append(best[1] if ok and best is not None else None)
    return out


class Sampler:
    """NVML in a thread: SM clock (MHz), power (W) and the clock event reasons, every ``period_s``."""

    def __init__(self, period_s: float = 0.001) -> None:
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        self.period_s = period_s
        self.samples: list[tuple[float, float, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = reasons or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def _run(self) -> None:
        n = self.nvml
        while not self._stop.is_set():
            self.samples.append(
                (
                    float(n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM)),
                    n.nvmlDeviceGetPowerUsage(self.handle) / 1000.0,
                    int(self._reasons(self.handle)),
                )
            )
            time.sleep(self.period_s)

    def __enter__(self) -> Sampler:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> dict[str, Any]:
        s, self.samples = self.samples, []
        if not s:
            return {}
        names = {
            "sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80,
        }  # fmt: skip
        return {
            "samples": len(s),
            "sm_mhz": {"median": statistics.median(x[0] for x in s), "min": min(x[0] for x in s)},
            "power_w": {"median": statistics.median(x[1] for x in s), "max": max(x[1] for x in s)},
            "reasons": {k: sum(1 for x in s if x[2] & bit) / len(s) for k, bit in names.items()},
        }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--case", action="append", default=None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--per-block", type=int, default=8)
    parser.add_argument("--probe-cycles", type=int, default=20000, help="the probe between operators")
    parser.add_argument(
        "--beside-cycles", type=int, default=8000, help="the probe beside a kernel: short, so it fits inside one"
    )
    args = parser.parse_args()
    from bench.h200_hold import cases_matching
    from bench.h200_isolation import flush_and_signature

    flush, flush_kernels = flush_and_signature()
    probes = {"between": Probe(args.probe_cycles, None), "during": Probe(args.beside_cycles, torch.cuda.Stream())}
    for p in probes.values():  # compile
        p()
        p.readings()
    # the probe alone, on an otherwise idle GPU and right after the flush
    for _ in range(20):
        flush()
        probes["between"]()
    idle_mhz = [mhz(r) for r in probes["between"].readings()]
    sampler = Sampler()
    switch = _Switch()
    results: dict[str, Any] = {
        "probe_cycles": args.probe_cycles,
        "beside_cycles": args.beside_cycles,
        "inside": INSIDE,
        "after_flush_mhz": idle_mhz,
        "cases": {},
    }
    started = time.perf_counter()
    with launch_enter_hook(switch):
        chosen = cases_matching(args.suites, args.case or ["*"])
        for n, (suite, spec) in enumerate(chosen, 1):
            key = f"{suite.name}/{spec.id}"
            try:
                r = _case(spec, flush, flush_kernels, probes, sampler, switch, args.blocks, args.per_block)
            except Exception as exc:  # a case the probes cannot run beside is reported, the rest go on
                r = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            torch.cuda.empty_cache()
            results["cases"][key] = r
            line = r.get("error") or ", ".join(
                f"{k['name'][:32]} {k['us']['sequence']:.1f}us {k['mhz']['before']}/{k['mhz']['during']}MHz"
                for k in r["kernels"][:3]
            )
            print(f"[{n}/{len(chosen)} {time.perf_counter() - started:.0f}s] {key}: {line}", flush=True)
            args.out.write_text(json.dumps(results, indent=1))
    return 0


def _med(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return round(statistics.median(v), 1) if v else None


def _case(
    spec: Any,
    flush: Flusher,
    flush_kernels: set[tuple[str, tuple[int, ...], tuple[int, ...]]],
    probes: dict[str, Probe],
    sampler: Sampler,
    switch: _Switch,
    blocks: int,
    per_block: int,
) -> dict[str, Any]:
    switch.hook = None
    torch._dynamo.reset()
    w = build_workload(spec, "cuda")
    hooks: dict[str, Callable[[], None] | None] = {"sequence": None, **probes}
    durations: dict[str, list[list[float]]] = {c: [] for c in CONTEXTS}
    before: list[list[float | None]] = []
    after: list[list[float | None]] = []
    during: list[list[float | None]] = []
    reference: list[tuple[str, tuple[int, ...]]] = []
    check: list[tuple[float | None, float]] = []  # between probes: (globaltimer clock, Kineto clock)
    nvml: dict[str, Any] = {}
    with w.context():
        for _ in range(3):
            w.zero_grads()
            w.step()
        torch.cuda.synchronize()
        for b in range(blocks):
            for context in CONTEXTS if b % 2 == 0 else tuple(reversed(CONTEXTS)):
                hook = hooks[context]
                prof = trace_block(
                    w, flush, hook, switch, per_block, alongside=sampler if context == "sequence" else None
                )
                readings = probes[context].readings() if context in probes else []
                iterations = split_step(_events(prof), flush_kernels)
                if len(iterations) != per_block:
                    raise RuntimeError(f"{len(iterations)} marked iterations under {context}, not {per_block}")
                for kernels, its_probes in iterations:
                    names = [(e[0], e[1]) for e in kernels]
                    if not reference:
                        reference = names
                    if names != reference:
                        raise RuntimeError(
                            f"kernel sequence under {context} differs from the trace pass ({len(names)} kernels "
                            f"against {len(reference)}): not covered"
                        )
                    durations[context].append([e[4] for e in kernels])
                    clocks = [(e, mhz(readings[i]) if i < len(readings) else None) for i, e in its_probes]
                    if context == "between":
                        check += [
                            (mhz(readings[i]), readings[i][0] / (e[4] - KINETO_SPIN_OFFSET_US))
                            for i, e in its_probes
                            if i < len(readings) and e[4] > KINETO_SPIN_OFFSET_US
                        ]
                        b_row, a_row = around(kernels, clocks)
                        before.append(b_row)
                        after.append(a_row)
                    elif context == "during":
                        during.append(inside(kernels, clocks))
        nvml = sampler.summary()
    return {
        "iterations": blocks * per_block,
        "nvml_sequence": nvml,
        "probe_check_mhz": {
            "globaltimer": _med([g for g, _ in check]),
            "kineto": _med([k for _, k in check]),
        },
        "kernels": [
            {
                "name": name,
                "grid": list(grid),
                "us": {c: round(statistics.median(it[j] for it in durations[c]), 3) for c in CONTEXTS},
                "mhz": {
                    "before": _med([it[j] for it in before]),
                    "after": _med([it[j] for it in after]),
                    "during": _med([it[j] for it in during]),
                },
            }
            for j, (name, grid) in enumerate(reference)
        ],
    }


if __name__ == "__main__":
    sys.exit(main())
