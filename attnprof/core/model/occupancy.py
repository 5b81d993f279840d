"""Theoretical occupancy of a kernel launch by the CUDA occupancy rules.

Kineto's ``est. achieved occupancy %`` reads 0 for every kernel with more than 48 KB of dynamic shared
memory (all fused attention kernels), so occupancy is computed here from the launch record: threads per
block, registers per thread and shared memory per block (static + dynamic, as Kineto reports it).

The rules are those of ``cudaOccMaxActiveBlocksPerMultiprocessor`` in NVIDIA's ``cuda_occupancy.h`` (the
CUDA occupancy calculator header shipped with the toolkit), with the default shared-memory carveout
(the largest) and partitioned global caching off (Volta and later have none):

* warps per block W = ceil(threads / 32); warp limit = floor(max warps per SM / W);
* registers are allocated per warp: R = roundup(registers per thread × 32, 256). The register file is
  split over 4 sub-partitions, so warps per SM = floor((65536 / 4) / R) × 4 and the register limit is
  floor(that / W). The block does not launch (limit 0) when R × roundup(W, 4) or R × W exceeds the
  65536 registers of a block, or when registers per thread exceed 255;
* shared memory per block = roundup(shared + reserved, allocation unit), reserved being the 1 KiB the
  driver keeps per block from compute capability 8.0 on; limit = floor(shared memory per SM / that), 0
  when it exceeds the opt-in maximum per block (+ reserved);
* block limit = the maximum resident blocks per SM.

Active blocks = the smallest limit; occupancy = active blocks × W / max warps per SM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Limiter = Literal["warps", "registers", "shared_mem", "blocks"]

_KIB = 1024
_WARP = 32
_MAX_THREADS_PER_BLOCK = 1024


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources of one compute capability. Registers are 32-bit; memory in bytes."""

    max_warps_per_sm: int
    max_blocks_per_sm: int
    shared_mem_per_sm_bytes: int
    max_shared_mem_per_block_bytes: int
    reserved_shared_mem_per_block_bytes: int
    shared_mem_alloc_unit_bytes: int
    registers_per_sm: int = 65536
    max_registers_per_block: int = 65536
    max_registers_per_thread: int = 255
    register_alloc_unit: int = 256
    warp_alloc_granularity: int = 4

    @property
    def max_threads_per_sm(self) -> int:
        """Resident threads per SM."""
        return self.max_warps_per_sm * _WARP


# Capacities: CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
# (https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications) and
# the per-architecture tuning guides for the shared-memory carveouts. Allocation rules (shared-memory
# unit 256 B on 7.x and 128 B from 8.0; registers allocated per warp in units of 256 over 4
# sub-partitions, the "warp allocation granularity" below; max resident blocks per SM) from
# cuda_occupancy.h: cudaOccSMemAllocationGranularity, cudaOccRegAllocationGranularity,
# cudaOccSubPartitionsPerMultiprocessor, cudaOccMaxBlocksPerMultiprocessor. The 1 KiB reserved per block
# is cudaDeviceProp::reservedSharedMemPerBlock, 0 before 8.0. The 255 registers per thread is the
# programming guide's limit (the header checks against 256, which no compiled kernel reaches).
SM_LIMITS: dict[str, SmLimits] = {
    "7.0": SmLimits(64, 32, 96 * _KIB, 96 * _KIB, 0, 256),  # V100
    "7.5": SmLimits(32, 16, 64 * _KIB, 64 * _KIB, 0, 256),  # Turing
    "8.0": SmLimits(64, 32, 164 * _KIB, 163 * _KIB, _KIB, 128),  # A100
    "8.6": SmLimits(48, 16, 100 * _KIB, 99 * _KIB, _KIB, 128),  # GA10x
    "8.7": SmLimits(48, 16, 164 * _KIB, 163 * _KIB, _KIB, 128),  # Orin
    "8.9": SmLimits(48, 24, 100 * _KIB, 99 * _KIB, _KIB, 128),  # Ada
    "9.0": SmLimits(64, 32, 228 * _KIB, 227 * _KIB, _KIB, 128),  # H100, H200
    "10.0": SmLimits(64, 32, 228 * _KIB, 227 * _KIB, _KIB, 128),  # B200
    "12.0": SmLimits(48, 24, 100 * _KIB, 99 * _KIB, _KIB, 128),  # RTX 50, RTX PRO Blackwell
}


@dataclass(frozen=True)
class Occupancy:
    """Theoretical occupancy of one launch configuration on one SM.

    ``fraction`` is active warps / max warps per SM (0 when the block cannot launch). The four
    ``*_limit`` fields are the resident blocks each resource allows (None: that resource sets no
    limit), like Nsight Compute's ``launch__occupancy_limit_*``; ``limiter`` names the one that binds.
    """

    fraction: float
    active_blocks_per_sm: int
    active_warps_per_sm: int
    limiter: Limiter
    warps_limit: int
    registers_limit: int | None
    shared_mem_limit: int | None
    blocks_limit: int


def sm_limits(cc: str) -> SmLimits:
    """The per-SM limits of a compute capability given as ``"9.0"`` or ``"sm_90"``."""
    key = cc.strip().lower()
    if key.startswith("sm"):
        digits = key.removeprefix("sm_").removeprefix("sm").rstrip("af")
        if digits.isdigit() and len(digits) >= 2:
            key = f"{int(digits[:-1])}.{digits[-1]}"
    if key not in SM_LIMITS:
        raise ValueError(f"unknown compute capability {cc!r}: known are {', '.join(SM_LIMITS)}")
    return SM_LIMITS[key]


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def theoretical_occupancy(
    cc: str, threads_per_block: int, registers_per_thread: int, shared_mem_bytes: int
) -> Occupancy:
    """Occupancy of a launch by the rules of ``cuda_occupancy.h`` (see the module docstring).

    ``threads_per_block`` is the product of the block dimensions; ``registers_per_thread`` 32-bit
    registers (0 allowed); ``shared_mem_bytes`` static + dynamic shared memory per block in bytes (0
    allowed). Raises ValueError for an unknown compute capability or an impossible block size.
    """
    lim = sm_limits(cc)
    if not 0 < threads_per_block <= _MAX_THREADS_PER_BLOCK:
        raise ValueError(f"threads_per_block must be in 1..{_MAX_THREADS_PER_BLOCK}, got {threads_per_block}")
    if registers_per_thread < 0 or shared_mem_bytes < 0:
        raise ValueError("registers_per_thread and shared_mem_bytes must not be negative")

    warps = -(-threads_per_block // _WARP)
    warps_limit = lim.max_warps_per_sm // warps
    warps_real = lim.max_warps_per_sm / warps

    regs_per_warp = _round_up(registers_per_thread * _WARP, lim.register_alloc_unit)
    registers_limit: int | None
    if regs_per_warp == 0:
        registers_limit, regs_real = None, float("inf")
    elif (
        registers_per_thread > lim.max_registers_per_thread
        or regs_per_warp * _round_up(warps, lim.warp_alloc_granularity) > lim.max_registers_per_block
        or regs_per_warp * warps > lim.max_registers_per_block
    ):
        registers_limit, regs_real = 0, 0.0
    else:
        per_partition = lim.registers_per_sm // lim.warp_alloc_granularity
        warps_per_sm = (per_partition // regs_per_warp) * lim.warp_alloc_granularity
        registers_limit = warps_per_sm // warps
        regs_real = per_partition / regs_per_warp * lim.warp_alloc_granularity / warps

    smem_per_block = _round_up(
        shared_mem_bytes + lim.reserved_shared_mem_per_block_bytes, lim.shared_mem_alloc_unit_bytes
    )
    shared_mem_limit: int | None
    if smem_per_block == 0:
        shared_mem_limit, smem_real = None, float("inf")
    elif smem_per_block > lim.max_shared_mem_per_block_bytes + lim.reserved_shared_mem_per_block_bytes:
        shared_mem_limit, smem_real = 0, 0.0
    else:
        shared_mem_limit = lim.shared_mem_per_sm_bytes // smem_per_block
        smem_real = lim.shared_mem_per_sm_bytes / smem_per_block

    blocks_limit = lim.max_blocks_per_sm
    candidates: list[tuple[int, float, Limiter]] = [
        (warps_limit, warps_real, "warps"),
        (registers_limit if registers_limit is not None else blocks_limit + 1, regs_real, "registers"),
        (shared_mem_limit if shared_mem_limit is not None else blocks_limit + 1, smem_real, "shared_mem"),
        (blocks_limit, float(blocks_limit), "blocks"),
    ]
    active = min(c[0] for c in candidates)
    # Several resources can allow the same whole number of blocks; the one closest to exhausted (the
    # smallest unrounded limit) is named, ties in the header's order: warps, registers, shared memory.
    binding = [c for c in candidates if c[0] == active]
    limiter = min(binding, key=lambda c: c[1])[2]
    active_warps = active * warps
    return Occupancy(
        fraction=active_warps / lim.max_warps_per_sm,
        active_blocks_per_sm=active,
        active_warps_per_sm=active_warps,
        limiter=limiter,
        warps_limit=warps_limit,
        registers_limit=registers_limit,
        shared_mem_limit=shared_mem_limit,
        blocks_limit=blocks_limit,
    )
