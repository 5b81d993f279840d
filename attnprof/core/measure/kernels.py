"""From a trace to the document's kernels: attribution, work, rates, occupancy, bound.

Torch-free glue between the trace parser (``attribution``) and the models (``model``); it lives in
``measure`` because only the runner uses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnprof.core.attribution import (
    DeclaredWork,
    KernelSummary,
    ParsedTrace,
    aggregate,
    attribute,
    detect_backend,
    factory_work_for,
    launch_metadata_work,
    parse_trace,
)
from attnprof.core.documents import Achieved, DurationStats, Environment, Kernel, Work
from attnprof.core.documents.result import WorkSource
from attnprof.core.model import (
    AttentionShape,
    case_work,
    classify_bound,
    dtype_peak_key,
    kernel_work,
    rates,
    theoretical_occupancy,
    utilisations,
)
from attnprof.core.model.work import CaseWork, Pass
from attnprof.core.suite import CaseSpec


def _peak_tflops(environment: Environment, key: str) -> float | None:
    peak = environment.peaks.tflops.get(key)
    return peak.value if peak else None


def kernel_rates(
    *,
    name: str,
    dtype: str,
    flops: float | None,
    nbytes: float | None,
    median_us: float,
    launches_per_iter: float,
    environment: Environment,
) -> dict[str, Any]:
    """A kernel's rates over its median time per iteration (``median_us``, microseconds): ``tflops``, ``gbps``,
    ``compute_util``, ``bandwidth_util`` (fractions of the peaks) and ``bound``, as the ``Kernel`` fields."""
    tflops, gbps = rates(flops, nbytes, median_us)
    peak_tflops = _peak_tflops(environment, dtype_peak_key(dtype, name))
    compute_util, bandwidth_util = utilisations(tflops, gbps, peak_tflops, environment.peaks.dram_gbps.value)
    return {
        "tflops": tflops,
        "gbps": gbps,
        "compute_util": compute_util,
        "bandwidth_util": bandwidth_util,
        "bound": classify_bound(compute_util, bandwidth_util, duration_us=median_us / max(launches_per_iter, 1.0)),
    }


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


# A custom case's kernel holding at least this share of the kernel time does the case's work.
CASE_WORK_SHARE = 0.9
# Kernels below this share of a case's kernel time get no share of a custom case's work.
MIN_SHARE = 0.05


def _declared(
    s: KernelSummary,
    metadata: dict[str, DeclaredWork],
    factory: dict[str, dict[str, float | None]] | None,
) -> tuple[float | None, float | None, WorkSource] | None:
    """What the kernel itself (launch_metadata) or its factory declared, per iteration, or None.

    A declaration of no work (nothing, or zero FLOPs and zero bytes) says nothing about the kernel: it is passed
    over, so that the model or the case's work can give the kernel its figures and its bound."""
    own = metadata.get(s.name)
    if own is not None and (own.flops_per_launch or own.bytes_per_launch):
        n = s.launches_per_iter
        flops = None if own.flops_per_launch is None else own.flops_per_launch * n
        nbytes = None if own.bytes_per_launch is None else own.bytes_per_launch * n
        return flops, nbytes, "launch_metadata"
    if factory:
        figures = factory_work_for(s.name, factory)
        if figures is not None and (figures[0] or figures[1]):
            return figures[0], figures[1], "factory"
    return None


def _share_case_work(
    summaries: Sequence[KernelSummary],
    figures: list[tuple[float | None, float | None, WorkSource | None]],
    case_share: CaseWork,
    total_us: float,
) -> list[tuple[float | None, float | None, WorkSource | None]]:
    """A custom case's kernels that declared nothing and have no model get the case's attention work.

    A kernel holding at least ``CASE_WORK_SHARE`` of the kernel time gets all of it; otherwise each such
    kernel with at least ``MIN_SHARE`` of the time gets the part of the case's work in proportion to its time
    among the kernels with at least ``MIN_SHARE`` that do the case's own work: those that declared nothing and
    those that declared their work (launch_metadata or the factory), which hold the rest of it. Kernels the op
    models cover (copies, elementwise passes) do other work and take no part. An estimate: it assumes the
    sharing kernels run at one rate; every kernel that matters has a bound, and no work is counted twice."""
    unknown = [i for i, f in enumerate(figures) if f[2] is None]
    dominant = [i for i in unknown if summaries[i].duration_median_us >= CASE_WORK_SHARE * total_us]
    if dominant:
        shares = {dominant[0]: 1.0}
    else:
        sizable = [
            i
            for i in range(len(summaries))
            if summaries[i].duration_median_us >= MIN_SHARE * total_us and figures[i][2] != "model"
        ]
        time_us = sum(summaries[i].duration_median_us for i in sizable)
        shares = (
            {i: summaries[i].duration_median_us / time_us for i in sizable if figures[i][2] is None}
            if time_us > 0
            else {}
        )
    out = list(figures)
    for i, part in shares.items():
        out[i] = (float(case_share.flops) * part, float(case_share.bytes_min) * part, "case")
    return out


def kernel_records(
    trace: dict[str, Any],
    spec: CaseSpec,
    environment: Environment,
    declared_work: dict[str, dict[str, float | None]] | None = None,
    parsed: ParsedTrace | None = None,
) -> tuple[list[Kernel], str | None]:
    """The case's kernels (per iteration, in launch order) and the backend that actually ran.

    Each kernel's FLOPs and bytes come, in this order, from what it declared through Triton's
    ``launch_metadata`` (recorded in the trace), from the factory's ``declared_work``, from the op and
    attention models, and, for the kernel of a custom case that holds at least ``CASE_WORK_SHARE`` of its
    kernel time, from the case's attention formula (see ``_share_case_work``); ``work_source`` says which.
    ``parsed`` is ``trace`` already parsed, where the caller has it.
    """
    parsed = parsed or parse_trace(trace)
    attributed = attribute(parsed)
    summaries = aggregate(attributed, parsed.iterations)
    backend = detect_backend([k.name for k in parsed.kernels], [op.name for op in parsed.ops])
    shape = AttentionShape.from_params(spec.params) if spec.has_shape else None
    pass_: Pass = "fwd_bwd" if spec.pass_ == "fwd_bwd" else "fwd"
    cc = environment.device.compute_capability
    total_us = sum(s.duration_median_us for s in summaries) or 1.0
    metadata = launch_metadata_work(trace)
    case_share = case_work(spec.target, spec.backend, spec.params) if spec.is_custom else None
    figures: list[tuple[float | None, float | None, WorkSource | None]] = []
    for s in summaries:
        declared = _declared(s, metadata, declared_work)
        if declared is not None:
            figures.append(declared)
        else:
            flops, nbytes = _work_per_iteration(s, shape, pass_)
            figures.append((flops, nbytes, "model" if flops is not None or nbytes is not None else None))
    if case_share is not None:
        figures = _share_case_work(summaries, figures, case_share, total_us)
    kernels = []
    for s, (flops, nbytes, source) in zip(summaries, figures, strict=True):
        median = s.duration_median_us
        phase = s.phase
        if case_share is not None and median >= CASE_WORK_SHARE * total_us and phase == "other":
            # The kernel doing (nearly) all of an attention-shaped custom case is its attention.
            phase = "fused_attention"
        rated = kernel_rates(
            name=s.name,
            dtype=spec.dtype,
            flops=flops,
            nbytes=nbytes,
            median_us=median,
            launches_per_iter=s.launches_per_iter,
            environment=environment,
        )
        intensity = flops / nbytes if flops and nbytes else None
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
                phase=phase,
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
                arithmetic_intensity=intensity,
                work_source=source,
                **rated,
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
        bound = classify_bound(compute_util, bandwidth_util, duration_us=median_us)
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
