"""NVML's readings every ``--every`` seconds until stopped: the GPU's state beside a benchmark that runs meanwhile.

    python3 bench/nvml_log.py --out nvml.csv [--every 0.1] &

One CSV row per reading: wall-clock time (s since the epoch), SM clock (MHz), power (W, NVML's own average),
GPU temperature (°C), utilisation (%) and the clock-event reasons (NVML's bit mask, as an integer). It runs in a
process of its own so that the benchmark's host thread never waits on it. SIGTERM ends it cleanly.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--every", type=float, default=0.1)
    parser.add_argument("--index", type=int, default=0)
    args = parser.parse_args()
    import pynvml as n

    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(args.index)
    reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    with args.out.open("w") as f:
        f.write("t,sm_mhz,power_w,temp_c,util_pct,reasons\n")
        while not stop:
            t = time.time()
            try:
                row = (
                    n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
                    n.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
                    n.nvmlDeviceGetUtilizationRates(h).gpu,
                    reasons(h),
                )
            except n.NVMLError as exc:
                f.write(f"# {t:.3f} {exc}\n")
            else:
                f.write(f"{t:.3f},{row[0]},{row[1]:.1f},{row[2]},{row[3]},{row[4]}\n")
            f.flush()
            time.sleep(max(0.0, args.every - (time.time() - t)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
