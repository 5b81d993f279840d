"""Which flush: a sum into int64 (which first writes an int64 copy of the buffer), a max in the buffer's dtype
(one read), and do_bench's zero_() (one write), each after the hold, interleaved in blocks of 10.

    PYTHONPATH=. python3 bench/h200_flush_variants.py SUITE... --case GLOB... --out FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from attnprof.core.measure.targets import build_workload
from attnprof.core.measure.timing import FLUSH_BYTES_CUDA, Holder, host_time_us

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200_hold import cases_matching  # the sibling script

BUFFER = torch.ones(FLUSH_BYTES_CUDA // 4, dtype=torch.int32, device="cuda")
SINK64 = torch.zeros((), dtype=torch.int64, device="cuda")
SINK32 = torch.zeros((), dtype=torch.int32, device="cuda")
FLUSHES = {
    "sum-int64": lambda: torch.sum(BUFFER, dim=0, dtype=torch.int64, out=SINK64),
    "amax": lambda: torch.amax(BUFFER, dim=0, out=SINK32),
    "zero_": lambda: BUFFER.zero_(),
}


def _time(flush: Any, w: Any, hold: Holder, n: int) -> list[float]:
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for start, end in pairs:
        w.zero_grads()
        hold()
        flush()
        start.record()
        w.step()
        end.record()
    torch.cuda.synchronize()
    BUFFER.fill_(1)
    return [s.elapsed_time(e) * 1000.0 for s, e in pairs]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--case", action="append", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for suite, spec in cases_matching(args.suites, args.case):
        w = build_workload(spec, "cuda")
        with w.context():
            for _ in range(10):
                w.zero_grads()
                w.step()
            hold = Holder(host_time_us(w.step, w.zero_grads), 1980.0)
            samples: dict[str, list[float]] = {k: [] for k in FLUSHES}
            for b in range(30):
                names = list(FLUSHES) if b % 2 == 0 else list(reversed(FLUSHES))
                for name in names:
                    samples[name] += _time(FLUSHES[name], w, hold, 10)
        results[f"{suite.name}/{spec.id}"] = {k: statistics.median(v) for k, v in samples.items()}
        print(spec.id, {k: round(v, 2) for k, v in results[f"{suite.name}/{spec.id}"].items()}, flush=True)
    args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
