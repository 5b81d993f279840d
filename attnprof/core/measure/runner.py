"""The runner: profile a suite, case by case, into a result document (one case's rounds: ``measure.case``).

Per case: build the workload; the timing pass (uninstrumented); the trace pass (Kineto) from which
the kernels, their launch configuration, their phases and the backend that ran are read; the
accuracy check against float64; the work models and the peaks give rates, utilisations and the
bound. Every later round times the case again and traces its iterations again, and each kernel's
duration pools every round's traced iterations. A case that fails (not eligible, out of memory,
user code raising) is recorded with its reason and the next case runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import platform
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from attnprof.core import __version__
from attnprof.core.documents import (
    Case,
    Environment,
    ResultDocument,
    RunInfo,
    SuiteInfo,
)
from attnprof.core.errors import CountersUnavailable, DeviceError
from attnprof.core.measure import environment as env
from attnprof.core.measure.case import (
    STREAM_POOL,
    _case_failure,
    _first_record,
    _Pending,
    _pool,
    _Prepared,
    _time_round,
    _Timing,
    disturbance_reasons,
    on_stream,
    release_stream_workspaces,
    round_stream,
    safe_name,
)
from attnprof.core.measure.clock import clock_pass
from attnprof.core.measure.peaks import cache_path, load_or_measure
from attnprof.core.measure.targets import Workload, build_workload, capture_warnings
from attnprof.core.measure.timing import PAIRED_TIMING_METHOD, TIMING_KEY, TIMING_METHOD, Flusher, summarize
from attnprof.core.measure.trace import start_profiler_once, trace_iterations, trace_round
from attnprof.core.suite import CaseSpec, Suite, TimingConfig

# progress(event, done, total, case_id): event is "case" before each case and "done" at the end.
Progress = Callable[[str, int, int, str], None]

__all__ = [
    "ProfileOptions",
    "SuiteSession",
    "calibrate",
    "collect_environment",
    "disturbance_reasons",
    "profile_suite",
    "resolve_device",
    "safe_name",
]


@dataclass
class ProfileOptions:
    device: str = "auto"
    counters: str = "none"
    trace_dir: Path | None = None
    cache_dir: Path | None = None
    counters_dir: Path | None = None  # the counter cache's folder; None: <cache_dir>/counters
    seed: int = 0
    command: str | None = None
    cases: list[CaseSpec] | None = None  # a selection; default every case of the suite
    ncu_path: str | None = None
    own_pid_namespace: bool = False  # see ``environment.Nvml``: GPU processes are recorded, judged by the caller
    # The pid of the job's root process (``attnprof.core.own_processes``): a paired run's coordinator for its sides;
    # None: this process.
    job_root: int | None = None


def resolve_device(requested: str) -> str:
    """``auto`` picks the GPU when there is one; ``cuda`` without one is an error."""
    if requested not in ("auto", "cpu", "cuda"):
        raise DeviceError(f"--device must be auto, cpu or cuda, not {requested!r}")
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise DeviceError(
            f"--device cuda: no CUDA device is visible (torch {torch.__version__}, "
            f"built with CUDA {torch.version.cuda or 'none'}); use --device cpu or auto"
        )
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    return requested


def collect_environment(
    device: str, nvml: env.Nvml | None, cache_dir: Path | None, *, paired: bool = False
) -> Environment:
    dev = env.describe_device(device)
    driver = nvml.driver() if nvml else None
    key, what = env.testbed(dev, driver, device)
    versions = env.software_versions()
    peaks = load_or_measure(device, dev.name, key, cache_dir)
    return Environment(
        device=dev,
        driver=driver,
        cuda=versions["cuda"],
        cudnn=versions["cudnn"],
        torch=versions["torch"],
        triton=versions["triton"],
        python=platform.python_version(),
        host=env.host_name(),
        os=platform.platform(),
        peaks=peaks,
        testbed_key=key,
        testbed=what,
        software={**versions, TIMING_KEY: (PAIRED_TIMING_METHOD if paired else TIMING_METHOD)[device]},
    )


def calibrate(device: str, cache_dir: Path, *, tries: int = 3, pause_s: float = 2.0) -> tuple[Path, str | None]:
    """Measure this host's peaks into ``cache_dir`` (or find them there) under the testbed key a profile run would
    use, with no user code loaded; returns the cache file and None. A worker runs this before it takes jobs, so a
    job's sandbox can read the peaks without being able to write them.

    A calibration that is not confirmed (unstable, or taken under load: see ``peaks``) is not cached; it is tried
    again up to ``tries`` times, ``pause_s`` seconds apart. If none is confirmed, the file does not exist and the
    reason comes back instead of None: the worker starts all the same, and each job measures its own peaks, which
    its document marks as not cached (a loaded host must not keep a GPU worker from starting). Peaks that cannot
    be measured at all raise :class:`DeviceError`."""
    device = resolve_device(device)
    nvml = env.Nvml.open() if device == "cuda" else None
    for attempt in range(max(1, tries)):
        if attempt:
            time.sleep(pause_s)
        environment = collect_environment(device, nvml, cache_dir)
        peaks = environment.peaks
        if peaks.status == "stable":  # cached ones are, and a datasheet fallback is not
            break
    path = cache_path(cache_dir, environment.testbed_key)
    if peaks.status != "stable":
        return path, f"the peaks for {path} were not cached: {peaks.note or 'they could not be confirmed'}"
    if not path.exists():
        raise DeviceError(f"the peaks could not be written to {path}")
    return path, None


def _step_in_context(workload: Workload) -> object:
    """One iteration of ``workload`` inside its own context (a backend it asked for), as its rounds run it."""
    with workload.context():
        return workload.step()


class SuiteSession:
    """One process's profiling of a suite: the device, its health, the peaks and the flush buffer, opened once;
    cases profiled one round at a time (``first`` then ``again``); ``document`` pools them into the result.

    ``profile_suite`` drives it over every case and round; a paired run drives one per source tree, each in a
    process of its own, round by round (``attnprof.core.measure.paired``)."""

    def __init__(self, suite: Suite, options: ProfileOptions, *, round_config: TimingConfig | None = None) -> None:
        self.suite = suite
        self.options = options
        self.device = resolve_device(options.device)
        if options.counters not in ("none", "ncu", "cached"):
            raise DeviceError(f"--counters must be none, ncu or cached, not {options.counters!r}")
        self.ncu = None
        if options.counters == "ncu":
            from attnprof.core.measure.counters import find_ncu

            self.ncu = find_ncu(self.device, options.ncu_path)
        elif options.counters == "cached" and round_config is None:  # a paired run's sides take no counters
            from attnprof.core.measure.counters import find_ncu

            try:
                self.ncu = find_ncu(self.device, options.ncu_path)
            except CountersUnavailable:
                self.ncu = None  # the cache alone: kernels it lacks keep the model's class
        self.started = time.perf_counter()
        self.created = datetime.now(UTC)
        torch.manual_seed(options.seed)
        self.nvml = (
            env.Nvml.open(own_pid_namespace=options.own_pid_namespace, job_root=options.job_root)
            if self.device == "cuda"
            else None
        )
        # a round_config of its own is a paired run's side: its document says it was timed in pairs
        self.environment = collect_environment(
            self.device, self.nvml, options.cache_dir, paired=round_config is not None
        )
        self.environment.health_start = self.nvml.health() if self.nvml else None
        self.flusher = Flusher(self.device)
        start_profiler_once(self.device, self.flusher)
        self.paired = round_config is not None
        self.counters_note: str | None = None
        self.round_config = round_config or suite.timing.round_config()
        self.records: dict[str, Case | _Pending] = {}
        self._prepared: dict[str, _Prepared] = {}
        self._round_streams: dict[str, set[int]] = {}  # per case, the streams its rounds ran on

    def first(self, spec: CaseSpec) -> Case | _Pending:
        """The case's first round, its trace and its accuracy check."""
        return self.prepare(spec) or self.time_prepared(spec)

    def again(self, case_id: str) -> Case | _Pending:
        """One more round of a case whose first round ran; a case that failed stays failed."""
        record = self.records[case_id]
        if not isinstance(record, _Pending):
            return record
        return self.prepare(record.spec) or self.time_prepared(record.spec)

    def new_round_stream(self, case_id: str) -> Any:
        """The stream a case-round runs on: on CUDA the next of PyTorch's pool (:func:`round_stream`) that the case
        has not run a round on yet, while the pool holds one; None on the CPU. The pool hands its streams out in
        turn, so with 32 cases (or 16, or 8) taking one each round a case would otherwise meet the same few again."""
        used = self._round_streams.setdefault(case_id, set())
        if len(used) >= STREAM_POOL:
            used.clear()
        stream = round_stream(self.device)
        for _ in range(STREAM_POOL - 1):
            if stream is None or stream.cuda_stream not in used:
                break
            stream = round_stream(self.device)
        if stream is not None:
            used.add(stream.cuda_stream)
        return stream

    def prepare(self, spec: CaseSpec) -> Case | None:
        """Build the case and run its warm-up on the round's stream (:meth:`new_round_stream`), ready for
        :meth:`time_prepared`, which times it on that stream; the failure's record if it failed.

        A profile run times right after; a paired run prepares both sides before timing either, so that the two
        timed windows of a pair follow each other closely (the GPU's clocks move within a fraction of a second under
        a compute-bound load)."""
        started = time.perf_counter()
        stack = contextlib.ExitStack()
        warns = stack.enter_context(capture_warnings())
        # The workload's own context closes before the accuracy reference is computed; the warnings' after it.
        context = stack.enter_context(contextlib.ExitStack())
        stream = None
        try:
            stream = self.new_round_stream(spec.id)
            with on_stream(stream):
                workload = build_workload(spec, self.device, seed=self.options.seed)
                context.enter_context(workload.context())
                for _ in range(self.round_config.warmup):
                    workload.zero_grads()
                    workload.step()
                if self.device == "cuda":
                    torch.cuda.synchronize()
        except Exception as exc:  # the workload is arbitrary code: the case's failure
            stack.close()
            return self._failed_round(spec, exc, warns)
        self._prepared[spec.id] = _Prepared(workload, stack, context, warns, started, stream)
        return None

    def time_prepared(self, spec: CaseSpec) -> Case | _Pending:
        """Time one round of a prepared case (its first round also traces it and checks its accuracy), then drop
        its workload."""
        prepared = self._prepared.pop(spec.id)
        config = dataclasses.replace(self.round_config, warmup=0)
        record = self.records.get(spec.id)
        trace_path = self.options.trace_dir / f"{safe_name(spec.id)}.trace.json.gz" if self.options.trace_dir else None
        workload = prepared.workload
        try:
            with prepared.stack, on_stream(prepared.stream):
                with prepared.context:
                    if record is None:
                        timing = _Timing()
                        timed = _time_round(
                            workload, config, device=self.device, flusher=self.flusher, nvml=self.nvml, timing=timing
                        )
                        # The warm-up ran in prepare: the record counts it.
                        first = dataclasses.replace(timed, warmup=self.round_config.warmup)
                        trace = trace_iterations(
                            workload,
                            device=self.device,
                            iterations=self.suite.timing.trace_iters,
                            flusher=self.flusher,
                            out_path=trace_path,
                        )
                        clocks = (
                            clock_pass(
                                workload,
                                flusher=self.flusher,
                                host_us=timed.host_us,
                                step_us=summarize(timing.samples)["median"],
                            )
                            if self.device == "cuda"
                            else None
                        )
                        outputs = workload.outputs()
                    elif isinstance(record, _Pending):
                        _time_round(
                            workload,
                            config,
                            device=self.device,
                            flusher=self.flusher,
                            nvml=self.nvml,
                            timing=record.timing,
                        )
                        # Every round traces its own iterations, after its timing as the first round does: a kernel's
                        # time is then read from every round, not from the one the first trace fell in.
                        record.round_traces.append(
                            trace_round(
                                workload,
                                device=self.device,
                                iterations=self.suite.timing.trace_iters,
                                flusher=self.flusher,
                            )
                        )
                if record is None:
                    reference = workload.reference() if workload.reference else None
                if self.device == "cuda":
                    # the accuracy check reads the outputs and the reference off the round's stream: a pool stream
                    # does not wait for the default stream's work, nor the default stream for its
                    torch.cuda.synchronize()
        except Exception as exc:  # the workload is arbitrary code: every failure is the case's, not the run's
            return self._failed_round(spec, exc, prepared.warns)
        release_stream_workspaces(self.device)  # the round is over: cuBLAS's workspaces go back to the allocator
        if record is None:
            record = _first_record(
                spec,
                device=self.device,
                environment=self.environment,
                timing=timing,
                first=first,
                trace=trace,
                outputs=outputs,
                reference=reference,
                declared_work=workload.declared_work,
                trace_path=trace_path,
                started=prepared.started,
                clocks=clocks,
                advice_off=self.suite.advice_off if not self.paired else None,
                step=functools.partial(_step_in_context, workload),
            )
            self.records[spec.id] = record
        elif isinstance(record, _Pending):
            record.case.wall_s = round((record.case.wall_s or 0.0) + time.perf_counter() - prepared.started, 3)
        return record

    def _counters(self, cases: list[Case], progress: Progress | None) -> None:
        """The counter pass: ncu over every case (``ncu``), or the cache first and ncu over the cases with kernels
        it lacks (``cached``); what ncu read goes into the cache either way, where there is a cache folder."""
        from attnprof.core.counter_cache import CounterCache, apply_cached, counters_path, store_measured
        from attnprof.core.measure.counters import MIN_SHARE, run_counter_pass

        folder = self.options.counters_dir or (self.options.cache_dir / "counters" if self.options.cache_dir else None)
        cache = CounterCache.load(counters_path(folder, self.environment.testbed_key)) if folder else None
        todo = cases
        if self.options.counters == "cached" and cache is not None:
            todo = apply_cached(cases, cache, self.environment, MIN_SHARE)
        if self.ncu is not None and todo:
            try:
                run_counter_pass(self.ncu, self.suite, todo, progress=progress)
            except (CountersUnavailable, subprocess.TimeoutExpired, OSError) as exc:
                if self.options.counters == "ncu":
                    raise
                # cached: counters are an addition; the kernels ncu could not replay keep the model's class
                self.counters_note = f"ncu did not replay the kernels the cache lacks: {exc}"[:1000]
        if cache is not None:
            store_measured(cases, cache, self.environment)
            with contextlib.suppress(
                OSError
            ):  # a read-only cache folder: the counters are in the document all the same
                cache.save()

    def time_unrecorded(self, spec: CaseSpec) -> Case | _Timing:
        """Time one round of a prepared case as :meth:`time_prepared` does and drop it, recording nothing (no samples,
        no trace, no accuracy check): a paired run's warm-up round, timed only to see whether the device has settled.
        Returns the round's timing (``last``), or the case's failure, which is recorded as any round's is."""
        prepared = self._prepared.pop(spec.id)
        timing = _Timing()
        try:
            with prepared.stack, on_stream(prepared.stream), prepared.context:
                _time_round(
                    prepared.workload,
                    dataclasses.replace(self.round_config, warmup=0),
                    device=self.device,
                    flusher=self.flusher,
                    nvml=self.nvml,
                    timing=timing,
                )
                if self.device == "cuda":
                    torch.cuda.synchronize()
        except Exception as exc:  # the workload is arbitrary code: the case's failure, as in a recorded round
            return self._failed_round(spec, exc, prepared.warns)
        release_stream_workspaces(self.device)
        return timing

    def _failed_round(self, spec: CaseSpec, exc: BaseException, warns: list[str]) -> Case:
        failed = _case_failure(spec, exc, warns, self.device)
        release_stream_workspaces(self.device)
        before = self.records.get(spec.id)
        if isinstance(before, _Pending) and failed.error is not None:
            failed.error.message = f"in timing round {before.timing.rounds + 1}: {failed.error.message}"[:4000]
        if before is None or isinstance(before, _Pending):
            self.records[spec.id] = failed
        return failed

    def document(self, progress: Progress | None = None, steps: int = 0) -> ResultDocument:
        """Pool every case's rounds and assemble the result document (the counter pass runs here, when asked)."""
        device, environment, nvml = self.device, self.environment, self.nvml
        clocks: list[float] = []
        cases = []
        for record in self.records.values():
            if isinstance(record, _Pending):
                clocks.extend(record.timing.clocks)
                cases.append(_pool(record, environment, device=device))
            else:
                cases.append(record)
        environment.health_end = nvml.health() if nvml else None
        # Counted before the clock check adds its own marks: this is the run's verdict on disturbances alone.
        timed = [c for c in cases if c.latency_us is not None and c.latency_us.samples]
        disturbed = sum(1 for c in timed if c.suspect)
        if self.options.counters != "none" and not self.paired:
            self._counters(cases, progress)
        if device == "cuda":
            top = environment.health_start.max_sm_clock_mhz if environment.health_start else None
            reasons = env.suspect_reasons(environment.health_start, environment.health_end)
            reasons += env.mark_clock_drops(cases, max([top or 0.0, *clocks]) or None)
        else:
            reasons = env.cpu_suspect_reasons()
        reasons += env.disturbed_run_reasons(disturbed, len(timed))
        if progress:
            progress("done", steps, steps, "")
        return ResultDocument(
            run=RunInfo(
                id=str(uuid.uuid4()),
                created_at=self.created,
                tool_version=__version__,
                mode=device,
                counters=self.options.counters,
                counters_note=self.counters_note,
                suspect=reasons or None,
                command=self.options.command,
                wall_s=round(time.perf_counter() - self.started, 3),
            ),
            suite=SuiteInfo(
                name=self.suite.name, thresholds=self.suite.thresholds, source_sha256=self.suite.source_sha256
            ),
            environment=environment,
            cases=cases,
        )


def profile_suite(suite: Suite, options: ProfileOptions, progress: Progress | None = None) -> ResultDocument:
    """Profile every case of ``suite`` (or ``options.cases``) and return the result document."""
    session = SuiteSession(suite, options)
    specs = options.cases if options.cases is not None else suite.cases
    rounds = suite.timing.effective_rounds
    steps = len(specs) * rounds
    for i, spec in enumerate(specs):
        if progress:
            progress("case", i, steps, spec.id)
        session.first(spec)
    # The later rounds: every case again, in suite order, so each case's samples span the whole run.
    for r in range(1, rounds):
        for i, spec in enumerate(specs):
            if progress:
                progress("case", r * len(specs) + i, steps, spec.id)
            session.again(spec.id)
    return session.document(progress, steps)
