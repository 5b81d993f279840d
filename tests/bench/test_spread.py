"""Whether a kernel's level across processes follows the SM clock over all of it: the pure parts of
`bench/h200_spread.py` on synthetic traces, and what `bench/h200_truth_report.py` reads from the committed H200 data
(`bench/reports/data/h200-spread-2026-12-03`: five processes with a probe spanning each step, ncu's application
replay, and five processes of the profiler with its clock pass)."""

from __future__ import annotations

import statistics

import pytest

from attnprof.core.analysis.kernels import CLOCK_MOVE
from attnprof.core.documents import parse_result
from bench.h200_spread import align, clock_over, correlation, kernel_levels, split_iterations, spread
from bench.h200_truth_report import (
    _json,
    _nvml_range,
    clock_pairs_apart,
    profiler_clock_runs,
    replay_pairs,
    whole_case_counts,
    whole_kernel_rows,
)
from tests.profiling_support import REPO

SPREAD = REPO / "bench" / "reports" / "data" / "h200-spread-2026-12-03"
LATER = REPO / "bench" / "reports" / "data" / "h200-clock-2026-12-02"
SPIN = "at::cuda::(anonymous namespace)::spin_kernel(long)"


def _e(name: str, start: float, dur: float) -> tuple:
    return (name, (1, 1, 1), (128, 1, 1), start, dur)


def test_the_probe_starts_with_the_hold_and_belongs_to_the_iteration_its_next_marker_opens() -> None:
    flush = _e("reduce_kernel<amax>", 42, 60)
    events = [
        _e("span_probe", 1, 300),
        _e(SPIN, 1.5, 40),  # the hold: longer than a marker, dropped
        flush,
        _e(SPIN, 103, 1),
        _e("gemm", 104, 80),
        _e(SPIN, 185, 1),
        _e(SPIN, 300, 40),  # the next iteration's hold, without a probe (the plain context)
        _e(SPIN, 341, 1),
        _e("gemm", 342, 80),
        _e(SPIN, 423, 1),
    ]
    got = split_iterations(events, {flush[:3]})
    assert [[k[0] for k in ks] for ks, _ in got] == [["gemm"], ["gemm"]]
    assert [p[3] if p else None for _, p in got] == [1, None]


def test_the_clock_over_a_kernel_and_the_alignment_residual() -> None:
    series = [(1_000_000 + i * 1000, 5000 + i * 1800) for i in range(101)]  # 1,800 MHz for 100 µs
    offset, residual = align(_e("span_probe", 10.0, 100.5), series)
    assert residual == pytest.approx(0.5)
    assert clock_over(series, offset, 30.0, 50.0) == pytest.approx(1800.0)
    assert clock_over(series, offset, 100.0, 50.0) is None  # past the probe's last sample


def test_a_kernel_across_processes_gives_its_levels_only_where_every_process_covered_it() -> None:
    def proc(us: float, mhz: float | None) -> dict:
        k = {"index": 2, "us": {"plain": [us, us], "span": [us, us]}, "mhz": [mhz, mhz]}
        return {"cases": {"c": {"kernels": [k]}}}

    got = kernel_levels([proc(100.0, 1800.0), proc(101.0, 1782.0)], "c", 2)
    assert got is not None
    assert got["cycles"] == pytest.approx([180_000.0, 101.0 * 1782.0])
    assert kernel_levels([proc(100.0, 1800.0), proc(101.0, None)], "c", 2) is None
    assert kernel_levels([proc(100.0, 1800.0)], "c", 3) is None
    assert spread([99.0, 100.0, 101.0]) == pytest.approx(2.0)
    assert correlation([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert correlation([1.0, 1.0, 1.0], [3.0, 2.0, 1.0]) is None


def test_on_the_h200_some_kernels_that_spread_follow_the_clock_they_ran_at_and_nvml_does_not_see_it() -> None:
    rows = whole_kernel_rows(SPREAD)
    assert len(rows) >= 50
    # the clock under the kernels sits well under what NVML read at the blocks' edges
    _temps, nvml = _nvml_range(SPREAD)
    assert statistics.median(r.mhz for r in rows) < min(nvml) - 50
    # with the probe beside them, most kernels that spread follow their clock; without it, some do
    wide = [r for r in rows if r.span >= 0.005]
    assert 2 * sum(1 for r in wide if r.follows) > len(wide)
    wide_plain = [r for r in rows if r.plain >= 0.005]
    assert 0 < sum(1 for r in wide_plain if r.follows_plain) < len(wide_plain)
    # the probe leaves the median kernel where it was
    assert abs(statistics.median(r.probe_cost for r in rows)) < 0.01
    counts = whole_case_counts(SPREAD)
    assert counts["cases"] >= 25
    # in cycles, the steps traced with the probe land closer together than in µs with it
    assert counts["cycles"] > counts["span"]


def test_ncu_application_replay_reads_as_its_kernel_replay() -> None:
    pairs = replay_pairs(SPREAD, LATER)
    ratios = [app / kern - 1 for kern, app in pairs.values() if kern >= 10.0]
    assert len(ratios) >= 100
    assert abs(statistics.median(ratios)) < 0.01


def test_the_profiler_read_every_case_clock_on_the_h200_and_its_own_spread_is_under_the_comparison_threshold() -> None:
    runs = profiler_clock_runs(SPREAD)
    assert len(runs) >= 25
    for _case, _med, clocks in runs:
        assert all(1500 < c < 2000 for c in clocks)
        for i, c in enumerate(clocks):
            others = clocks[:i] + clocks[i + 1 :]
            assert abs(c / statistics.median(others) - 1) < CLOCK_MOVE
    assert clock_pairs_apart(runs) < CLOCK_MOVE
    doc = parse_result(_json(SPREAD / "runs" / "run1" / "validation.json.gz"))
    timed = [c for c in doc.cases if c.status == "ok"]
    assert timed and all(c.sm_clock_mhz and any(k.sm_clock_mhz for k in c.kernels) for c in timed)


def test_the_final_clock_pass_read_every_timed_case_on_the_h200() -> None:
    doc = parse_result(_json(SPREAD / "check" / "validation.json.gz"))
    timed = [c for c in doc.cases if c.status == "ok"]
    assert len(timed) >= 15
    for c in timed:
        assert c.sm_clock_mhz and 1500 < c.sm_clock_mhz < 2100
        assert any(k.sm_clock_mhz for k in c.kernels)
