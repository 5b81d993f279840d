"""Does the GPU's state when timing starts set a run's level? A suite profiled hot, settled and cold.

    PYTHONPATH=. python3 bench/h200_settle.py SUITE --condition {hot,settled,cold} --out DIR [--preload-s 10]

In the truth report's five-process runs the validation set, profiled right after the example suite's do_bench
pass (45-52 °C at its start, power-capped in 2 of 5 runs), took a level that its cases shared and that moved from
process to process by up to 0.8%; profiled from an idle GPU its cases' offsets stayed within 0.07%. Here every
process first loads the GPU as that pass did (bf16 matmuls of 8192 for ``--preload-s``), then, by ``--condition``:

  hot      profiles at once (what the truth runs did)
  settled  idles until the temperature stops falling (``settle`` below), then profiles
  cold     idles ``--cold-s``, then profiles

Writes DIR/<condition>-<pid>.json.gz (the result document) and DIR/<condition>-<pid>.times.json (wall-clock times of
each phase and what the wait saw); ``bench/nvml_log.py`` beside it records the GPU's state through all of it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnprof.core.measure import environment as env
from attnprof.core.measure.runner import ProfileOptions, profile_suite
from attnprof.core.suite import load_suite

# The wait before timing (``settle``): idle until the GPU's temperature stops falling.
SETTLE_WINDOW_S = 5.0  # the temperature fell no more than SETTLE_DROP_C over this long: settled
SETTLE_DROP_C = 1.0
SETTLE_MAX_S = 60.0  # a GPU still cooling after this long is timed all the same
SETTLE_POLL_S = 0.5


@dataclass
class Settled:
    """What the wait before timing saw: how long it idled, the temperatures at its ends, whether it settled."""

    waited_s: float
    temperature_start_c: float | None
    temperature_end_c: float | None
    settled: bool


def settle(
    nvml: env.Nvml,
    *,
    window_s: float = SETTLE_WINDOW_S,
    drop_c: float = SETTLE_DROP_C,
    max_s: float = SETTLE_MAX_S,
    poll_s: float = SETTLE_POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
) -> Settled:
    """Idle until the GPU's temperature has fallen no more than ``drop_c`` over the last ``window_s``, at most
    ``max_s``: a GPU still hot from earlier work (another job, the peaks' calibration) runs its power-capped
    kernels at a clock that moves as it cools. The GPU is left idle meanwhile; nothing runs on it."""
    t0 = now()
    readings: list[tuple[float, float]] = []
    while True:
        temp = nvml.health().temperature_c
        t = now() - t0
        if temp is None:  # NVML cannot say (any more): the wait ends, unsettled, with what it saw
            first = readings[0][1] if readings else None
            last = readings[-1][1] if readings else None
            return Settled(round(t, 1), first, last, False)
        readings.append((t, float(temp)))
        before = [c for s, c in readings if s <= t - window_s]
        if before and before[-1] - temp <= drop_c:
            return Settled(round(t, 1), readings[0][1], temp, True)
        if t >= max_s:
            return Settled(round(t, 1), readings[0][1], temp, False)
        sleep(poll_s)


def preload(seconds: float) -> int:
    """bf16 matmuls of 8192 back to back for ``seconds``: the GPU at its power cap, as a long compute pass leaves it."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(8):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        n += 8
    del a, b, c
    torch.cuda.empty_cache()
    return n


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suite")
    parser.add_argument("--condition", choices=("hot", "settled", "cold"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--preload-s", type=float, default=10.0)
    parser.add_argument("--cold-s", type=float, default=60.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    torch.cuda.init()
    times: dict[str, object] = {"condition": args.condition, "start": time.time()}
    times["matmuls"] = preload(args.preload_s)
    times["preload_end"] = time.time()
    if args.condition == "settled":
        nvml = env.Nvml.open()
        if nvml is None:
            raise SystemExit("NVML is not available: the settled condition needs the GPU's temperature")
        times["settle"] = dataclasses.asdict(settle(nvml))
    elif args.condition == "cold":
        time.sleep(args.cold_s)
    times["profile_start"] = time.time()
    doc = profile_suite(
        load_suite(args.suite),
        ProfileOptions(device="cuda", cache_dir=Path("/tmp/attnprof-cache"), command=f"h200_settle {args.condition}"),
    )
    times["profile_end"] = time.time()
    stem = f"{args.condition}-{os.getpid()}"
    with gzip.open(args.out / f"{stem}.json.gz", "wt") as f:
        f.write(doc.to_json())
    (args.out / f"{stem}.times.json").write_text(json.dumps(times, indent=1))
    waited = times.get("settle", {})
    print(f"{stem}: profiled in {times['profile_end'] - times['profile_start']:.1f} s {waited}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
