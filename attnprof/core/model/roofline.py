"""Achieved rates, utilisations and the bound of a kernel or a case.

Two bounds are given, from different evidence, with one rule: NVIDIA's speed-of-light classification
(``sections/SOLBottleneck.py``): a kernel is ``latency``-bound when neither its compute nor its memory unit
is busy, otherwise it is bound by the busier of the two. ``balanced`` is not a class: where both units are
busy, the higher one names the bound, as NVIDIA's rule does.

``counter_bound`` applies it to ncu's percentages: compute = max(``sm__throughput``, tensor-pipe activity)
(``sm__throughput`` alone misses a kernel that keeps the tensor pipe busy: the causal cuDNN kernel on the
H200 has SM 47%, tensor 62%); busy means >= 60% of peak.

``classify_bound`` predicts that class without counters, from the achieved useful FLOP/s and minimum bytes/s
as fractions of the measured peaks (``compute_util``, ``bandwidth_util``):

1. ``duration_us`` < 5 µs: ``latency`` (launch and ramp-up dominate a kernel that short);
2. a unit is busy when its utilisation is >= ``BUSY`` = 0.55; neither busy: ``latency``;
3. else the unit with the higher utilisation.

Why 0.55 and not ncu's 0.60: these utilisations count useful work only (formula FLOPs, minimum bytes:
not the masked tiles, re-reads and spills that the counters see) against measured ceilings, so a busy
unit reads lower here. On the H200 the threshold was chosen on the example suite's kernels and checked on
the validation set (``bench/reports/h200-truth.md``): any value from 0.50 to 0.60 gave the same agreement
there. What this rule cannot see is a CUDA-core kernel whose issue slots, not its bytes, are busy (an
Inductor softmax at SM 84% moving 29% of DRAM peak): it reads as latency here and compute under ncu.

A missing utilisation (no FLOP or byte model) counts as idle; with neither known there is no bound.
"""

from __future__ import annotations

from attnprof.core.documents.result import Bound
from attnprof.core.model.ops import ELEMENTWISE_OPS

LATENCY_US = 5.0
BUSY = 0.55
COUNTER_BUSY_PCT = 60.0


def rates(flops: float | None, bytes_: float | None, duration_us: float | None) -> tuple[float | None, float | None]:
    """Achieved TFLOP/s (10^12 FLOP/s) and GB/s (10^9 bytes/s) of ``flops`` and ``bytes_`` over
    ``duration_us`` microseconds; each None where its input is None or the duration is not positive."""
    if duration_us is None or duration_us <= 0:
        return None, None
    tflops = None if flops is None else flops / duration_us / 1e6
    gbps = None if bytes_ is None else bytes_ / duration_us / 1e3
    return tflops, gbps


def _fraction(value: float | None, peak: float | None) -> float | None:
    if value is None or peak is None or peak <= 0:
        return None
    return min(max(value / peak, 0.0), 1.0)


def utilisations(
    tflops: float | None, gbps: float | None, peak_tflops: float | None, peak_gbps: float | None
) -> tuple[float | None, float | None]:
    """Compute and bandwidth utilisation: achieved TFLOP/s and GB/s as fractions of the peaks.

    Clamped to [0, 1]: a measured peak is a copy or a matmul that the hardware can beat a little (a
    kernel whose input is partly in L2 outruns the DRAM copy; the H200's ``isneginf`` pass moves 4.4
    TB/s against a measured 4.27), and a fraction above 1 only says the peak was under-measured. The
    unclamped rates stay in ``tflops`` and ``gbps``. None where a rate or peak is missing.
    """
    return _fraction(tflops, peak_tflops), _fraction(gbps, peak_gbps)


def arithmetic_intensity(flops: float | None, bytes_: float | None) -> float | None:
    """FLOP per byte, or None when either is unknown or no bytes move."""
    if flops is None or bytes_ is None or bytes_ <= 0:
        return None
    return flops / bytes_


def ridge_point(peak_tflops: float, peak_gbps: float) -> float:
    """Arithmetic intensity (FLOP/byte) where the compute and memory roofs meet: peak FLOP/s / peak B/s."""
    if peak_gbps <= 0:
        raise ValueError("peak_gbps must be positive")
    return peak_tflops * 1e12 / (peak_gbps * 1e9)


def _higher(compute: float, memory: float) -> Bound:
    return "compute" if compute >= memory else "memory"


def classify_bound(
    compute_util: float | None,
    bandwidth_util: float | None,
    *,
    duration_us: float | None = None,
) -> Bound | None:
    """The bound of a kernel or case without counters (rule in the module docstring), or None if unknown.

    Utilisations are fractions of the peaks that apply (the fp32 peak for a kernel on the fp32 FMA
    pipe, see ``dtype_peak_key``); ``duration_us`` in µs (per launch).
    """
    if duration_us is not None and duration_us < LATENCY_US:
        return "latency"
    if compute_util is None and bandwidth_util is None:
        return None
    compute, memory = compute_util or 0.0, bandwidth_util or 0.0
    if compute < BUSY and memory < BUSY:
        return "latency"
    return _higher(compute, memory)


def counter_bound(sm_pct: float, memory_pct: float, tensor_pct: float | None = None) -> Bound:
    """NVIDIA's SOLBottleneck rule on ncu percentages (0..100), the tensor pipe counted as compute.

    ``sm_pct`` is ``sm__throughput``, ``memory_pct`` the memory SOL
    (``gpu__compute_memory_throughput``), ``tensor_pct`` ``sm__pipe_tensor_cycles_active``, all as % of
    peak sustained. Both under 60%: latency; else the higher. On the H200's causal cuDNN kernel (SM 47%,
    tensor 62%, memory 31%) this gives ``compute`` where ``sm__throughput`` alone would say latency.
    """
    compute = max(sm_pct, tensor_pct or 0.0)
    if compute < COUNTER_BUSY_PCT and memory_pct < COUNTER_BUSY_PCT:
        return "latency"
    return _higher(compute, memory_pct)


# Kernel-name fragments of GEMMs on the fp32 FMA pipe (no tensor cores).
_FP32_PIPE = ("f32f32", "ffma", "sgemm", "fp32_gemm")
# Kernel-name fragments of kernels that never use tensor cores: their arithmetic runs on the CUDA cores.
# Inductor names its pointwise and reduction kernels triton_poi_/triton_red_/triton_per_.
_CUDA_CORE = (
    "elementwise",
    "softmax",
    "reduce",
    "copy",
    "fill",
    "where",
    "isneginf",
    "triu",
    "tril",
    "mask",
    "cast",
    "convert",
    "dot_do_o",
    "triton_poi_",
    "triton_red_",
    "triton_per_",
)


def dtype_peak_key(dtype: str | None, op_or_kernel_name: str | None) -> str:
    """Which ``Peaks.tflops`` entry (``fp32``, ``fp16``, ``bf16``) a kernel's FLOP/s is measured against.

    fp32 for GEMMs on the FMA pipe (names with ``f32f32``, ``ffma``, ``sgemm``: the math backend's
    upcast matmuls), for elementwise, softmax, reduction and cast kernels (CUDA cores) and for fp32
    cases; otherwise the case dtype, or the dtype the name shows (``bf16``/``bfloat16``,
    ``f16``/``fp16``/``half``), for tensor-core GEMMs and fused attention kernels.
    """
    if op_or_kernel_name in ELEMENTWISE_OPS:
        return "fp32"
    name = (op_or_kernel_name or "").lower()
    if any(m in name for m in _FP32_PIPE) or any(m in name for m in _CUDA_CORE):
        return "fp32"
    if dtype in ("fp32", "fp16", "bf16"):
        return dtype
    if "bf16" in name or "bfloat16" in name:
        return "bf16"
    if "f16" in name or "fp16" in name or "half" in name:
        return "fp16"
    return "fp32"
