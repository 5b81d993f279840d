"""Datasheet peaks, rates, utilisations and the two bound rules on the H200 kernels of the facts file.

Work of the math-path kernels (LLaMA-7B layer, B=1, 32 heads, S=2048, D=128): QKᵀ and PV fp32 GEMMs
2·32·2048·2048·128 = 34,359,738,368 FLOPs over 603,979,776 bytes; softmax 1,073,741,824 bytes and
671,088,640 FLOPs; isneginf 671,088,640 bytes. Fused forward: 68,719,476,736 FLOPs non-causal, half
causal, over 67,371,008 bytes. Measured H200 peaks: copy 4,270 GB/s, bf16 matmul 790 TFLOP/s.
"""

from __future__ import annotations

import pytest

from attnprof.core.model import (
    DATASHEET,
    arithmetic_intensity,
    classify_bound,
    counter_bound,
    datasheet_peaks,
    dtype_peak_key,
    rates,
    ridge_point,
    utilisations,
)

H200_GBPS, H200_BF16, FP32_DATASHEET, DATASHEET_GBPS = 4270.0, 790.0, 67.0, 4800.0


@pytest.mark.parametrize(
    ("device", "entry"),
    [
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("AMD Instinct MI300X", "MI300X"),
        ("nvidia h200", "H200 SXM"),
    ],
)
def test_datasheet_names_match_the_most_specific_entry(device: str, entry: str) -> None:
    peaks = datasheet_peaks(device)
    assert peaks is not None
    assert peaks.dram_gbps.value == DATASHEET[entry].dram_gbps
    assert peaks.dram_gbps.detail is not None and DATASHEET[entry].name in peaks.dram_gbps.detail


def test_unknown_devices_have_no_datasheet() -> None:
    for device in ("Tesla T4", "NVIDIA GH200 480GB", "NVIDIA L40", "cpu", ""):
        assert datasheet_peaks(device) is None, device


def test_datasheet_values_are_marked_and_sourced() -> None:
    peaks = datasheet_peaks("NVIDIA H200")
    assert peaks is not None
    assert (peaks.dram_gbps.value, peaks.tflops["fp32"].value, peaks.tflops["bf16"].value) == (4800, 67, 989.5)
    assert {v.source for v in [peaks.dram_gbps, *peaks.tflops.values()]} == {"datasheet"}
    for entry in DATASHEET.values():
        assert entry.source.startswith("https://")
        assert set(entry.tflops) == {"fp32", "fp16", "bf16"}
        assert entry.dram_gbps > 0 and all(v > 0 for v in entry.tflops.values())


def test_rates_units_and_none_safety() -> None:
    # 10^12 FLOPs and 10^9 bytes in 10^6 µs (1 s): 1 TFLOP/s and 1 GB/s
    assert rates(1e12, 1e9, 1e6) == (1.0, 1.0)
    assert rates(None, 1e9, 1e6) == (None, 1.0)
    assert rates(1e12, 1e9, 0) == (None, None)
    assert rates(1e12, 1e9, None) == (None, None)
    # softmax of the math path: 1.07 GB in 280 µs is the facts' ~3.8 TB/s
    _, gbps = rates(None, 1_073_741_824, 280.254)
    assert gbps == pytest.approx(3831, abs=1)


def test_utilisations_are_clamped_fractions() -> None:
    # isneginf: 671,088,640 B in 151 µs = 4,444 GB/s, above the measured copy peak
    _, gbps = rates(None, 671_088_640, 151)
    assert utilisations(None, gbps, None, H200_GBPS) == (None, 1.0)
    assert utilisations(395.0, 427.0, 790.0, 4270.0) == (0.5, 0.1)
    assert utilisations(1.0, 1.0, 0.0, None) == (None, None)


def test_ridge_point_and_intensity() -> None:
    # facts: ≈ 183–206 FLOP/byte in bf16 on the H200
    assert ridge_point(790, 4270) == pytest.approx(185.0, abs=0.1)
    assert ridge_point(989.5, 4800) == pytest.approx(206.1, abs=0.1)
    assert arithmetic_intensity(34_359_738_368, 603_979_776) == pytest.approx(56.9, abs=0.1)
    assert arithmetic_intensity(1, 0) is None and arithmetic_intensity(None, 1) is None
    with pytest.raises(ValueError):
        ridge_point(1, 0)


def _bound(flops: float | None, nbytes: float, us: float, peak_tflops: float, peak_gbps: float) -> str | None:
    tflops, gbps = rates(flops, nbytes, us)
    c, m = utilisations(tflops, gbps, peak_tflops, peak_gbps)
    return classify_bound(c, m, duration_us=us)


def test_math_path_fp32_gemms_are_compute_bound_against_the_fp32_peak() -> None:
    # QKᵀ, 855 µs: 40.2 TFLOP/s = 0.60 of 67 (ncu: SM 77%, compute); 706 GB/s = 0.15 of 4,800
    assert _bound(34_359_738_368, 603_979_776, 855, FP32_DATASHEET, DATASHEET_GBPS) == "compute"
    # PV, 824 µs: 41.7 TFLOP/s = 0.62 of 67
    assert _bound(34_359_738_368, 603_979_776, 824, FP32_DATASHEET, DATASHEET_GBPS) == "compute"


def test_softmax_and_safe_softmax_are_memory_bound() -> None:
    # softmax 341 µs (ncu): 3,149 GB/s = 0.66 of 4,800 (ncu: 64% DRAM); 1.97 TFLOP/s = 0.03 of fp32
    assert _bound(671_088_640, 1_073_741_824, 341, FP32_DATASHEET, DATASHEET_GBPS) == "memory"
    # the trace's 280 µs: 0.90 of the measured copy
    assert _bound(671_088_640, 1_073_741_824, 280.254, FP32_DATASHEET, H200_GBPS) == "memory"
    # isneginf 151 µs: 4,444 GB/s = 0.93 of 4,800 (ncu: 91% DRAM)
    assert _bound(134_217_728, 671_088_640, 151, FP32_DATASHEET, DATASHEET_GBPS) == "memory"


def test_fused_cudnn_kernels_compute_bound_when_busy_else_latency() -> None:
    # non-causal, 113.2 µs: 607 TFLOP/s = 0.77 of the measured 790; 595 GB/s = 0.14 of 4,270
    assert _bound(68_719_476_736, 67_371_008, 113.216, H200_BF16, H200_GBPS) == "compute"
    # causal, 78 µs: 440 TFLOP/s = 0.56 of 790 (ncu: tensor pipe 62%, compute)
    assert _bound(34_359_738_368, 67_371_008, 78.0, H200_BF16, H200_GBPS) == "compute"
    # FlashAttention-2 on Hopper, 160 µs: 215 TFLOP/s = 0.27 (ncu: SM 37%, tensor 50%, memory 37%: latency)
    assert _bound(34_359_738_368, 67_371_008, 160.0, H200_BF16, H200_GBPS) == "latency"


def test_tiny_and_idle_kernels_are_latency_bound() -> None:
    # the 0.928 µs fill of a 0-d tensor
    assert classify_bound(0.0, 0.0, duration_us=0.928) == "latency"
    assert classify_bound(0.9, 0.0, duration_us=4.9) == "latency"
    assert classify_bound(0.1, 0.2, duration_us=100) == "latency"


@pytest.mark.parametrize(
    ("c", "m", "expected"),
    [
        (0.85, 0.82, "compute"),  # both busy: the higher unit, however close (no "balanced")
        (0.70, 0.72, "memory"),
        (0.55, 0.10, "compute"),  # busy from 0.55 of the measured peak
        (0.54, 0.54, "latency"),  # neither busy
        (0.10, 0.60, "memory"),
        (None, 0.90, "memory"),  # a missing utilisation counts as idle
        (0.90, None, "compute"),
        (None, 0.40, "latency"),
        (None, None, None),  # nothing known: no bound
    ],
)
def test_classify_bound_rule(c: float | None, m: float | None, expected: str | None) -> None:
    assert classify_bound(c, m, duration_us=100) == expected


def test_counter_bound_on_the_facts_table() -> None:
    # cuDNN causal kernel: SM 47%, tensor 62%, memory 31%: compute 62 is 31 points above memory
    assert counter_bound(47, 31, 62) == "compute"
    # on sm__throughput alone NVIDIA's rule calls it latency-bound, which the facts reject
    assert counter_bound(47, 31) == "latency"
    # QKᵀ fp32 GEMM: SM 77%, memory SOL 65%: 12 points apart
    assert counter_bound(77, 65, 0) == "compute"
    # PV fp32 GEMM: SM 87% >= 80
    assert counter_bound(87, 85, 0) == "compute"
    # output projection: tensor 94%
    assert counter_bound(88, 68, 94) == "compute"
    # isneginf 91% memory; fp32->bf16 copy of the probabilities 90%
    assert counter_bound(17, 91, 0) == "memory"
    assert counter_bound(9, 90, 0) == "memory"
    # softmax: memory 64%, SM 66%: both busy, the higher one (SM) names it; balanced is no class
    assert counter_bound(66, 64, 1) == "compute"
    assert counter_bound(61, 64, 1) == "memory"
    # bf16->fp32 copies: memory 33%, SM 54%: both under 60
    assert counter_bound(54, 33, 0) == "latency"


@pytest.mark.parametrize(
    ("dtype", "name", "key"),
    [
        ("bf16", "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1_ffma_aligna4", "fp32"),
        ("bf16", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128", "bf16"),
        ("fp16", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT", "fp16"),
        ("bf16", "void (anonymous namespace)::softmax_warp_forward<float, float, float, 11>", "fp32"),
        ("bf16", "aten::_softmax", "fp32"),
        ("bf16", "aten::addmm", "bf16"),
        ("bf16", "triton_red_fused__softmax_0", "fp32"),
        ("bf16", "triton_tem_fused_flex_attention_0", "bf16"),
        (None, "fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "bf16"),
        (None, "ampere_fp16_s16816gemm_fp16_128x128", "fp16"),
        ("fp32", "fmha_cutlassF_f32_aligned_64x64_rf_sm80", "fp32"),
        (None, None, "fp32"),
    ],
)
def test_dtype_peak_key(dtype: str | None, name: str | None, key: str) -> None:
    assert dtype_peak_key(dtype, name) == key
