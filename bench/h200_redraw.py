"""Does drawing each round's memory afresh narrow the spread between processes? The suite profiled both ways.

    PYTHONPATH=. python3 bench/h200_redraw.py SUITE --variant {reuse,redraw} --out DIR

``bench/h200_workspace.py`` found that some kernels' levels follow where their tensors land in physical memory. A
profile run builds each case again in each round, its tensors taken from PyTorch's caching allocator; here the run
is made both ways:

  reuse    the profiler as it is: each round's tensors come from the blocks the allocator holds
  redraw   the allocator's cached blocks given back to the driver (``torch.cuda.empty_cache``) right before each
           round's build, so that its tensors come fresh from the driver (what a paired run's side processes do
           after each round)

(The committed data, ``bench/reports/data/h200-spread-causes-2026-12-03/redraw``, was gathered when the release
was a step of the runner's own; it ran at the same point, right before the build.)

Writes DIR/<variant>-<pid>.json.gz (the result document).
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from pathlib import Path
from typing import Any

from profiler_core.measure import runner
from profiler_core.suite import load_suite


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suite")
    parser.add_argument("--variant", choices=("reuse", "redraw"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.variant == "redraw":
        import torch

        build = runner.build_workload

        def build_in_fresh_memory(spec: Any, device: str, *, seed: int = 0) -> Any:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            return build(spec, device, seed=seed)

        runner.build_workload = build_in_fresh_memory  # type: ignore[assignment]
    started = time.perf_counter()
    doc = runner.profile_suite(
        load_suite(args.suite),
        runner.ProfileOptions(
            device="cuda", cache_dir=Path("/tmp/attnprof-cache"), command=f"h200_redraw {args.variant}"
        ),
    )
    stem = f"{args.variant}-{os.getpid()}"
    with gzip.open(args.out / f"{stem}.json.gz", "wt") as f:
        f.write(doc.to_json())
    print(f"{stem}: profiled in {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
