"""From a trace to the document's kernels: attribution, work, rates, occupancy, bound.

Torch-free glue between the trace parser (``attribution``) and the models (``model``); it lives in
``measure`` because only the runner uses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from profiler_core.attribution import KernelSummary, aggregate, attribute, detect_backend, parse_trace
from profiler_core.documents import Achieved, DurationStats, Environment, Kernel, Work
from profiler_core.model import (
    AttentionShape,
    case_work,
    classify_bound,
    dtype_peak_key,
    kernel_work,
    rates,
    ridge_point,
    theoretical_occupancy,
    utilisations,
)
from profiler_core.model.work import Pass
from profiler_core.suite import CaseSpec


def _peak_tflops(environment: Environment, key: str) -> float | None:
    peak = environment.peaks.tflops.get(key)
    return peak.value if peak else None


def _work_per_iteration(
    s: KernelSummary, shape: AttentionShape | None, pass_: Pass
) -> tuple[float | None, float | None]:
    """FLOPs and bytes of all of a kernel's launches in one iteration (each launch has its own shapes)."""
    launches = s.launch_inputs or [(s.input_dims, s.input_types)]
    flops_total = bytes_total = 0.0
    flops_known = bytes_known = True
    for dims, types in launches:
        f, b = kernel_work(s.phase, s.op, dims, types, shape, pass_, kernel_name=s.name)
        flops_known &= f is not None
        bytes_known &= b is not None
        flops_total += f or 0.0
        bytes_total += b or 0.0
    scale = s.launches_per_iter / len(launches)
    return (flops_total * scale if flops_known else None, bytes_total * scale if bytes_known else None)


def kernel_records(trace: dict[str, Any], spec: CaseSpec, environment: Environment) -> tuple[list[Kernel], str | None]:
    """The case's kernels (per iteration, in launch order) and the backend that actually ran."""
    parsed = parse_trace(trace)
    attributed = attribute(parsed)
    summaries = aggregate(attributed, parsed.iterations)
    backend = detect_backend([k.name for k in parsed.kernels], [op.name for op in parsed.ops])
    shape = AttentionShape.from_params(spec.params) if spec.has_shape else None
    pass_: Pass = "fwd_bwd" if spec.pass_ == "fwd_bwd" else "fwd"
    cc = environment.device.compute_capability
    peak_gbps = environment.peaks.dram_gbps.value
    total_us = sum(s.duration_median_us for s in summaries) or 1.0
    kernels = []
    for s in summaries:
        flops, nbytes = _work_per_iteration(s, shape, pass_)
        median = s.duration_median_us
        tflops, gbps = rates(flops, nbytes, median)
        peak_key = dtype_peak_key(spec.dtype, s.name)
        peak_tflops = _peak_tflops(environment, peak_key)
        compute_util, bandwidth_util = utilisations(tflops, gbps, peak_tflops, peak_gbps)
        intensity = flops / nbytes if flops and nbytes else None
        ridge = ridge_point(peak_tflops, peak_gbps) if peak_tflops else None
        occupancy = None
        limiter = None
        if cc and s.block and s.registers_per_thread is not None and s.shared_mem_bytes is not None:
            threads = 1
            for d in s.block:
                threads *= d
            try:
                occ = theoretical_occupancy(cc, threads, s.registers_per_thread, s.shared_mem_bytes)
                occupancy, limiter = occ.fraction, occ.limiter
            except ValueError:
                pass  # an unknown compute capability leaves occupancy unknown, not the run failed
        kernels.append(
            Kernel(
                name=s.name,
                key=s.key,
                phase=s.phase,
                op=s.op,
                launches_per_iter=s.launches_per_iter,
                duration_us=DurationStats(median=median, p25=s.duration_p25_us, p75=s.duration_p75_us),
                share=min(1.0, median / total_us),
                grid=list(s.grid) if s.grid else None,
                block=list(s.block) if s.block else None,
                registers_per_thread=s.registers_per_thread,
                shared_mem_bytes=s.shared_mem_bytes,
                theoretical_occupancy=occupancy,
                occupancy_limiter=limiter,
                flops=flops,
                bytes=nbytes,
                tflops=tflops,
                gbps=gbps,
                compute_util=compute_util,
                bandwidth_util=bandwidth_util,
                arithmetic_intensity=intensity,
                bound=classify_bound(compute_util, bandwidth_util, intensity, ridge, duration_us=median),
            )
        )
    return kernels, backend


def dominant_bound(kernels: Sequence[Kernel]) -> str | None:
    """The bound class that holds the largest share of the case's kernel time."""
    weight: dict[str, float] = {}
    for k in kernels:
        if k.bound:
            weight[k.bound] = weight.get(k.bound, 0.0) + k.duration_us.median
    return max(weight, key=lambda b: weight[b]) if weight else None


def case_achieved(
    spec: CaseSpec, backend_used: str | None, median_us: float, kernels: Sequence[Kernel], environment: Environment
) -> tuple[Work | None, Achieved | None]:
    """Case-level work (attention formulas) and achieved rates over the measured median latency.

    The case's bound is the bound of the kernels that hold most of its time (time-weighted): the
    unfused path is bound by its fp32 GEMMs, not by the average of everything it launched.
    """
    backend = backend_used or spec.backend
    work = case_work(spec.target, backend, spec.params)
    if work is None:
        return None, None
    tflops, gbps = rates(work.flops, work.bytes_min, median_us)
    peak_tflops = _peak_tflops(environment, spec.dtype)
    peak_gbps = environment.peaks.dram_gbps.value
    compute_util, bandwidth_util = utilisations(tflops, gbps, peak_tflops, peak_gbps)
    intensity = work.flops / work.bytes_min if work.bytes_min else None
    bound = dominant_bound(kernels)
    if bound is None:
        ridge = ridge_point(peak_tflops, peak_gbps) if peak_tflops else None
        bound = classify_bound(compute_util, bandwidth_util, intensity, ridge, duration_us=median_us)
    return (
        Work(flops=work.flops, bytes_min=work.bytes_min, formula=work.formula),
        Achieved(
            tflops=tflops,
            gbps=gbps,
            compute_util=compute_util,
            bandwidth_util=bandwidth_util,
            arithmetic_intensity=intensity,
            bound=bound,
        ),
    )
