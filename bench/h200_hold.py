"""Where the blocking kernel goes: a measured cause for the gap between our case medians and do_bench's.

    PYTHONPATH=. python3 bench/h200_hold.py SUITE... --case GLOB... --out FILE

In one process, per case, interleaved in blocks of 10 iterations (so drift cancels), three orders of the
timed iteration, each ended by events around the step:
  flush-hold:  flush, hold (torch.cuda._sleep sized as the profiler does), start, step, end
  hold-flush:  hold, flush, start, step, end  (the flush, a whole-GPU read sweep, right before the step)
  no-hold:     flush, start, step, end        (do_bench's order)
and triton.testing.do_bench (median mode) with the same clean flush patched in. Writes {case: {order: median µs}}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from attnprof.core.errors import SuiteError
from attnprof.core.measure.targets import build_workload
from attnprof.core.measure.timing import Flusher, Holder, host_time_us
from attnprof.core.suite import CaseSpec, Suite, load_suite, select_cases

ORDERS = ("flush-hold", "hold-flush", "no-hold")


def _time(order: str, step: Any, before: Any, flush: Flusher, hold: Holder, n: int) -> list[float]:
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for start, end in pairs:
        before()
        if order == "flush-hold":
            flush()
            hold()
        elif order == "hold-flush":
            hold()
            flush()
        else:
            flush()
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 for s, e in pairs]


def cases_matching(paths: list[str], patterns: list[str]) -> list[tuple[Suite, CaseSpec]]:
    """The cases of several suites that match any pattern (a pattern may name a case of another suite)."""
    out = []
    for path in paths:
        suite = load_suite(path)
        chosen: set[str] = set()
        for pattern in patterns:
            with contextlib.suppress(SuiteError):
                chosen |= {c.id for c in select_cases(suite, [pattern])}
        out += [(suite, c) for c in suite.cases if c.id in chosen]
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--case", action="append", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--blocks", type=int, default=30)
    args = parser.parse_args()
    import triton
    from triton.testing import do_bench

    flush = Flusher("cuda")
    results: dict[str, Any] = {}
    for suite, spec in cases_matching(args.suites, args.case):
        w = build_workload(spec, "cuda")
        with w.context():
            for _ in range(10):
                w.zero_grads()
                w.step()
            host = host_time_us(w.step, w.zero_grads)
            hold = Holder(host, 1980.0)
            samples: dict[str, list[float]] = {o: [] for o in ORDERS}
            for b in range(args.blocks):
                for o in ORDERS if b % 2 == 0 else reversed(ORDERS):
                    samples[o] += _time(o, w.step, w.zero_grads, flush, hold, 10)
            driver = triton.runtime.driver.active
            original = driver.clear_cache
            driver.clear_cache = lambda cache, flush=flush: flush()
            try:

                def step(w: Any = w) -> None:
                    w.zero_grads()
                    w.step()

                dbc = do_bench(step, return_mode="median") * 1000.0
            finally:
                driver.clear_cache = original
        row = {o: statistics.median(v) for o, v in samples.items()}
        row["do_bench_clean"] = dbc
        row["host_us"] = host
        results[f"{suite.name}/{spec.id}"] = row
        print(spec.id, {k: round(v, 2) for k, v in row.items()}, flush=True)
        torch.cuda.empty_cache()
    args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
