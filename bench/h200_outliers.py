"""Slow samples at batch starts: the decode cases of the example suite (and the first fused case), profiled as
``attnprof profile`` does, with each case's samples over twice its median listed by position.

    PYTHONPATH=. python3 bench/h200_outliers.py

Before the batch's lead hold (``attnprof.core.measure.timing.Holder.lead``) every tenth sample, each batch's
first, read 2-10x its case's median on a slow host (``bench/reports/h200-truth.md``, section 4).
"""

from __future__ import annotations

import statistics
import time

from attnprof.core.measure.runner import ProfileOptions, profile_suite
from attnprof.core.suite import load_suite, select_cases


def main() -> None:
    suite = load_suite("examples/llama7b.toml")
    started = time.time()
    cases = select_cases(suite, ["decode*", "sdpa[backend=cudnn,pass=fwd]"])
    doc = profile_suite(suite, ProfileOptions(device="cuda", cases=cases))
    print("wall", round(time.time() - started, 1))
    for c in doc.cases:
        assert c.latency_us is not None, c.error
        samples = c.latency_us.samples
        median = statistics.median(samples)
        slow = [i for i, x in enumerate(samples) if x > 2 * median]
        print(c.id, len(samples), round(median, 1), "outliers", len(slow), slow[:12], "suspect" if c.suspect else "")


if __name__ == "__main__":
    main()
