"""The kernel table against the case latency: real H200 traces and a CPU trace recorded here by the real profiler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnprof.core.attribution import (
    aggregate,
    attribute,
    cpu_kernels,
    iteration_times,
    load_trace,
    parse_trace,
    reconcile,
)
from attnprof.core.documents import Case, DurationStats, Kernel, load_result, parse_result
from attnprof.core.measure.runner import ProfileOptions, profile_suite
from attnprof.core.report import reconciliation_line, render_markdown, render_table
from attnprof.core.suite import parse_suite
from attnprof.core.units import fmt_duration_us
from tests.profiling_support import suite_text

DATA = Path(__file__).resolve().parents[1] / "data"
H200 = DATA / "h200"
RUN = H200 / "attnprof"


def _kernel(duration_us: float) -> Kernel:
    stats = DurationStats(median=duration_us, p25=duration_us, p75=duration_us)
    return Kernel(name="k", key="k", phase="other", launches_per_iter=1, duration_us=stats)


# ---------------------------------------------------------------------------------------------
# H200: the recorded run (annotated iterations) and the single-call SDPA traces


def _h200_cases() -> list[Case]:
    return [c for c in load_result(RUN / "result.json").cases if c.status == "ok" and c.trace]


@pytest.mark.parametrize("case", _h200_cases(), ids=lambda c: c.id)
def test_h200_kernels_sum_below_the_traced_span_and_the_gap_is_named(case: Case) -> None:
    assert case.latency_us is not None
    parsed = load_trace(RUN / str(case.trace))
    r = reconcile(case.kernels, case.latency_us.median, parsed=parsed)
    assert r is not None
    assert r.kernel_sum_us == pytest.approx(sum(k.duration_us.median for k in case.kernels))
    assert r.gap_us == pytest.approx(case.latency_us.median - r.kernel_sum_us, abs=1e-3)
    # One stream: the kernels never overlap, and they fill at most the traced iteration's span.
    assert r.trace_kernel_sum_us == pytest.approx(r.trace_busy_us, rel=1e-3)
    assert r.trace_busy_us is not None and r.trace_span_us is not None
    assert r.trace_busy_us <= r.trace_span_us + 1e-6
    # On the GPU the timed latency holds the kernels and the gaps between them: never far below their sum.
    assert r.gap_fraction > -0.02
    assert r.cause in ("none", "launch_gaps")
    assert r.reason


def test_h200_unfused_paths_show_launch_gaps_between_kernels() -> None:
    naive = next(c for c in _h200_cases() if c.id == "naive[pass=fwd]")
    assert naive.latency_us is not None
    r = reconcile(naive.kernels, naive.latency_us.median, parsed=load_trace(RUN / str(naive.trace)))
    assert r is not None and r.cause == "launch_gaps"
    assert 0.02 < r.gap_fraction < 0.2  # 1,586 µs of kernels in 1,709 µs
    assert r.trace_span_us is not None and r.trace_busy_us is not None
    assert r.trace_span_us - r.trace_busy_us > 50  # idle between the eight kernels in the trace, too
    assert r.reason.startswith("launch gaps / host time between kernels")


def test_h200_a_single_kernel_has_its_gap_at_the_edges() -> None:
    cudnn = next(c for c in _h200_cases() if c.id == "sdpa[backend=cudnn,pass=fwd]")
    assert cudnn.latency_us is not None
    r = reconcile(cudnn.kernels, cudnn.latency_us.median, parsed=load_trace(RUN / str(cudnn.trace)))
    assert r is not None and r.cause == "launch_gaps"
    assert r.trace_span_us == pytest.approx(r.trace_busy_us)
    assert "launch latency and the timing events" in r.reason


@pytest.mark.parametrize("backend", ["cudnn", "flash", "efficient", "math"])
def test_shared_sdpa_traces_kernels_fill_at_most_the_span(backend: str) -> None:
    """The single-call traces carry no iteration annotation: the whole trace is iteration 0."""
    parsed = load_trace(H200 / f"trace_{backend}.json")
    (t,) = iteration_times(parsed)
    assert t.kernel_sum_us == pytest.approx(sum(k.dur_us for k in parsed.kernels))
    assert t.busy_us == pytest.approx(t.kernel_sum_us)
    assert t.busy_us <= t.span_us + 1e-6
    if backend == "math":  # fifteen kernels launched one after another from the host: idle between them
        assert t.idle_us > 0


def test_h200_math_trace_reconciles_against_its_own_span() -> None:
    """With the traced span as the latency, the gap is exactly the idle time between the kernels."""
    parsed = load_trace(H200 / "trace_math.json")
    (t,) = iteration_times(parsed)
    kernels = [row.to_document() for row in aggregate(attribute(parsed), parsed.iterations)]
    r = reconcile(kernels, t.span_us, parsed=parsed)
    assert r is not None and r.cause == "launch_gaps"
    assert r.kernel_sum_us == pytest.approx(t.kernel_sum_us, rel=1e-6)
    assert r.gap_us == pytest.approx(t.idle_us, abs=1e-3)
    assert r.kernel_sum_us < t.span_us


def test_overlapping_kernels_are_named() -> None:
    """Two streams: the kernels sum to more than the device was busy."""
    events = [
        {"ph": "X", "cat": "kernel", "name": "a", "ts": 0.0, "dur": 100.0, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "b", "ts": 10.0, "dur": 100.0, "args": {"stream": 8}},
    ]
    parsed = parse_trace({"traceEvents": events})
    r = reconcile([_kernel(100.0), _kernel(100.0)], 115.0, parsed=parsed)
    assert r is not None and r.cause == "overlap"
    assert r.trace_busy_us == pytest.approx(110.0) and r.trace_kernel_sum_us == pytest.approx(200.0)
    assert "several streams" in r.reason


def test_no_kernels_or_no_latency_reconcile_to_nothing() -> None:
    assert reconcile([], 100.0, parsed=None) is None
    assert reconcile([_kernel(1.0)], 0.0, parsed=None) is None


# ---------------------------------------------------------------------------------------------
# CPU: the real profiler on this machine


CPU_SUITE = suite_text(
    "reconcile",
    """
[[cases]]
name = "naive"
target = "naive"
batch = 1
q_heads = 2
seq_q = 32
head_dim = 16
dtype = "fp32"
causal = true
""",
).replace("trace_iters = 1", "trace_iters = 3")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Case, Path]:
    tmp = tmp_path_factory.mktemp("reconcile")
    doc = profile_suite(parse_suite(CPU_SUITE), ProfileOptions(device="cpu", trace_dir=tmp, cache_dir=tmp))
    (case,) = doc.cases
    assert case.status == "ok", case.error
    return parse_result(json.loads(doc.to_json())).cases[0], tmp / str(case.trace)


def test_cpu_case_records_its_reconciliation(cpu_run: tuple[Case, Path]) -> None:
    case, _ = cpu_run
    r = case.reconciliation
    assert r is not None and case.latency_us is not None
    assert r.latency_us == pytest.approx(case.latency_us.median, rel=1e-4)
    assert r.kernel_sum_us == pytest.approx(sum(k.duration_us.median for k in case.kernels), rel=1e-4)
    assert r.trace_span_us is not None and r.trace_busy_us is not None
    assert r.cause in ("none", "host_time", "trace_overhead")
    assert r.reason


def test_cpu_ops_counted_never_exceed_their_iteration(cpu_run: tuple[Case, Path]) -> None:
    """No op is counted twice: in each traced iteration the ops that play kernels fit in its host range, and
    each iteration counts only its own ops (not the sum over the traced iterations)."""
    _, trace = cpu_run
    parsed = load_trace(trace)
    times = iteration_times(parsed)
    assert [t.iteration for t in times] == parsed.iterations == [0, 1, 2]
    ops = cpu_kernels(parsed)
    for t in times:
        assert t.kernel_sum_us <= t.span_us + 0.05
        assert t.kernel_sum_us == pytest.approx(sum(k.dur_us for k in ops if k.iteration == t.iteration))
    assert sum(t.kernel_sum_us for t in times) == pytest.approx(sum(k.dur_us for k in ops))


def test_cpu_trace_overhead_is_named_when_the_ops_sum_to_more() -> None:
    """On CPU an over-count is the profiler's overhead: the traced iteration itself took longer than timed."""
    parsed = load_trace(DATA / "cpu" / "trace_naive_fwd.json.gz")
    times = iteration_times(parsed)
    span = sorted(t.span_us for t in times)[1]
    r = reconcile([_kernel(200.0)], 120.0, parsed=parsed)
    assert r is not None and r.cause == "trace_overhead"
    assert r.gap_us == pytest.approx(-80.0)
    assert r.reason.startswith("trace-pass overhead")
    assert f"traced iteration {fmt_duration_us(span)} against 120.0 µs timed" in r.reason


def test_cpu_ops_on_several_threads_are_named_as_overlap() -> None:
    """Ops on two threads within one iteration (a workload that forks work) sum past the iteration's host range,
    which one thread's ops cannot: the gap is their overlap, not the profiler's overhead."""

    def op(name: str, tid: int, ts: float, dur: float) -> dict[str, object]:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}

    annotation = {"ph": "X", "cat": "user_annotation", "name": "attnprof/iter/0", "pid": 1, "tid": 1}
    events = [{**annotation, "ts": 0.0, "dur": 100.0}, op("aten::mm", 1, 2.0, 90.0), op("aten::mul", 2, 5.0, 90.0)]
    parsed = parse_trace({"traceEvents": events})
    (t,) = iteration_times(parsed)
    assert t.span_us == pytest.approx(100.0) and t.kernel_sum_us == pytest.approx(180.0)
    r = reconcile([_kernel(90.0), _kernel(90.0)], 102.0, parsed=parsed)
    assert r is not None and r.cause == "overlap"
    assert (
        r.reason
        == "ops overlap on several threads: the traced ops sum to 180.0 µs in the iteration's 100.0 µs host range"
    )
    # one thread's ops that sum to more than the timed latency, inside their iteration: the profiler's overhead
    single = parse_trace({"traceEvents": [{**annotation, "ts": 0.0, "dur": 150.0}, op("aten::mm", 1, 2.0, 140.0)]})
    r = reconcile([_kernel(140.0)], 102.0, parsed=single)
    assert r is not None and r.cause == "trace_overhead"


def test_report_shows_the_sum_beside_the_latency(cpu_run: tuple[Case, Path]) -> None:
    case, _ = cpu_run
    r = case.reconciliation
    assert r is not None
    line = reconciliation_line(case, "cpu")
    assert line is not None and line.startswith("kernels ") and "s case latency (" in line
    # each figure in the unit the formatter picks (a CPU case often runs past 10 ms: ms, not 23,043.7 µs)
    assert line.startswith(
        f"kernels {fmt_duration_us(r.kernel_sum_us)} of {fmt_duration_us(r.latency_us)} case latency"
    )
    assert line.endswith(r.reason)
    assert ("gap " in line) == (r.gap_us >= 0) and (" over: " in line) == (r.gap_us < 0)


def test_a_timed_case_without_kernels_says_so_in_both_renderers(cpu_run: tuple[Case, Path]) -> None:
    case, _ = cpu_run
    assert case.latency_us is not None
    bare = case.model_copy(update={"kernels": [], "reconciliation": None})
    doc = load_result(RUN / "result.json")
    doc = doc.model_copy(update={"cases": [bare]})
    line = f"no kernels traced: {fmt_duration_us(case.latency_us.median)} of case latency without a kernel table"
    assert line in render_markdown(doc).splitlines()
    assert line in render_table(doc).splitlines()
    with_kernels = doc.model_copy(update={"cases": [case]})
    assert "no kernels traced" not in render_markdown(with_kernels) + render_table(with_kernels)


def test_report_renderers_put_the_line_under_each_kernel_table() -> None:
    doc = load_result(RUN / "result.json")
    naive = doc.case("naive[pass=fwd]")
    assert naive is not None and naive.latency_us is not None
    naive.reconciliation = reconcile(naive.kernels, naive.latency_us.median, parsed=load_trace(RUN / str(naive.trace)))
    line = reconciliation_line(naive, doc.run.mode)
    assert line is not None
    assert line.startswith("kernels 1,586 µs of 1,709 µs case latency (93%); gap 123.6 µs: launch gaps")
    md = render_markdown(doc)
    assert line in md
    # Every case with a kernel table gets a line, older cases from their kernels and latency alone.
    assert md.count("\nkernels ") == sum(1 for c in doc.cases if c.kernels and c.latency_us)
    assert "case latency" in render_table(doc, width=400)
