"""Is the spread between processes the process, or the time? A suite profiled several times in one process.

    PYTHONPATH=. python3 bench/h200_same_process.py SUITE --times 5 --out DIR

Five independent processes put a short suite's case medians up to 0.5% apart, and the cases of one process
share the offset (``bench/reports/h200-truth.md``, section 4). Here one process profiles the suite ``--times``
times back to back, each a complete `attnprof profile` session of its own (rounds, flush, hold), and writes
DIR/session<i>.json.gz. If the sessions of one process spread as widely as separate processes do, what the
cases share is the GPU's level at the time, not the process.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

from attnprof.core.measure.runner import ProfileOptions, profile_suite
from attnprof.core.suite import load_suite


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suite")
    parser.add_argument("--times", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    suite = load_suite(args.suite)
    for i in range(1, args.times + 1):
        started = time.perf_counter()
        doc = profile_suite(
            suite,
            ProfileOptions(
                device="cuda", cache_dir=Path("/tmp/attnprof-cache"), command=f"h200_same_process session {i}"
            ),
        )
        with gzip.open(args.out / f"session{i}.json.gz", "wt") as f:
            f.write(doc.to_json())
        print(f"session {i}: {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
