"""Does what Nsight Compute adds to a launch grow with the grid? A spin kernel of known length over grids of 1 to
4,096 blocks, timed by Kineto (as the trace pass times kernels) and by ncu.

    PYTHONPATH=. python3 bench/h200_ncu_grid.py kineto --out grid-kineto.json
    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \\
        python3 bench/h200_ncu_grid.py ncu-driver > grid-ncu.csv

Each block of one warp spins on ``%clock64`` for a number of SM cycles, so a grid that runs in one wave lasts the
spin whatever its size. On the H200 grids up to 1,056 blocks did; 4,096 did not (Kineto read 11 µs for a 5 µs
spin), and ``bench/h200_truth_report.py`` keeps only the grids whose Kineto reading is within 1 µs (plus 5%) of the
spin. Both modes launch each (grid, length) 5 times after the flush, in the same order; the report reads ncu's
reading less Kineto's as ncu's cost per launch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

from attnprof.core.measure.timing import Flusher
from bench.h200_isolation import _kernels

GRIDS = (1, 132, 528, 1056, 4096)
LENGTHS_US = (5.0, 20.0, 50.0)
CLOCK_MHZ = 1980.0
REPS = 5


@triton.jit
def grid_spin(out_ptr, cycles):  # type: ignore[no-untyped-def]
    start = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    now = start
    while now - start < cycles:
        now = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr + tl.program_id(0), now - start)


def _launches(flush: Flusher, out: torch.Tensor) -> None:
    for grid in GRIDS:
        for us in LENGTHS_US:
            for _ in range(REPS):
                flush()
                grid_spin[(grid,)](out, int(us * CLOCK_MHZ), num_warps=1)


def kineto(path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    flush = Flusher("cuda")
    out = torch.zeros(max(GRIDS), dtype=torch.int64, device="cuda")
    _launches(flush, out)  # compile and warm
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _launches(flush, out)
        torch.cuda.synchronize()
    durations = [dur for name, _grid, _block, dur in _kernels(prof) if "grid_spin" in name]  # in launch order
    result: dict[str, float] = {}
    i = 0
    for grid in GRIDS:
        for us in LENGTHS_US:
            result[f"{grid}x{us:g}"] = statistics.median(durations[i : i + REPS])
            i += REPS
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


def profiled_second_time(launches: Callable[[], None]) -> None:
    """``launches`` once to compile and warm, then again between cudaProfilerStart and Stop: what
    ``ncu --profile-from-start off`` profiles."""
    launches()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    launches()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def ncu_driver() -> None:
    flush = Flusher("cuda")
    out = torch.zeros(max(GRIDS), dtype=torch.int64, device="cuda")
    profiled_second_time(lambda: _launches(flush, out))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("kineto", "ncu-driver"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.mode == "kineto":
        kineto(args.out)
    else:
        ncu_driver()
    return 0


if __name__ == "__main__":
    sys.exit(main())
