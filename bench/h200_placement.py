"""Where a case's process-to-process spread comes from: time, or where its tensors landed in memory.

    PYTHONPATH=. python3 bench/h200_placement.py SUITE... --case GLOB... --out FILE [--rounds 8] [--samples 150]

In one process, per case, ``--rounds`` medians of ``--samples`` iterations each, timed as the profiler
times them (hold, clean flush, events around the step), in three ways:
  same:      one workload, its rounds back to back (what varies: time alone)
  rebuilt:   the workload built again for each round, the allocator's cache emptied and a pad of a random
             size (0-62 MiB, 2 MiB steps) allocated first, so its tensors land elsewhere (time and placement)
  do_bench:  triton.testing.do_bench, median mode, with the clean flush patched in, once per round on the
             first workload (its own process-level level, for comparison)
Writes {case: {way: [round medians, µs]}}. Several processes of this give the between-process spread
beside the within-process spread of each way: if `rebuilt` varies within a process as much as the
processes' medians vary, and `same` does not, placement is the cause, and pooling rounds of rebuilt
workloads narrows the spread by about the square root of the rounds.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from attnprof.core.measure.targets import build_workload
from attnprof.core.measure.timing import Flusher, Holder, host_time_us
from bench.h200_hold import cases_matching

PAD_STEP = 2 * 1024 * 1024


def _time(step: Any, before: Any, flush: Flusher, hold: Holder, n: int) -> float:
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for start, end in pairs:
        before()
        hold()
        flush()
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in pairs)


def _holder(w: Any) -> Holder:
    for _ in range(10):
        w.zero_grads()
        w.step()
    return Holder(host_time_us(w.step, w.zero_grads), 1980.0)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--case", action="append", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    import triton
    from triton.testing import do_bench

    rng = random.Random(args.seed)
    flush = Flusher("cuda")
    driver = triton.runtime.driver.active
    driver.clear_cache = lambda cache: flush()
    results: dict[str, Any] = {}
    for suite, spec in cases_matching(args.suites, args.case):
        key = f"{suite.name}/{spec.id}"
        out: dict[str, list[float]] = {"same": [], "rebuilt": [], "do_bench": []}
        w = build_workload(spec, "cuda")
        with w.context():
            hold = _holder(w)

            def step(w: Any = w) -> None:
                w.zero_grads()
                w.step()

            for _ in range(args.rounds):
                out["same"].append(_time(w.step, w.zero_grads, flush, hold, args.samples))
                out["do_bench"].append(do_bench(step, return_mode="median") * 1000.0)
        del w
        for _ in range(args.rounds):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            pad = torch.empty(rng.randrange(0, 32) * PAD_STEP, dtype=torch.uint8, device="cuda")
            w = build_workload(spec, "cuda")
            with w.context():
                hold = _holder(w)
                out["rebuilt"].append(_time(w.step, w.zero_grads, flush, hold, args.samples))
            del w, pad
        results[key] = out
        print(key, {k: round(statistics.median(v), 2) for k, v in out.items()}, flush=True)
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
