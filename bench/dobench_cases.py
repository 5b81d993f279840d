"""Time each case of a suite with ``triton.testing.do_bench`` (median mode): the reference timer.

    PYTHONPATH=. python3 bench/dobench_cases.py examples/llama7b.toml --out dobench.json

Same workloads as ``attnprof profile`` (``attnprof.core.measure.targets``), do_bench's defaults
(25 ms warm-up, 100 ms of repetitions, its own 256 MB L2 flush). Writes {case id: median µs}.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from triton.testing import do_bench

from attnprof.core.measure.targets import SkipCase, build_workload
from attnprof.core.suite import load_suite


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suite")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    suite = load_suite(args.suite)
    medians: dict[str, float | None] = {}
    for case in suite.cases:
        try:
            w = build_workload(case, "cuda")
            with w.context():

                def step(w=w):
                    w.zero_grads()
                    w.step()

                medians[case.id] = do_bench(step, return_mode="median") * 1000.0
        except (SkipCase, RuntimeError) as exc:
            print(f"{case.id}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
            medians[case.id] = None
        torch.cuda.empty_cache()
        print(f"do_bench {case.id}: {medians[case.id]}", flush=True)
    with open(args.out, "w") as f:
        json.dump(medians, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
