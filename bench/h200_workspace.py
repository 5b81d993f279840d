"""Does a kernel's level follow where its memory lands? Rounds of rebuilt workloads, with their allocations.

    PYTHONPATH=. python3 bench/h200_workspace.py SUITE... --case GLOB... --out FILE [--rounds 16] [--samples 150]

``bench/h200_placement.py`` found that some cases' round medians range wider when the workload is built again
after a pad of random size than when one workload runs round after round. Here, per case, in one process:
``--rounds`` rounds of one workload (``same``), then as many of a workload built again after the allocator's cache
is emptied and a pad of random size (0-62 MiB, 2 MiB steps) allocated (``rebuilt``); each round's median of
``--samples`` iterations timed as the profiler times them (hold, clean flush, events around the step), and, for
rebuilt rounds, every allocation the build and one step make (address and size, from the allocator's own
history). A level set by placement switches between rebuilt rounds and not between same ones; where the
switch follows an address, the allocations name the buffer.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import torch

from attnprof.core.measure.targets import build_workload
from attnprof.core.measure.timing import Flusher
from bench.h200_hold import cases_matching
from bench.h200_placement import PAD_STEP, _holder, _time


def allocations(fn: Any) -> tuple[Any, list[list[int]]]:
    """``fn()``'s result and the (address, bytes) of every block the allocator handed out while it ran, from the
    allocator's recorded history."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")
    try:
        result = fn()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    device = torch.cuda.current_device()
    traces = snapshot.get("device_traces", [])
    events = traces[device] if device < len(traces) else []
    return result, [[int(e["addr"]), int(e["size"])] for e in events if e.get("action") == "alloc"]


def _one_step(w: Any) -> None:
    w.zero_grads()
    w.step()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--case", action="append", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    flush = Flusher("cuda")
    results: dict[str, Any] = {}
    for suite, spec in cases_matching(args.suites, args.case):
        key = f"{suite.name}/{spec.id}"
        try:
            out = _case(spec, flush, rng, args.rounds, args.samples)
        except Exception as exc:  # a case this GPU cannot run is reported, the rest go on
            results[key] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(key, results[key]["error"], flush=True)
            torch.cuda.empty_cache()
            continue
        results[key] = out
        rebuilt = sorted(r["us"] for r in out["rebuilt"])
        print(key, "same", [round(x, 1) for x in out["same"]], "rebuilt", [round(x, 1) for x in rebuilt], flush=True)
        args.out.write_text(json.dumps(results))
    return 0


def _case(spec: Any, flush: Flusher, rng: random.Random, rounds: int, samples: int) -> dict[str, Any]:
    out: dict[str, Any] = {"same": [], "rebuilt": []}
    w = build_workload(spec, "cuda")
    with w.context():
        hold = _holder(w)
        for _ in range(rounds):
            out["same"].append(_time(w.step, w.zero_grads, flush, hold, samples))
    del w
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        pad_bytes = rng.randrange(0, 32) * PAD_STEP
        pad = torch.empty(pad_bytes, dtype=torch.uint8, device="cuda")
        w, built = allocations(lambda spec=spec: build_workload(spec, "cuda"))
        with w.context():
            hold = _holder(w)
            us = _time(w.step, w.zero_grads, flush, hold, samples)
            _, stepped = allocations(lambda w=w: _one_step(w))
        out["rebuilt"].append({"us": us, "pad_bytes": pad_bytes, "built": built, "step": stepped})
        del w, pad
    return out


if __name__ == "__main__":
    sys.exit(main())
