"""One case's record over its rounds: a round's timing, the record after the first round (kernels from its trace,
accuracy, rates), a failure's record, and the pooling of every round's samples: the case's timed samples, and each
kernel's durations over every round's traced iterations (``measure.kernel_rounds``).

``runner.SuiteSession`` builds and times each round (``prepare`` then ``time_prepared``), for a profile run and for a
paired run's sides alike. A case that fails (not eligible, out of memory, user code raising) is recorded with its
reason; nothing here raises for a problem of the case itself.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from attnprof.core.analysis.bursts import find_burst
from attnprof.core.attribution import ParsedTrace, TraceError, parse_trace
from attnprof.core.attribution.reconcile import reconcile
from attnprof.core.attribution.sdpa_calls import sdpa_calls
from attnprof.core.documents import Case, CaseError, Environment, LatencyStats
from attnprof.core.measure import environment as env
from attnprof.core.measure.accuracy import check_accuracy
from attnprof.core.measure.advice import advise, beside_sdpa, block_output
from attnprof.core.measure.clock import StepClocks
from attnprof.core.measure.kernel_rounds import pool_durations
from attnprof.core.measure.kernels import case_achieved, kernel_records
from attnprof.core.measure.sdpa_reasons import TRIGGERED_AT, ask_backends
from attnprof.core.measure.targets import TORCH_DTYPES, SkipCase, Workload, WorkloadError
from attnprof.core.measure.timing import Flusher, TimingResult, summarize, time_iterations
from attnprof.core.measure.trace import RoundTrace
from attnprof.core.suite import CaseSpec, TimingConfig


def safe_name(case_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", case_id)


def _failed(spec: CaseSpec, type_: str, message: str, status: Literal["failed", "skipped"] = "failed") -> Case:
    return Case(
        id=spec.id,
        name=spec.name,
        target=spec.target,
        params=spec.params,
        thresholds=spec.thresholds,
        status=status,
        error=CaseError(type=type_, message=message[:4000]),
        backend_requested=spec.backend,
    )


def _with_reasons(exc: BaseException, warnings: list[str]) -> str:
    """The exception's text, followed by the warnings that say why a backend was not eligible.

    PyTorch explains an ineligible SDPA backend only in warnings emitted before its "No available
    kernel" error: "Flash attention kernel not used because:", then one warning per failed check
    ("... require query, key and value to have the same num_heads", "... do not support non-zero
    dropout"), all raised from ``sdp_utils``. Those checks are worded in many ways, so they are
    recognised by where they come from, not by their words.
    """
    reasons = []
    for w in warnings:
        if "sdp_utils" in w or "not used because" in w or "Expected" in w or "requires" in w:
            text = TRIGGERED_AT.sub("", w).strip()
            if text:
                reasons.append(text)
    text = str(exc).strip()
    return text + ("\n" + "\n".join(dict.fromkeys(reasons)) if reasons else "")


def _reference_name(spec: CaseSpec) -> str:
    if spec.is_custom:
        return f"the reference returned by {spec.target}, on float64 copies of the arguments"
    if spec.target == "block":
        return "float64 block: projections, FFN and attention written out (matmul, softmax, matmul)"
    return "float64 attention written out (matmul, softmax, matmul)"


def disturbance_reasons(
    samples_us: list[float], *, waits_before: env.ThreadTimes | None = None, waits_after: env.ThreadTimes | None = None
) -> list[str]:
    """Why a case's timing is doubtful: a burst of slow samples (``samples_us`` in time order, microseconds), or on
    CPU its threads waiting for a core between ``waits_before`` and ``waits_after`` (a busy host slows every sample
    alike, which no look at the samples can tell). Empty when neither happened."""
    reasons = []
    burst = find_burst(samples_us)
    if burst is not None:
        reasons.append(burst.describe())
    busy = env.host_wait_reason(waits_before, waits_after)
    if busy is not None:
        reasons.append(busy)
    return reasons


@dataclass
class _Timing:
    """A case's samples over the rounds (in time order) and what each round left, pooled by :func:`_pool`."""

    samples: list[float] = field(default_factory=list)
    stopped_by: list[str] = field(default_factory=list)
    clocks: list[float] = field(default_factory=list)
    running_ns: int = 0
    waiting_ns: int = 0
    steal_ticks: int = 0
    cpu_ticks: int = 0
    waits_known: bool = True
    rounds: int = 0
    sizes: list[int] = field(default_factory=list)  # samples per round, in time order
    last: TimingResult | None = None  # the latest round's own result (a paired run compares rounds)

    def add(self, timing: TimingResult, before: env.ThreadTimes | None, after: env.ThreadTimes | None) -> None:
        self.last = timing
        self.samples.extend(timing.samples_us)
        self.stopped_by.append(timing.stopped_by)
        self.clocks.extend(timing.clocks_mhz or [])
        self.rounds += 1
        self.sizes.append(len(timing.samples_us))
        if before is None or after is None:
            self.waits_known = False
        else:
            self.running_ns += after.running_ns - before.running_ns
            self.waiting_ns += after.waiting_ns - before.waiting_ns
            if before.cpu_ticks and after.cpu_ticks:  # /proc/stat read on both sides of the round
                self.steal_ticks += after.steal_ticks - before.steal_ticks
                self.cpu_ticks += after.cpu_ticks - before.cpu_ticks

    def waits(self) -> tuple[env.ThreadTimes | None, env.ThreadTimes | None]:
        if not self.waits_known:
            return None, None
        return env.ThreadTimes(0, 0), env.ThreadTimes(
            self.running_ns, self.waiting_ns, self.steal_ticks, self.cpu_ticks
        )


@dataclass
class _Pending:
    """A case timed in its first round, kept for the later rounds and for pooling: what its rates and the
    reconciliation are recomputed from once all its samples are in."""

    spec: CaseSpec
    case: Case
    timing: _Timing
    parsed: ParsedTrace
    warmup: int
    host_us: float | None
    round_traces: list[RoundTrace] = field(default_factory=list)  # the later rounds' traced iterations, in order


@dataclass
class _Prepared:
    """A case built and warmed up, waiting for its timed round."""

    workload: Workload
    stack: contextlib.ExitStack  # the warnings' capture, holding ``context``
    context: contextlib.ExitStack  # the workload's own context
    warns: list[str]
    started: float
    stream: Any = None  # the round's CUDA stream (``round_stream``); None on the CPU


STREAM_POOL = 32  # streams in PyTorch's pool of each priority on a device, handed out in turn (kStreamsPerPool)


def round_stream(device: str) -> Any:
    """A stream for one case-round on CUDA, the next of PyTorch's pool (handed out in turn); None on the CPU.

    Each round's build, warm-up, timing (and in the first round its trace, clock pass and accuracy check) run on a
    stream of its own. Timed on one stream throughout, a process read one level in every round: four cases moved
    together from process to process by about +-0.5%, with the stream and the blocks cached on it not told apart.
    A stream per case-round draws that level again each round and the pooled median averages it: on one H200, both
    suites profiled by ten processes each way in turn, the cases of 100 us and more spread 0.69 times as widely
    (95% interval 0.52-0.88) and 22.9 of 29 were expected within 0.5% over every five processes against 18.5
    (docs/findings.md#a-stream-per-case-round; the rule that decided was set before that lease).
    The pool holds 32 streams a device, handed out in turn: where N cases take one each round, a case would meet
    its first stream again after 32 / gcd(N, 32) rounds, so the session skips the streams a case has used
    (``SuiteSession.new_round_stream``)."""
    return torch.cuda.Stream() if device == "cuda" else None  # type: ignore[no-untyped-call]


def on_stream(stream: Any) -> contextlib.AbstractContextManager[Any]:
    """Make ``stream`` current for the block (no-op for None)."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def release_stream_workspaces(device: str) -> None:
    """Free the workspaces cuBLAS keeps per (handle, stream), once a case-round is over (timed or failed).

    PyTorch gives each stream that a cuBLAS call runs on a workspace of its own and keeps it for the life of the
    process; with a stream per case-round (:func:`round_stream`) a run would keep one for every stream of the pool
    that a case with matrix products met (on an H200, both suites: 1.6 GiB still allocated after the run and
    8.3 GiB that ``empty_cache`` could not return; docs/findings.md#cublas-workspaces-released-after-each-round).
    PyTorch's call clears its whole map, every handle and stream of the process, into the allocator's cache; a stream's
    next call allocates again. A CUDA graph that a workload captures itself and keeps past its round would hold a freed
    workspace's address (PyTorch's own graph trees clear the workspaces around capture, so theirs come from the graph's
    private pool). A no-op on the CPU and where PyTorch has no such call."""
    if device != "cuda":
        return
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


# What ended a case's sampling, pooled over rounds: the one that says least about precision wins.
_STOP_ORDER = ("budget", "max_samples", "precision")


def _time_round(
    workload: Workload,
    config: TimingConfig,
    *,
    device: str,
    flusher: Flusher,
    nvml: env.Nvml | None,
    timing: _Timing,
) -> TimingResult:
    waits_before = env.thread_times() if device == "cpu" else None
    result = time_iterations(
        workload.step,
        device=device,
        config=config,
        before_each=workload.zero_grads,
        flusher=flusher,
        clock=nvml.sm_clock if nvml is not None else None,
    )
    timing.add(result, waits_before, env.thread_times() if device == "cpu" else None)
    return result


def _case_failure(spec: CaseSpec, exc: BaseException, warns: list[str], device: str) -> Case:
    """The case's record for an exception its workload raised (anywhere: build, timing, tracing, a later round)."""
    if isinstance(exc, SkipCase):
        return _failed(spec, "Skipped", str(exc), status="skipped")
    if isinstance(exc, WorkloadError):
        return _failed(spec, exc.type, str(exc))
    if isinstance(exc, torch.OutOfMemoryError):
        if device == "cuda":
            torch.cuda.empty_cache()
        return _failed(spec, "OutOfMemoryError", str(exc).split("\n")[0])
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return _failed(spec, type(exc).__name__, _with_reasons(exc, warns))


def _first_record(
    spec: CaseSpec,
    *,
    device: str,
    environment: Environment,
    timing: _Timing,
    first: TimingResult,
    trace: Any,
    outputs: Any,
    reference: Any,
    declared_work: Any,
    trace_path: Path | None,
    started: float,
    clocks: StepClocks | None = None,
    advice_off: tuple[str, ...] | None = None,
    step: Callable[[], object] | None = None,
) -> Case | _Pending:
    """A case's record after its first round: kernels from its trace, its accuracy, its rates, and the SM clock
    each kernel ran at where the clock pass read it."""
    median = summarize(timing.samples)["median"]
    parsed = parse_trace(trace)
    kernels, backend_used = kernel_records(trace, spec, environment, declared_work, parsed)
    if clocks is not None:
        for k in kernels:
            k.sm_clock_mhz = clocks.mhz(k.name)
    accuracy = None
    if reference is not None:
        try:
            accuracy = check_accuracy(
                outputs,
                reference,
                dtype=spec.dtype,
                tolerance=spec.thresholds.accuracy,
                reference_name=_reference_name(spec),
            )
        except (TypeError, ValueError) as exc:  # a custom factory's reference that does not match its output
            return _failed(spec, type(exc).__name__, f"the accuracy check cannot compare the output: {exc}")
    work, achieved = case_achieved(spec, backend_used, median, kernels, environment)
    calls = sdpa_calls(parsed)
    advice = None
    if calls:
        calls = ask_backends(calls, device=device, requires_grad=spec.pass_ == "fwd_bwd")
        if advice_off is not None:  # None: a paired run's side, which times the two trees and nothing else
            forced = spec.backend if spec.backend not in (None, "default") else None
            # A block's query, key and value are views of its QKV projection's output, made anew every call: no copy
            # made "once" exists there, and the output rule times the copies with what they change downstream.
            off = (*advice_off, "contiguous") if spec.target == "block" else advice_off
            advice = advise(calls, backend_used, device=device, off=off, forced=forced) or None
    elif advice_off is not None and step is not None and spec.has_shape and spec.pass_ == "fwd":
        # attention without SDPA (the unfused path, a custom kernel): how far from PyTorch's fused kernel
        shape = (spec.batch, spec.q_heads, spec.kv_heads, spec.seq_q, spec.seq_kv, spec.head_dim)
        dtype = TORCH_DTYPES[spec.dtype]
        advice = beside_sdpa(step, device=device, dtype=dtype, shape=shape, causal=spec.causal, off=advice_off) or None
    if advice_off is not None and spec.target == "block":
        # the block's attention output goes on into its output projection: a layout is timed up to there
        shape = (spec.batch, spec.q_heads, spec.kv_heads, spec.seq_q, spec.seq_kv, spec.head_dim)
        path = block_output(
            device=device, dtype=TORCH_DTYPES[spec.dtype], shape=shape, causal=spec.causal, off=advice_off
        )
        advice = [*(advice or []), *path][:32] or None
    case = Case(
        id=spec.id,
        name=spec.name,
        target=spec.target,
        params=spec.params,
        thresholds=spec.thresholds,
        status="ok",
        backend_requested=spec.backend,
        backend_used=backend_used,
        work=work,
        achieved=achieved,
        accuracy=accuracy,
        kernels=kernels,
        trace=trace_path.name if trace_path else None,
        wall_s=round(time.perf_counter() - started, 3),
        sm_clock_mhz=clocks.step_mhz() if clocks is not None else None,
        sdpa_calls=calls or None,
        advice=advice,
    )
    return _Pending(spec, case, timing, parsed, first.warmup, first.host_us)


def _pool(pending: _Pending, environment: Environment, *, device: str) -> Case:
    """The case's record from all its rounds' samples: latency, rates, reconciliation and disturbances."""
    timing = pending.timing
    stats = summarize(timing.samples)
    latency = LatencyStats(
        samples=[round(s, 4) for s in timing.samples],
        warmup=pending.warmup,
        stopped_by=min(timing.stopped_by, key=_STOP_ORDER.index),
        rounds=timing.rounds,
        round_samples=list(timing.sizes),
        host_us=round(pending.host_us, 2) if pending.host_us is not None else None,
        sm_clock_mhz_min=min(timing.clocks) if timing.clocks else None,
        sm_clock_mhz_max=max(timing.clocks) if timing.clocks else None,
        **stats,
    )
    case = pending.case
    kernels = pool_durations(
        case.kernels, [pending.parsed, *_parsed_rounds(pending)], dtype=pending.spec.dtype, environment=environment
    )
    work, achieved = case_achieved(pending.spec, case.backend_used, stats["median"], kernels, environment)
    reconciliation = reconcile(kernels, stats["median"], parsed=pending.parsed, on_gpu=device == "cuda")
    waits_before, waits_after = timing.waits()
    suspect = disturbance_reasons(timing.samples, waits_before=waits_before, waits_after=waits_after) or None
    return case.model_copy(
        update={
            "latency_us": latency,
            "kernels": kernels,
            "work": work,
            "achieved": achieved,
            "reconciliation": reconciliation,
            "suspect": suspect,
        }
    )


def _parsed_rounds(pending: _Pending) -> list[ParsedTrace]:
    """The later rounds' traces, parsed. A round whose trace cannot be read leaves its kernel samples out, never the
    case failed: the kernels' samples explain a change, the case's timing decides it."""
    parsed = []
    for trace in pending.round_traces:
        try:
            parsed.append(parse_trace(trace.chrome()))
        except (TraceError, OSError, ValueError, RuntimeError):
            continue
    return parsed
