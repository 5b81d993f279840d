"""The SM clock under load (``attnprof.core.measure.clock``): which kernels and probe belong to which iteration, the
probe's timer against Kineto's, the cycles over a kernel and their mean clock, and what a comparison says of them.
The probe itself needs CUDA and Triton; what it read on the H200 is recorded in docs/findings.md#clock-handling."""

from __future__ import annotations

import pytest

from attnprof.core.analysis import compare
from attnprof.core.analysis.kernels import CLOCK_MOVE, kernel_moves
from attnprof.core.measure.clock import (
    MAX_SAMPLES,
    MIN_EVERY,
    StepClocks,
    align,
    clock_pass,
    cycles_at,
    cycles_over,
    probe_every,
    read_clocks,
    split_iterations,
)
from tests.core.result_documents import runs

SPIN = "at::cuda::(anonymous namespace)::spin_kernel(long)"


def _series(start_ns: int, n: int, step_ns: int, mhz: list[float]) -> list[tuple[int, int]]:
    """A probe's samples every ``step_ns``, the clock ``mhz[i]`` over the i-th interval."""
    out, cycles = [(start_ns, 1000)], 1000.0
    for i in range(1, n):
        cycles += mhz[i - 1] * step_ns / 1000.0
        out.append((start_ns + i * step_ns, round(cycles)))
    return out


def test_the_probe_belongs_to_the_iteration_its_next_marker_opens_and_holds_and_flushes_are_left_out() -> None:
    events = [
        ("fill", 0.0, 1.0),  # zero_grads
        ("span_probe", 1.0, 300.0),  # starts with the hold, before the marker
        (SPIN, 1.5, 40.0),  # the hold
        ("reduce_kernel<amax>", 42.0, 60.0),  # the flush
        (SPIN, 103.0, 1.0),
        ("gemm", 104.0, 80.0),
        ("softmax", 185.0, 20.0),
        (SPIN, 206.0, 1.0),
        ("fill", 210.0, 1.0),  # the flag
        ("span_probe", 320.0, 200.0),
        (SPIN, 321.0, 40.0),
        (SPIN, 400.0, 1.0),
        ("gemm", 401.0, 80.0),
        (SPIN, 482.0, 1.0),
    ]
    got = split_iterations(events)
    assert [[k[0] for k in ks] for ks, _, _ in got] == [["gemm", "softmax"], ["gemm"]]
    assert [(i, p[1] if p else None) for _, i, p in got] == [(0, 1.0), (1, 320.0)]


def test_an_iteration_without_a_probe_has_none() -> None:
    got = split_iterations([(SPIN, 0.0, 1.0), ("gemm", 1.0, 10.0), (SPIN, 12.0, 1.0)])
    assert got == [([("gemm", 1.0, 10.0)], None, None)]


def test_a_probe_that_started_late_is_taken_by_no_iteration_and_the_next_keeps_its_own_samples() -> None:
    events = [
        ("span_probe", 0.0, 100.0),
        (SPIN, 1.0, 1.0),
        ("gemm", 2.0, 80.0),
        (SPIN, 83.0, 1.0),
        (SPIN, 90.0, 1.0),  # the second iteration opens before its probe starts
        ("span_probe", 100.5, 100.0),
        ("gemm", 101.0, 80.0),
        (SPIN, 182.0, 1.0),
        ("span_probe", 190.0, 100.0),
        (SPIN, 191.0, 1.0),
        ("gemm", 192.0, 80.0),
        (SPIN, 273.0, 1.0),
    ]
    got = split_iterations(events)
    assert [i for _, i, _ in got] == [0, None, 2]  # the third iteration reads the third probe's samples
    series = [_series(0, 301, 1000, [1800.0] * 300)] * 3
    clocks = read_clocks(got, series)
    assert clocks.iterations == 2 and clocks.mhz("gemm") == pytest.approx(1800.0, abs=0.1)


def test_the_probe_timer_is_aligned_with_kineto_by_its_two_ends() -> None:
    series = _series(5_000_000, 101, 1000, [1980.0] * 100)  # 100 µs of samples from timer 5,000 µs
    assert align(("span_probe", 20.0, 100.0), series) == pytest.approx(20.0 - 5000.0)
    # Kineto's probe 0.4 µs longer than the timer's samples: the offset splits the difference
    assert align(("span_probe", 20.0, 100.4), series) == pytest.approx(20.2 - 5000.0)


def test_cycles_are_interpolated_between_samples_and_refused_outside_them() -> None:
    series = [(1000, 0), (2000, 1900), (3000, 3700)]
    assert cycles_at(series, 1000) == 0
    assert cycles_at(series, 1500) == pytest.approx(950)
    assert cycles_at(series, 2500) == pytest.approx(2800)
    assert cycles_at(series, 999) is None and cycles_at(series, 3001) is None
    assert cycles_at(series[:1], 1000) is None
    assert cycles_over(series, 0.0, 1.5, 1.0) == pytest.approx(2800 - 950)
    assert cycles_over(series, 0.0, 2.5, 1.0) is None  # runs past the last sample
    assert cycles_over(series, 0.0, 1.5, 0.0) is None


def test_a_kernel_clock_is_the_mean_over_it_and_a_name_is_weighted_by_time() -> None:
    # 1 µs samples: 1,980 MHz for the first 50 µs, 1,700 MHz after
    series = _series(0, 201, 1000, [1980.0] * 50 + [1700.0] * 150)
    probe = ("span_probe", 0.0, 200.0)
    kernels = [("gemm", 10.0, 40.0), ("gemm", 60.0, 100.0), ("add", 40.0, 20.0), ("tail", 190.0, 30.0)]
    clocks = read_clocks([(kernels, 0, probe)], [series])
    assert clocks.iterations == 1
    assert clocks.mhz("gemm") == pytest.approx((40 * 1980 + 100 * 1700) / 140, abs=0.1)
    assert clocks.mhz("add") == pytest.approx((10 * 1980 + 10 * 1700) / 20, abs=0.1)
    assert clocks.mhz("tail") is None  # the probe stopped before it ended
    # the probe spanned 160 of the 190 µs of kernel time: too little for the step's clock
    assert clocks.covered() == pytest.approx(160 / 190)
    assert clocks.step_mhz() is None
    whole = read_clocks([(kernels[:3], 0, probe)], [series])
    assert whole.step_mhz() == pytest.approx((40 * 1980 + 100 * 1700 + 10 * 1980 + 10 * 1700) / 160, abs=0.1)


def test_iterations_without_a_probe_or_samples_read_nothing() -> None:
    clocks = read_clocks(
        [([("gemm", 1.0, 10.0)], None, None), ([("gemm", 1.0, 10.0)], 0, ("span_probe", 0.0, 5.0))], [[], []]
    )
    assert clocks.iterations == 0 and clocks.step_mhz() is None and clocks.mhz("gemm") is None
    assert StepClocks().step_mhz() is None


def test_without_triton_or_cuda_the_pass_reads_no_clock() -> None:
    """On this CPU host: Triton is not installed, or the probe cannot run; either way no clock, and no error."""

    class _Workload:
        def zero_grads(self) -> None:
            pass

        def step(self) -> None:
            pass

    assert clock_pass(_Workload(), flusher=lambda: None, host_us=10.0, step_us=100.0) is None


def test_the_sampling_interval_covers_the_span_within_the_buffer() -> None:
    assert probe_every(10.0) == MIN_EVERY
    every = probe_every(20_000.0)  # a 20 ms step
    assert every * (MAX_SAMPLES - 1) >= 20_000.0 * 1980.0
    assert every > MIN_EVERY


def _with_clock(doc, mhz: float):  # type: ignore[no-untyped-def]
    for case in doc.cases:
        case.sm_clock_mhz = mhz
    return doc


def test_a_regression_that_came_with_a_lower_clock_says_so_and_still_fails() -> None:
    base = [_with_clock(d, 1760.0) for d in runs(3, seed=1)]
    cand = _with_clock(runs(1, seed=2, factor=1.05, prefix="cand")[0], 1650.0)
    c = compare(base, cand)
    f = next(f for f in c.findings if f.metric == "latency")
    assert f.status == "regressed" and c.verdict == "fail"
    assert f.detail is not None and "SM clock under load fell 6.2% (1,760 → 1,650 MHz)" in f.detail
    assert "runs longer at it" in f.detail


def test_a_clock_move_within_the_pass_own_spread_or_one_side_without_it_adds_nothing() -> None:
    base = [_with_clock(d, 1760.0) for d in runs(3, seed=1)]
    # 3.3% apart: as far as the clock pass's own readings of unchanged code lay on the H200
    for mhz in (1761.0, 1760.0 * (1 - 0.033)):
        same = _with_clock(runs(1, seed=2, factor=1.05, prefix="cand")[0], mhz)
        f = next(f for f in compare(base, same).findings if f.metric == "latency")
        assert "SM clock" not in (f.detail or "")
    unread = runs(1, seed=2, factor=1.05, prefix="cand")[0]
    f = next(f for f in compare(base, unread).findings if f.metric == "latency")
    assert "SM clock" not in (f.detail or "")


def test_a_kernel_clock_is_among_its_changes_only_when_it_moved_beyond_the_pass_own_spread() -> None:
    base = runs(1, seed=1)[0].cases[0].kernels
    cand = [k.model_copy(deep=True) for k in base]
    for k in cand:
        k.duration_us.median *= 1.2
    for k in base:
        k.sm_clock_mhz = 1800.0
    for clock, listed in ((1790.0, False), (1800.0 * (1 - CLOCK_MOVE) + 1.0, False), (1700.0, True)):
        for k in cand:
            k.sm_clock_mhz = clock
        moves = kernel_moves([base], cand, case_us=100.0)
        assert moves
        fields = {fc.field: fc for m in moves for fc in m.rates}
        assert ("sm_clock_mhz" in fields) is listed
        if listed:
            assert fields["sm_clock_mhz"].change == pytest.approx(1700 / 1800 - 1)


def test_on_the_h200_the_clock_pass_of_unchanged_code_stays_within_the_move_it_would_name() -> None:
    # Ten processes of one lease (bench/reports/data/h200-truth-2026-12-04 and -b), clocks unlocked: every timed case
    # has its clock under load, and one case's readings of unchanged code lie at most 3.3% apart, under CLOCK_MOVE.
    import statistics

    from attnprof.core.documents import load_result
    from tests.profiling_support import REPO

    data = REPO / "bench" / "reports" / "data"
    folders = [data / "h200-truth-2026-12-04", data / "h200-truth-2026-12-04-b"]
    apart = []
    for suite in ("llama7b", "validation"):
        docs = [load_result(f / f"run{i}" / f"{suite}.json.gz") for f in folders for i in range(1, 6)]
        for case in docs[0].cases:
            same = [d.case(case.id) for d in docs]
            if any(c is None or c.status != "ok" or c.latency_us is None for c in same):
                continue
            clocks = [c.sm_clock_mhz or 0.0 for c in same if c is not None]
            assert all(1500 < x < 2000 for x in clocks), case.id
            if statistics.median(c.latency_us.median for c in same if c is not None and c.latency_us) >= 100:
                apart.append(max(clocks) / min(clocks) - 1)
    assert len(apart) == 29
    assert 0.02 < max(apart) < CLOCK_MOVE


def test_the_comparison_page_shows_a_kernel_clock_and_marks_it_when_it_moved() -> None:
    from attnprof.server.web.pages.comparisons import KERNEL_FIELDS, _side_by_side

    base = runs(1, seed=1)[0].cases[0].kernels
    cand = [k.model_copy(deep=True) for k in base]
    for k in base:
        k.sm_clock_mhz = 1800.0
    for k in cand:
        k.duration_us.median *= 1.2
        k.sm_clock_mhz = 1700.0
    move = kernel_moves([base], cand, case_us=100.0)[0]
    column = [field for _, field, _ in KERNEL_FIELDS].index("sm_clock_mhz")
    text, changed = _side_by_side(move, cand[0], None)["cells"][column]
    assert changed and text == "1,800 MHz → 1,700 MHz"
    for k in cand:
        k.sm_clock_mhz = 1790.0  # within the pass's own spread: the candidate's, unmarked
    move = kernel_moves([base], cand, case_us=100.0)[0]
    assert _side_by_side(move, cand[0], None)["cells"][column] == ("1,790 MHz", False)
