"""One iteration of one case between cudaProfilerStart/Stop: what the Nsight Compute pass replays.

``python -m attnprof.core.measure.single SUITE --case ID [--seed N]``. Warm-up iterations and the L2
flush run outside the profiled range, so ``ncu --profile-from-start off`` sees only the case's own
kernels of one iteration.
"""

from __future__ import annotations

import argparse
import sys

import torch

from attnprof.core.measure.targets import build_workload
from attnprof.core.measure.timing import Flusher
from attnprof.core.suite import load_suite, select_cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnprof.core.measure.single")
    parser.add_argument("suite")
    parser.add_argument("--case", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    suite = load_suite(args.suite)
    (spec,) = [c for c in select_cases(suite, [args.case]) if c.id == args.case]
    workload = build_workload(spec, "cuda", seed=args.seed)
    flush = Flusher("cuda")
    with workload.context():
        for _ in range(args.warmup):
            workload.zero_grads()
            workload.step()
        workload.zero_grads()
        flush()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()  # type: ignore[no-untyped-call]
        workload.step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()  # type: ignore[no-untyped-call]
    return 0


if __name__ == "__main__":
    sys.exit(main())
