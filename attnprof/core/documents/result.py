"""The result document, ``attnprof.result/v1``: one per profiling run (docs/architecture.md, "Documents").

Units live in field names: ``_us`` microseconds, ``_bytes`` bytes, ``_gbps`` 10^9 bytes per second,
``_tflops`` 10^12 floating-point operations per second, ``_mhz``, ``_w``, ``_c``. Utilisations are
fractions in [0, 1] of the peaks recorded in ``environment.peaks``.

Every number is finite: ``NaN`` and the infinities are not JSON (Python's ``json`` reads them, and reads
``1e309`` as infinity), and a database's JSON type refuses them, so validation refuses them first and names
the field. The free-form ``params`` of a case hold plain JSON, at most :data:`MAX_PARAMS_DEPTH` levels deep.
"""

from __future__ import annotations

import math
import sys
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

RESULT_SCHEMA: Final = "attnprof.result/v1"
MAX_PARAMS_DEPTH: Final = 32

Mode = Literal["cuda", "cpu"]
CountersMode = Literal["none", "ncu", "cached"]
CaseStatus = Literal["ok", "failed", "skipped"]
# ``balanced`` is written by no current rule (the busier unit names the bound); older documents hold it.
Bound = Literal["compute", "memory", "latency", "balanced"]
Phase = Literal[
    "qkv_proj",
    "qk_matmul",
    "softmax",
    "mask",
    "av_matmul",
    "fused_attention",
    "cast",
    "out_proj",
    "ffn",
    "backward",
    "other",
]
PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]
PeakSource = Literal["measured", "datasheet"]
PeakOrigin = Literal["cached", "measured now", "datasheet"]
PeakStatus = Literal["stable", "unstable", "under load"]
WorkSource = Literal["launch_metadata", "factory", "model", "case"]

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
NonNegative = Annotated[float, Field(ge=0.0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


def _plain_json(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` if every number in it is finite and nothing lies deeper than ``MAX_PARAMS_DEPTH`` levels."""
    todo: list[tuple[Any, str, int]] = [(value, "", 0)]
    while todo:
        node, where, depth = todo.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise PydanticCustomError(
                "finite_number", "Input should be a finite number at {where}, got {got}", {"where": where, "got": node}
            )
        if isinstance(node, dict | list) and node:
            if depth >= MAX_PARAMS_DEPTH:
                raise PydanticCustomError(
                    "too_deep",
                    "Input should nest at most {limit} levels deep; {where} holds more",
                    {"where": where, "limit": MAX_PARAMS_DEPTH},
                )
            items = node.items() if isinstance(node, dict) else enumerate(node)
            todo.extend((v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in items)
    return value


# Case parameters as they were expanded from the suite (and a custom target's ``args``): any JSON, within bounds.
Params = Annotated[dict[str, Any], AfterValidator(_plain_json)]


class Thresholds(_Model):
    """Minimum effects (relative changes, e.g. 0.02 = 2%) and the false-discovery level.

    Every field is optional: an absent one falls back to the suite's, then to the analysis defaults.
    """

    latency: NonNegative | None = Field(None, description="minimum relative change of latency")
    bandwidth: NonNegative | None = Field(None, description="minimum relative change of achieved GB/s")
    throughput: NonNegative | None = Field(None, description="minimum relative change of achieved TFLOP/s")
    variance: NonNegative | None = Field(None, description="minimum relative change of the spread")
    dram_bytes: NonNegative | None = Field(None, description="minimum relative change of DRAM bytes")
    paired: NonNegative | None = Field(
        None, description="minimum relative change of latency in a paired comparison (base and head interleaved)"
    )
    accuracy: NonNegative | None = Field(None, description="tolerance override on the relative L2 error")
    fdr: Annotated[float, Field(gt=0.0, lt=1.0)] | None = Field(None, description="false-discovery level")


# How a suspect mark for a clock that fell while timing begins (``measure.environment.mark_clock_drops`` writes it).
# A paired comparison reads it: both sides were timed interleaved under the same clock, so it does not excuse them.
CLOCK_DROP_MARK = "SM clock fell"


class RunInfo(_Model):
    id: str
    created_at: datetime
    tool_version: str
    mode: Mode
    counters: CountersMode = "none"
    counters_note: str | None = Field(
        None, max_length=1000, description="why some kernels kept the model's class in a cached-counters run"
    )
    suspect: list[str] | None = Field(None, description="null, or the reasons this run's numbers are doubtful")
    command: str | None = Field(None, description="the command line that produced the run")
    wall_s: NonNegative | None = Field(None, description="wall time of the whole run, seconds")


class SuiteInfo(_Model):
    name: str
    thresholds: Thresholds = Field(default_factory=Thresholds)
    source_sha256: str | None = Field(None, description="hash of the suite file as read")


class Device(_Model):
    name: str
    kind: Literal["cuda", "cpu"]
    compute_capability: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    l2_bytes: int | None = None
    max_threads_per_sm: int | None = None
    registers_per_sm: int | None = None
    shared_mem_per_sm_bytes: int | None = None
    cpu_threads: int | None = None
    uuid: str | None = None


class GpuHealth(_Model):
    """NVML readings at one moment. Null fields where NVML could not say."""

    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    utilization_pct: float | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    other_processes: int | None = None
    gpu_pids: list[int] | None = Field(
        None, description="host PIDs of the processes NVML saw on the GPU (the profiler's own among them)"
    )


class PeakValue(_Model):
    value: NonNegative
    source: PeakSource
    detail: str | None = Field(None, description="how it was obtained (size, method)")


def _as_utc(at: datetime | None) -> datetime | None:
    """A time without a zone is the profiler's UTC (a hand-written or older file's); one with a zone stays."""
    return at.replace(tzinfo=UTC) if at is not None and at.tzinfo is None else at


class Peaks(_Model):
    """The device's ceilings: copy bandwidth (GB/s) and matmul rate per dtype (TFLOP/s), and where they came from.

    The fields after ``tflops`` were added later: null in older documents."""

    dram_gbps: PeakValue
    tflops: dict[str, PeakValue] = Field(description="per dtype: fp32, fp16, bf16")
    origin: PeakOrigin | None = Field(
        None, description="where this run took them: the peaks cache, a calibration at its start, or the datasheet"
    )
    measured_at: Annotated[datetime | None, AfterValidator(_as_utc)] = Field(
        None, description="when the calibration ran (UTC; a time written without a zone is read as UTC)"
    )
    measured_with: dict[str, str | None] | None = Field(
        None, description="what the calibration ran on: torch and CUDA versions, the device's name"
    )
    status: PeakStatus | None = Field(
        None,
        description="whether the calibration was confirmed: another quiet round came within 15% of every best reading",
    )
    note: str | None = Field(None, description="why a calibration was not cached (unstable, under load), in words")


class Environment(_Model):
    device: Device
    driver: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str
    host: str
    os: str | None = None
    health_start: GpuHealth | None = None
    health_end: GpuHealth | None = None
    peaks: Peaks
    testbed_key: str = Field(description="hash of device model, driver and mode: what must match to compare")
    testbed: dict[str, str] = Field(description="what the testbed key hashes, in words")
    software: dict[str, str | None] = Field(
        default_factory=dict, description="versions recorded beside the key (torch, cuDNN, Triton, ...)"
    )


class CaseError(_Model):
    type: str
    message: str


class LatencyStats(_Model):
    """Per-iteration latency of the whole case, microseconds."""

    samples: list[NonNegative]
    median: NonNegative
    p25: NonNegative
    p75: NonNegative
    min: NonNegative
    max: NonNegative
    cv: NonNegative = Field(description="coefficient of variation: stdev / mean")
    warmup: int = Field(0, ge=0, description="untimed iterations before the samples")
    stopped_by: Literal["precision", "budget", "max_samples"] | None = Field(
        None, description="what ended the adaptive sampling (of the round that ended it, when there were several)"
    )
    rounds: int | None = Field(
        None,
        ge=1,
        description="passes over the suite the samples were taken in, the case built again in each: a device's speed "
        "drifts over seconds, so samples spread over the run's length do not inherit one stretch's level",
    )
    round_samples: list[Annotated[int, Field(ge=1)]] | None = Field(
        None,
        description="how many of `samples` each round took, in time order (their sum is the number of samples): "
        "the rounds' own medians show whether a case lands on two levels from one build to the next",
    )
    host_us: NonNegative | None = Field(None, description="host time to queue one iteration (CUDA)")
    sm_clock_mhz_min: NonNegative | None = Field(None, description="lowest SM clock read while timing")
    sm_clock_mhz_max: NonNegative | None = Field(None, description="highest SM clock read while timing")

    @model_validator(mode="after")
    def _rounds_cover_samples(self) -> LatencyStats:
        if self.round_samples is not None:
            if sum(self.round_samples) != len(self.samples):
                raise ValueError(
                    f"round_samples sums to {sum(self.round_samples)} but there are {len(self.samples)} samples: "
                    "each sample belongs to exactly one round"
                )
            if self.rounds is not None and len(self.round_samples) != self.rounds:
                raise ValueError(
                    f"round_samples has {len(self.round_samples)} rounds but rounds is {self.rounds}: one count a round"
                )
        return self


class DurationStats(_Model):
    """A kernel's time per iteration (all its launches in one iteration), microseconds.

    Every round of a profile traces its own iterations, so the statistics pool every round's: one traced round can
    fall in a disturbed stretch (a clock step, the case before it still heating the GPU), and a kernel's change is
    only named where the rounds agree on it (``analysis.kernel_samples``). Documents written before that hold the
    statistics of the first round's traced iterations and no ``samples``."""

    median: NonNegative
    p25: NonNegative
    p75: NonNegative
    samples: list[NonNegative] | None = Field(
        None,
        description="per-iteration durations of every traced iteration of every round, in time order (0 where the "
        "kernel did not launch in an iteration); null in older documents, which traced the first round only",
    )
    round_samples: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="how many of `samples` each round traced, in time order (their sum is the number of samples)"
    )
    ci_low: NonNegative | None = Field(
        None,
        description="95% interval of the median, low end: the rounds resampled, and the iterations within each, so "
        "that a round that fell in a disturbed stretch widens it; null without samples from two rounds or more",
    )
    ci_high: NonNegative | None = Field(None, description="95% interval of the median, high end")

    @model_validator(mode="after")
    def _rounds_cover_samples(self) -> DurationStats:
        if self.round_samples is not None and (self.samples is None or sum(self.round_samples) != len(self.samples)):
            raise ValueError(
                f"round_samples sums to {sum(self.round_samples)} but there are "
                f"{len(self.samples or [])} samples: each sample belongs to exactly one round"
            )
        if (self.ci_low is None) != (self.ci_high is None) or (
            self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high
        ):
            raise ValueError("ci_low and ci_high come together, low first")
        return self


class Work(_Model):
    flops: NonNegative = Field(description="useful floating-point operations per iteration")
    bytes_min: NonNegative = Field(description="minimum DRAM bytes per iteration")
    formula: str | None = None


class Achieved(_Model):
    tflops: NonNegative | None = None
    gbps: NonNegative | None = None
    compute_util: NonNegative | None = None
    bandwidth_util: NonNegative | None = None
    arithmetic_intensity: NonNegative | None = Field(None, description="FLOP per byte")
    bound: Bound | None = None


class TensorAccuracy(_Model):
    tensor: str
    max_abs_err: NonNegative
    rel_l2_err: NonNegative
    tolerance: NonNegative
    ok: bool


class Accuracy(_Model):
    reference: str = Field(description="how the reference was computed")
    max_abs_err: NonNegative
    rel_l2_err: NonNegative
    tolerance: NonNegative
    ok: bool
    grads: list[TensorAccuracy] | None = None


class Kernel(_Model):
    name: str = Field(description="as launched")
    key: str = Field(description="stable short name: template arguments and knob ids stripped")
    phase: Phase
    op: str | None = Field(None, description="the innermost aten op (or Triton kernel) that launched it")
    launches_per_iter: NonNegative
    duration_us: DurationStats = Field(description="per iteration (all its launches in one iteration)")
    share: Fraction | None = Field(None, description="fraction of the case's kernel time")
    grid: list[int] | None = None
    block: list[int] | None = None
    registers_per_thread: int | None = None
    shared_mem_bytes: int | None = None
    theoretical_occupancy: Fraction | None = None
    occupancy_limiter: str | None = None
    flops: NonNegative | None = None
    bytes: NonNegative | None = None
    tflops: NonNegative | None = None
    gbps: NonNegative | None = None
    compute_util: NonNegative | None = None
    bandwidth_util: NonNegative | None = None
    arithmetic_intensity: NonNegative | None = None
    bound: Bound | None = None
    work_source: WorkSource | None = Field(
        None,
        description="where flops and bytes came from: launch_metadata (what the Triton kernel declared), "
        "factory (what the custom factory declared), model (the op or attention formulas), case (a custom "
        "case's attention formula: all of it for a kernel holding >= 90% of the case's time, else a part by "
        "time among its kernels >= 5% that declared their work or nothing; modelled kernels take no part)",
    )
    counters: dict[str, float] | None = None
    counter_bound: Bound | None = Field(None, description="bound by NVIDIA's speed-of-light rule")
    counters_from: Literal["ncu", "cache"] | None = Field(
        None,
        description="where counters came from: ncu (replayed in this run) or cache (replayed in an earlier run of "
        "the same kernel on this testbed and software); null where there are none or the document is older",
    )
    counters_measured_at: datetime | None = Field(None, description="when ncu read the counters")
    sm_clock_mhz: NonNegative | None = Field(
        None,
        description="mean SM clock over the kernel's launches (weighted by time), read by a probe beside the step in "
        "iterations of its own (CUDA with Triton): the clock under the kernel, which latency_us.sm_clock_mhz_min/max "
        "(NVML, read between timing batches) does not see",
    )


GapCause = Literal["none", "launch_gaps", "host_time", "trace_overhead", "overlap"]


class KernelReconciliation(_Model):
    """The kernel table's sum beside the case latency, and the gap between them named (docs/architecture.md, "How
    the profiler measures").

    Microseconds per iteration. The latency is the timing pass's median; the kernels come from the trace pass.
    On a GPU the kernels normally sum to less (launch gaps, host time between kernels); on CPU, where profiled
    ops play the kernels, the profiler's own overhead can make them sum to more.
    """

    kernel_sum_us: NonNegative = Field(description="the kernel table's median durations summed")
    latency_us: NonNegative = Field(description="the case's median latency (timing pass)")
    gap_us: float = Field(description="latency minus kernel sum: negative when the kernels sum to more")
    gap_fraction: float = Field(description="gap_us over latency_us")
    trace_span_us: NonNegative | None = Field(
        None,
        description="median traced iteration's span: on a GPU first kernel start to last kernel end, on CPU "
        "the iteration's host range",
    )
    trace_busy_us: NonNegative | None = Field(
        None, description="median time per traced iteration when at least one kernel ran"
    )
    trace_kernel_sum_us: NonNegative | None = Field(
        None, description="median kernel durations summed per traced iteration (above busy when kernels overlap)"
    )
    cause: GapCause = Field(
        description="none (within 2%), launch_gaps (GPU idle between kernels), host_time (CPU time outside the "
        "ops), trace_overhead (the trace pass ran slower), overlap (kernels on several streams; on CPU, ops on "
        "several threads)"
    )
    reason: str = Field(description="the gap named in words")


SdpaBackend = Literal["cudnn", "flash", "efficient", "math"]
SDPA_FUSED: tuple[SdpaBackend, ...] = ("cudnn", "flash", "efficient")
"""The fused SDPA backends PyTorch can refuse, with a reason; math takes every call."""


class SdpaTensor(_Model):
    """One tensor of an SDPA call, as the trace recorded it."""

    shape: list[Annotated[int, Field(ge=0)]] = Field(max_length=8)
    strides: list[int] | None = Field(None, max_length=8, description="null where the trace did not record them")
    dtype: str = Field(max_length=40, description="as the trace names it: c10::BFloat16, float, bool, ...")


class SdpaCall(_Model):
    """One distinct ``scaled_dot_product_attention`` call the case made, and which fused backends PyTorch refused it
    and why (its own words, from ``torch.backends.cuda.can_use_*_attention(params, debug=True)``)."""

    query: SdpaTensor
    key: SdpaTensor
    value: SdpaTensor
    attn_mask: SdpaTensor | None = None
    dropout_p: NonNegative = 0.0
    is_causal: bool = False
    enable_gqa: bool = False
    scale: float | None = None
    calls: Annotated[int, Field(ge=1)] = Field(1, description="how many times per traced iteration")
    kv_heads_expanded_from: Annotated[int, Field(ge=1)] | None = Field(
        None,
        description="the key and value heads before the iteration expanded them to the query's (repeat_interleave, "
        "expand and reshape) where the trace shows it: grouped-query attention passed to SDPA without enable_gqa",
    )
    requires_grad: bool = Field(False, description="checked as a training call (the case has a backward pass)")
    eligible: list[SdpaBackend] | None = Field(
        None, max_length=4, description="the backends PyTorch would take for this call; null where not asked"
    )
    refused: dict[SdpaBackend, list[Annotated[str, Field(max_length=1000)]]] | None = Field(
        None,
        description="each fused backend PyTorch refused for this call, with its reasons; null where it was not asked "
        "(PyTorch gives its reasons only for CUDA devices)",
    )
    not_asked: str | None = Field(None, max_length=500, description="why the backends were not asked, where not")


AdviceRule = Literal["backend", "mask", "contiguous", "head_dim", "sdpa", "gqa", "output"]
ADVICE_RULES: tuple[str, ...] = AdviceRule.__args__  # type: ignore[attr-defined]


class Advice(_Model):
    """A change to one SDPA call, timed here against the call as it is: both rebuilt on the case's device from the
    call's recorded shapes, interleaved, the same number of times."""

    rule: AdviceRule
    call: Annotated[int, Field(ge=0)] | None = Field(
        description="index into the case's sdpa_calls; null for the case's whole step (the sdpa rule) or a block's "
        "path from its QKV projection into its output projection (the output rule)"
    )
    suggestion: str = Field(max_length=500, description="what to change, in a sentence")
    current_us: NonNegative = Field(description="median time of the call as it is, timed here")
    alternative_us: NonNegative = Field(description="median time of the call changed as suggested, timed here")
    helps: bool = Field(description="faster by more than ADVICE_MIN_GAIN; advice that does not help is kept only here")
    note: str | None = Field(None, max_length=500, description="what the suggestion assumes of the user's data")


class Case(_Model):
    id: str
    name: str
    target: str
    params: Params
    thresholds: Thresholds = Field(default_factory=Thresholds)
    status: CaseStatus
    error: CaseError | None = None
    suspect: list[str] | None = Field(
        None, description="null, or why this case's numbers are doubtful (e.g. its clocks fell while timing)"
    )
    backend_requested: str | None = None
    backend_used: str | None = None
    latency_us: LatencyStats | None = None
    work: Work | None = None
    achieved: Achieved | None = None
    accuracy: Accuracy | None = None
    kernels: list[Kernel] = Field(default_factory=list)
    trace: str | None = Field(None, description="file name of the gzip Chrome trace")
    wall_s: NonNegative | None = Field(None, description="wall time spent profiling this case, seconds")
    counters_wall_s: NonNegative | None = Field(None, description="wall time of its ncu counter pass, seconds")
    sm_clock_mhz: NonNegative | None = Field(
        None, description="mean SM clock over the step's kernels (weighted by time): each kernel's sm_clock_mhz"
    )
    reconciliation: KernelReconciliation | None = Field(
        None, description="the kernels' sum beside the latency, the gap named; null in older documents"
    )
    sdpa_calls: list[SdpaCall] | None = Field(
        None,
        max_length=64,
        description="each distinct SDPA call of an iteration, and why PyTorch refused the fused backends it did not "
        "use; null where the case made none or the document is older",
    )
    advice: list[Advice] | None = Field(
        None,
        max_length=32,
        description="changes to the case's SDPA calls, each timed here against the call as it is; null where none "
        "was tried (a paired run, rules switched off, no SDPA call)",
    )


class ResultDocument(_Model):
    schema_: Literal["attnprof.result/v1"] = Field(RESULT_SCHEMA, alias="schema")
    run: RunInfo
    suite: SuiteInfo
    environment: Environment
    cases: list[Case]

    def case(self, case_id: str) -> Case | None:
        return next((c for c in self.cases if c.id == case_id), None)

    def to_json(self, *, indent: int | None = 2) -> str:
        return self.model_dump_json(by_alias=True, indent=indent)


def result_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``attnprof.result/v1``.

    JSON Schema has no word for a finite number: every ``number`` gets the largest double as its bounds, which
    refuses the infinities (and ``1e309``, read as one); NaN is refused by the models and is not JSON at all.
    """
    schema = ResultDocument.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://attnprof.dev/schemas/" + RESULT_SCHEMA
    schema["$comment"] = "Every number is finite: NaN, Infinity and -Infinity are refused."
    _bound_numbers(schema)
    return schema


def _bound_numbers(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "number":
            node.setdefault("maximum", sys.float_info.max)
            node.setdefault("minimum", -sys.float_info.max)
        for child in node.values():
            _bound_numbers(child)
    elif isinstance(node, list):
        for child in node:
            _bound_numbers(child)
