"""Does what Nsight Compute adds to a launch depend on what the kernel uses? Kernels of one known length that differ
in warps per block, shared memory and tensor cores, timed by Kineto (as the trace pass times kernels) and by ncu.

    PYTHONPATH=. python3 bench/h200_ncu_cost.py kineto --out cost-kineto.json
    ncu --profile-from-start off --clock-control none \\
        --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --csv --print-units base \\
        python3 bench/h200_ncu_cost.py ncu-driver > cost-ncu.csv

``bench/h200_ncu_grid.py`` measured ncu's cost on a one-warp spin: 0.9-1.3 µs. Attention kernels read 2-6 µs longer
under ncu than in the trace pass, after that cost and with or without ncu's flush. Every variant here spins for the
same number of SM cycles after its work, over one wave of blocks:

  spin          one warp, no shared memory (the grid study's kernel)
  spin-w8       eight warps
  dot64/dot128  eight warps load a 64x64 / 128x128 fp16 tile, multiply it on the tensor cores through shared
                memory, then spin
  load          eight warps stream 64 KiB per block from DRAM, then spin

Kineto times each variant right after the flush (as the trace pass) and after an idle gap (synchronise, 1 ms); each
(variant, grid) is launched ``REPS`` times in the same order in every mode. The shared memory each variant uses is
recorded from Triton's compiled metadata.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

from attnprof.core.measure.timing import Flusher
from bench.h200_isolation import _kernels
from bench.h200_ncu_grid import profiled_second_time

GRIDS = (132, 264)
SPIN_US = 20.0
CLOCK_MHZ = 1980.0
REPS = 5
TILE_ELEMS = 128 * 128
LOAD_PER_BLOCK = 64 * 1024 // 2  # fp16 elements


@triton.jit
def _spin(cycles):  # type: ignore[no-untyped-def]
    start = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    now = start
    while now - start < cycles:
        now = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    return now - start


@triton.jit
def cost_spin(out_ptr, cycles):  # type: ignore[no-untyped-def]
    tl.store(out_ptr + tl.program_id(0), _spin(cycles))


@triton.jit
def cost_dot(a_ptr, out_ptr, cycles, N: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs[:, None] * N + offs[None, :])
    acc = tl.dot(a, a)
    spun = _spin(cycles)
    tl.store(out_ptr + tl.program_id(0), tl.sum(tl.sum(acc, 1), 0).to(tl.int64) + spun)


@triton.jit
def cost_load(x_ptr, out_ptr, cycles, PER: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    base = tl.program_id(0).to(tl.int64) * PER
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, PER, BLOCK):
        acc += tl.load(x_ptr + base + i + tl.arange(0, BLOCK)).to(tl.float32)
    spun = _spin(cycles)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, 0).to(tl.int64) + spun)


def variants() -> dict[str, Callable[[int], object]]:
    """Each variant as a function of the grid that launches it once (and returns Triton's compiled kernel)."""
    cycles = int(SPIN_US * CLOCK_MHZ)
    out = torch.zeros(max(GRIDS), dtype=torch.int64, device="cuda")
    tile = torch.randn(TILE_ELEMS, device="cuda").half() / 64
    x = torch.randn(max(GRIDS) * LOAD_PER_BLOCK, device="cuda").half()
    return {
        "spin": lambda g: cost_spin[(g,)](out, cycles, num_warps=1),
        "spin-w8": lambda g: cost_spin[(g,)](out, cycles, num_warps=8),
        "dot64": lambda g: cost_dot[(g,)](tile, out, cycles, N=64, num_warps=8),
        "dot128": lambda g: cost_dot[(g,)](tile, out, cycles, N=128, num_warps=8),
        "load": lambda g: cost_load[(g,)](x, out, cycles, PER=LOAD_PER_BLOCK, BLOCK=1024, num_warps=8),
    }


def _launches(flush: Flusher, run: dict[str, Callable[[int], object]], idle: bool = False) -> None:
    for name in run:
        for grid in GRIDS:
            for _ in range(REPS):
                flush()
                if idle:
                    torch.cuda.synchronize()
                    time.sleep(0.001)
                run[name](grid)


def kineto(path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    flush = Flusher("cuda")
    run = variants()
    shared = {}
    for name in run:
        compiled = run[name](GRIDS[0])
        shared[name] = int(getattr(getattr(compiled, "metadata", None), "shared", 0) or 0)
    _launches(flush, run)
    torch.cuda.synchronize()
    result: dict[str, object] = {"spin_us": SPIN_US, "shared_bytes": shared}
    for mode, idle in (("after_flush", False), ("idle", True)):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            _launches(flush, run, idle)
            torch.cuda.synchronize()
        durations = [dur for name, _g, _b, dur in _kernels(prof) if name.startswith("cost_")]  # in launch order
        per: dict[str, float] = {}
        i = 0
        for name in run:
            for grid in GRIDS:
                per[f"{name}@{grid}"] = statistics.median(durations[i : i + REPS])
                i += REPS
        result[mode] = per
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


def ncu_driver() -> None:
    flush = Flusher("cuda")
    run = variants()
    profiled_second_time(lambda: _launches(flush, run))


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
