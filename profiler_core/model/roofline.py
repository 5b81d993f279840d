"""Achieved rates, utilisations and the bound of a kernel or a case.

Two bounds are given, from different evidence:

``classify_bound`` reads the roofline: achieved FLOP/s and bytes/s (useful FLOPs and minimum bytes over
the measured duration) as fractions of the peaks, and the arithmetic intensity against the ridge point.
Its thresholds follow Nsight Compute's SOLBottleneck rule (80% of peak: bound by that unit; 60-80%:
the busier unit, or balanced within 10 points) but its floor is lower: these utilisations count useful
work only (minimum bytes, formula FLOPs, not the diagonal tiles or the re-reads that the counters see),
so they understate how busy a unit is. The causal cuDNN kernel on the H200 reaches 51% of the measured
bf16 peak while its tensor pipe is 62% busy. So:

1. ``duration_us`` < 5 µs: ``latency`` (launch and ramp-up dominate a kernel that short);
2. the higher utilisation >= 0.8: the unit with the higher utilisation (``compute`` or ``memory``);
3. the higher >= 0.6: ``balanced`` when the two are within 0.1 of each other, else the higher unit;
4. the higher >= 0.3: the roofline side, ``compute`` when the arithmetic intensity is at or above the
   ridge point, ``memory`` below it (the higher unit when either is unknown);
5. else ``latency``: neither unit is busy, the kernel waits.

A missing utilisation (no FLOP or byte model) decides only when the other one is >= 0.6.

``counter_bound`` is NVIDIA's SOLBottleneck rule on the ncu percentages, with the tensor pipe's activity
counted as compute (``sm__throughput`` alone misses a kernel that keeps the tensor pipe busy):
compute = max(SM %, tensor %); either >= 80: the higher; both < 60: latency; else the higher unless the
two are within 10 points: balanced.
"""

from __future__ import annotations

from profiler_core.documents.result import Bound
from profiler_core.model.ops import ELEMENTWISE_OPS

LATENCY_US = 5.0
BOUND_HIGH = 0.8
BOUND_BUSY = 0.6
BOUND_FLOOR = 0.3
BALANCE = 0.1


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
    arithmetic_intensity: float | None = None,
    ridge_point: float | None = None,
    *,
    duration_us: float | None = None,
) -> Bound | None:
    """The roofline bound of a kernel or case (rule in the module docstring), or None if undecided.

    Utilisations are fractions of the peaks that apply (the fp32 peak for a kernel on the fp32 FMA
    pipe, see ``dtype_peak_key``); intensity and ridge point in FLOP/byte; ``duration_us`` in µs.
    """
    if duration_us is not None and duration_us < LATENCY_US:
        return "latency"
    if compute_util is None or bandwidth_util is None:
        known = compute_util if bandwidth_util is None else bandwidth_util
        if known is None or known < BOUND_BUSY:
            return None
        return "compute" if bandwidth_util is None else "memory"
    high = max(compute_util, bandwidth_util)
    if high >= BOUND_HIGH:
        return _higher(compute_util, bandwidth_util)
    if high >= BOUND_BUSY:
        if abs(compute_util - bandwidth_util) < BALANCE:
            return "balanced"
        return _higher(compute_util, bandwidth_util)
    if high >= BOUND_FLOOR:
        if arithmetic_intensity is not None and ridge_point is not None:
            return "compute" if arithmetic_intensity >= ridge_point else "memory"
        return _higher(compute_util, bandwidth_util)
    return "latency"


def counter_bound(sm_pct: float, memory_pct: float, tensor_pct: float | None = None) -> Bound:
    """NVIDIA's SOLBottleneck rule on ncu percentages (0..100), the tensor pipe counted as compute.

    ``sm_pct`` is ``sm__throughput``, ``memory_pct`` the memory SOL
    (``gpu__compute_memory_throughput``), ``tensor_pct`` ``sm__pipe_tensor_cycles_active``, all as % of
    peak sustained. On the H200's causal cuDNN kernel (SM 47%, tensor 62%, memory 31%) this gives
    ``compute`` where ``sm__throughput`` alone would say latency.
    """
    compute = max(sm_pct, tensor_pct or 0.0)
    if compute >= 80 or memory_pct >= 80:
        return _higher(compute, memory_pct)
    if compute < 60 and memory_pct < 60:
        return "latency"
    if abs(compute - memory_pct) >= 10:
        return _higher(compute, memory_pct)
    return "balanced"


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
