"""Theoretical occupancy against values worked by hand from the cuda_occupancy.h rules.

Compute capability 9.0 (H200): 64 warps, 32 blocks, 65,536 registers (16,384 per sub-partition, 4
sub-partitions), 233,472 B (228 KiB) shared memory per SM, 232,448 B (227 KiB) per block at most,
1,024 B reserved per block, shared memory allocated in 128 B units, registers in 256 per warp.
Launch configurations are those of the committed traces (tests/data/h200/trace_*.json).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnprof.core.model import SM_LIMITS, sm_limits, theoretical_occupancy

DATA = Path(__file__).resolve().parents[1] / "data" / "h200"


def test_cudnn_fprop_is_one_block_limited_by_shared_memory() -> None:
    # block 384 -> 12 warps; warps: 64 // 12 = 5 blocks
    # registers 168 -> 168·32 = 5,376 per warp (21·256, no rounding); 16,384 // 5,376 = 3 warps per
    #   sub-partition -> 12 per SM -> 12 // 12 = 1 block (5,376·12 = 64,512 of 65,536: 98.4% used)
    # shared 232,448 + 1,024 = 233,472 (1,824·128) -> 233,472 // 233,472 = 1 block (100% used)
    # both allow 1 block; shared memory is the closer to exhausted. 12 / 64 = 0.1875 (ncu: 14% achieved)
    occ = theoretical_occupancy("9.0", 384, 168, 232_448)
    assert (occ.active_blocks_per_sm, occ.active_warps_per_sm, occ.fraction) == (1, 12, 0.1875)
    assert (occ.warps_limit, occ.registers_limit, occ.shared_mem_limit, occ.blocks_limit) == (5, 1, 1, 32)
    assert occ.limiter == "shared_mem"


def test_fp32_qk_gemm_is_register_limited() -> None:
    # sm80_xmma_gemm_f32f32 tn 64x256: block 128 -> 4 warps; warps 64 // 4 = 16
    # registers 255 -> 8,160 per warp, rounded up to 32·256 = 8,192; 16,384 // 8,192 = 2 per sub-partition
    #   -> 8 warps -> 8 // 4 = 2 blocks
    # shared 33,280 + 1,024 = 34,304 (268·128) -> 233,472 // 34,304 = 6 blocks
    # 2 blocks · 4 warps = 8 / 64 = 0.125 (ncu: 12% achieved; Kineto's estimate 13%)
    occ = theoretical_occupancy("9.0", 128, 255, 33_280)
    assert (occ.active_blocks_per_sm, occ.fraction, occ.limiter) == (2, 0.125, "registers")
    assert (occ.registers_limit, occ.shared_mem_limit) == (2, 6)


def test_fp32_pv_gemm() -> None:
    # nn 64x64: 121 registers -> 3,872, rounded up to 16·256 = 4,096; 16,384 // 4,096 = 4 -> 16 warps -> 4 blocks
    # shared 12,672 + 1,024 = 13,696 (107·128) -> 233,472 // 13,696 = 17 blocks
    # 4·4 = 16 warps / 64 = 0.25 (ncu: 24% achieved; Kineto 25%)
    occ = theoretical_occupancy("9.0", 128, 121, 12_672)
    assert (occ.active_blocks_per_sm, occ.fraction, occ.limiter, occ.shared_mem_limit) == (4, 0.25, "registers", 17)


def test_softmax_warp_forward() -> None:
    # block 32x4 = 128 -> 4 warps; 80 registers -> 2,560 (10·256); 16,384 // 2,560 = 6 -> 24 warps -> 6 blocks
    # shared 0 + 1,024 -> 228 blocks; 6·4 = 24 / 64 = 0.375 (ncu: 36% achieved; Kineto 38%)
    occ = theoretical_occupancy("9.0", 32 * 4, 80, 0)
    assert (occ.active_blocks_per_sm, occ.fraction, occ.limiter, occ.shared_mem_limit) == (6, 0.375, "registers", 228)


def test_flash_fwd_kernel() -> None:
    # 128 threads, 255 registers -> 2 blocks as for the fp32 GEMM
    # shared 65,536 + 1,024 = 66,560 (520·128) -> 233,472 // 66,560 = 3 blocks; 8 / 64 = 0.125
    occ = theoretical_occupancy("9.0", 128, 255, 65_536)
    assert (occ.active_blocks_per_sm, occ.fraction, occ.limiter, occ.shared_mem_limit) == (2, 0.125, "registers", 3)


def test_efficient_fmha_cutlass_kernel() -> None:
    # block 32x8 = 256 -> 8 warps; warps 64 // 8 = 8
    # 128 registers -> 4,096 per warp; 16,384 // 4,096 = 4 -> 16 warps -> 2 blocks
    # shared 52,224 + 1,024 = 53,248 (416·128) -> 233,472 // 53,248 = 4 blocks; 2·8 = 16 / 64 = 0.25
    occ = theoretical_occupancy("9.0", 256, 128, 52_224)
    assert (occ.active_blocks_per_sm, occ.fraction, occ.limiter) == (2, 0.25, "registers")
    assert (occ.warps_limit, occ.shared_mem_limit) == (8, 4)


def test_elementwise_and_reduce_kernels_fill_the_sm() -> None:
    # copy: 128 threads, 32 registers -> 1,024 per warp; 16 per sub-partition -> 64 warps -> 16 blocks,
    # warps 64 // 4 = 16 too: equal unrounded limits, the warp slots are named. 16·4 / 64 = 1.0
    occ = theoretical_occupancy("9.0", 128, 32, 0)
    assert (occ.fraction, occ.limiter, occ.registers_limit, occ.warps_limit) == (1.0, "warps", 16, 16)
    # all-reduce: 32x16 = 512 -> 16 warps, 64 // 16 = 4; shared 16 + 1,024 = 1,040 -> 1,152 -> 202 blocks
    occ = theoretical_occupancy("9.0", 512, 32, 16)
    assert (occ.active_blocks_per_sm, occ.fraction, occ.limiter, occ.shared_mem_limit) == (4, 1.0, "warps", 202)
    # where: 20 registers -> 640, rounded up to 768; 16,384 // 768 = 21 -> 84 warps -> 21 blocks; warps 16
    occ = theoretical_occupancy("9.0", 128, 20, 0)
    assert (occ.fraction, occ.limiter, occ.registers_limit) == (1.0, "warps", 21)


def test_trace_launch_configs_give_the_worked_values() -> None:
    expected = {"trace_cudnn.json": [0.1875], "trace_flash.json": [0.125], "trace_efficient.json": [0.25]}
    for name, fractions in expected.items():
        events = json.loads((DATA / name).read_text())["traceEvents"]
        got = [
            theoretical_occupancy(
                "9.0", math.prod(k["args"]["block"]), k["args"]["registers per thread"], k["args"]["shared memory"]
            ).fraction
            for k in events
            if k.get("cat") == "kernel"
        ]
        assert got == fractions, name


def test_blocks_limit_small_blocks() -> None:
    # 32 threads, 16 registers, 0 shared: warps 64, registers 128 blocks' worth, shared 228; 32 blocks max
    # -> 32 warps / 64 = 0.5, limited by the block slots
    occ = theoretical_occupancy("9.0", 32, 16, 0)
    assert (occ.active_blocks_per_sm, occ.fraction, occ.limiter) == (32, 0.5, "blocks")


def test_other_architectures() -> None:
    # 7.5: 32 warps, 16 blocks, 64 KiB, 256 B units, nothing reserved. 256 threads -> 8 warps, 32 // 8 = 4;
    # 64 registers -> 2,048 per warp, 8 per sub-partition -> 32 warps -> 4 blocks;
    # shared 20,000 -> 20,224 (79·256) -> 65,536 // 20,224 = 3 blocks. 3·8 = 24 / 32 = 0.75
    occ = theoretical_occupancy("7.5", 256, 64, 20_000)
    assert (occ.active_blocks_per_sm, occ.fraction, occ.limiter) == (3, 0.75, "shared_mem")
    # 8.6: 48 warps. 1024 threads -> 32 warps, 48 // 32 = 1 block: 32 / 48
    occ = theoretical_occupancy("8.6", 1024, 32, 0)
    assert (occ.active_blocks_per_sm, occ.limiter) == (1, "warps")
    assert occ.fraction == pytest.approx(2 / 3)
    # 7.0 with no shared memory: nothing reserved, so shared memory sets no limit
    assert theoretical_occupancy("7.0", 128, 32, 0).shared_mem_limit is None
    assert theoretical_occupancy("sm_90", 384, 168, 232_448).fraction == 0.1875
    assert theoretical_occupancy("9.0", 128, 0, 0).registers_limit is None


def test_configurations_that_cannot_launch() -> None:
    # 1024 threads of 255 registers: 8,192 · 32 warps = 262,144 > 65,536 registers per block
    occ = theoretical_occupancy("9.0", 1024, 255, 0)
    assert (occ.fraction, occ.active_blocks_per_sm, occ.limiter) == (0.0, 0, "registers")
    # 232,449 + 1,024 rounds up to 233,600 > 227 KiB + 1 KiB
    occ = theoretical_occupancy("9.0", 128, 32, 232_449)
    assert (occ.fraction, occ.limiter) == (0.0, "shared_mem")


def test_unknown_cc_and_bad_inputs() -> None:
    with pytest.raises(ValueError, match=r"6\.1.*9\.0"):
        theoretical_occupancy("6.1", 128, 32, 0)
    with pytest.raises(ValueError):
        sm_limits("banana")
    with pytest.raises(ValueError):
        theoretical_occupancy("9.0", 0, 32, 0)
    with pytest.raises(ValueError):
        theoretical_occupancy("9.0", 2048, 32, 0)
    with pytest.raises(ValueError):
        theoretical_occupancy("9.0", 128, -1, 0)


def test_table_is_consistent() -> None:
    assert set(SM_LIMITS) == {"7.0", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "12.0"}
    assert SM_LIMITS["9.0"].shared_mem_per_sm_bytes == 233_472
    assert SM_LIMITS["9.0"].max_shared_mem_per_block_bytes == 232_448
    assert {
        cc: lim.max_threads_per_sm for cc, lim in SM_LIMITS.items() if cc in ("7.5", "8.0", "8.6", "8.9", "9.0", "12.0")
    } == {"7.5": 1024, "8.0": 2048, "8.6": 1536, "8.9": 1536, "9.0": 2048, "12.0": 1536}
    for lim in SM_LIMITS.values():
        assert lim.max_shared_mem_per_block_bytes <= lim.shared_mem_per_sm_bytes


def _launchable(cc: str, threads: int, regs: int, smem: int) -> bool:
    """The per-block checks, written out independently of the module."""
    lim = SM_LIMITS[cc]
    warps = -(-threads // 32)
    per_warp = -(-regs * 32 // 256) * 256
    smem_alloc = -(-(smem + lim.reserved_shared_mem_per_block_bytes) // lim.shared_mem_alloc_unit_bytes)
    return (
        per_warp * (-(-warps // 4) * 4) <= 65536
        and smem_alloc * lim.shared_mem_alloc_unit_bytes
        <= lim.max_shared_mem_per_block_bytes + lim.reserved_shared_mem_per_block_bytes
    )


configs = st.tuples(
    st.sampled_from(sorted(SM_LIMITS)),
    st.integers(1, 1024),
    st.integers(0, 255),
    st.integers(0, 232_448),
)


@settings(max_examples=150, deadline=None)
@given(configs)
def test_fraction_is_in_range_exactly_when_the_block_fits(config: tuple[str, int, int, int]) -> None:
    cc, threads, regs, smem = config
    occ = theoretical_occupancy(cc, threads, regs, smem)
    if _launchable(cc, threads, regs, smem):
        assert 0.0 < occ.fraction <= 1.0
        assert occ.active_warps_per_sm == occ.active_blocks_per_sm * -(-threads // 32)
    else:
        assert occ.fraction == 0.0


@settings(max_examples=150, deadline=None)
@given(configs, st.data())
def test_more_registers_or_shared_memory_never_raise_occupancy(
    config: tuple[str, int, int, int], data: st.DataObject
) -> None:
    cc, threads, regs, smem = config
    more_regs = data.draw(st.integers(regs, 255))
    more_smem = data.draw(st.integers(smem, 232_448))
    base = theoretical_occupancy(cc, threads, regs, smem).fraction
    assert theoretical_occupancy(cc, threads, more_regs, smem).fraction <= base
    assert theoretical_occupancy(cc, threads, regs, more_smem).fraction <= base
