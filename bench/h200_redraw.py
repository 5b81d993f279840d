"""Does drawing each round's memory afresh narrow the spread between processes? The suite profiled both ways.

    PYTHONPATH=. python3 bench/h200_redraw.py SUITE --variant {reuse,redraw} --out DIR

``bench/h200_workspace.py`` found that some kernels' levels follow where their tensors land in physical memory, and
that one workload's rounds keep one placement. The profiler now gives the allocator's cached blocks back before it
builds each round's workload (``profiler_core.measure.runner.release_cached_memory``), so that each round draws a
placement of its own:

  redraw   the profiler as shipped
  reuse    the same with that release left out: every round of a case gets the blocks the last one freed

Writes DIR/<variant>-<pid>.json.gz (the result document).
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from pathlib import Path

from profiler_core.measure import runner
from profiler_core.suite import load_suite


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suite")
    parser.add_argument("--variant", choices=("reuse", "redraw"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.variant == "reuse":
        runner.release_cached_memory = lambda device: None  # type: ignore[assignment]
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
