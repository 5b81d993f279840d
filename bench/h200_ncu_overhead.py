"""What Nsight Compute adds to a kernel's duration: a spin kernel of known length, timed both ways.

    PYTHONPATH=. python3 bench/h200_ncu_overhead.py events --out events.json
    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \\
        python3 bench/h200_ncu_overhead.py ncu-driver > ncu.csv

``torch.cuda._sleep(cycles)`` spins one thread for a number of SM clock cycles, so its duration is known in
cycles whatever memory does. ``events``: each length timed by CUDA events right after the flush, 300 times
(median, µs), and the SM clock read by NVML. ``ncu-driver``: each length launched 5 times between
cudaProfilerStart and Stop, for ncu's ``gpu__time_duration``. A constant difference between the two is what
ncu adds to every replayed launch; a proportional one, a different clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from attnprof.core.measure.timing import Flusher

LENGTHS_US = (2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0)
CLOCK_MHZ = 1980.0


def _cycles(us: float) -> int:
    return int(us * CLOCK_MHZ)


def events(out: Path) -> None:
    flush = Flusher("cuda")
    for _ in range(20):
        torch.cuda._sleep(_cycles(50.0))
    result = {}
    for us in LENGTHS_US:
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(300)]
        for start, end in pairs:
            flush()
            start.record()
            torch.cuda._sleep(_cycles(us))
            end.record()
        torch.cuda.synchronize()
        result[str(us)] = statistics.median(s.elapsed_time(e) * 1000.0 for s, e in pairs)
        print(us, round(result[str(us)], 3), flush=True)
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        result["sm_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    except Exception as exc:  # the clock is context, not the measurement
        result["sm_clock_mhz"] = f"unread: {exc}"
    out.write_text(json.dumps(result, indent=1))


def ncu_driver() -> None:
    flush = Flusher("cuda")
    for _ in range(20):
        torch.cuda._sleep(_cycles(50.0))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for us in LENGTHS_US:
        for _ in range(5):
            flush()
            torch.cuda._sleep(_cycles(us))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("events", "ncu-driver"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.mode == "events":
        events(args.out)
    else:
        ncu_driver()
    return 0


if __name__ == "__main__":
    sys.exit(main())
