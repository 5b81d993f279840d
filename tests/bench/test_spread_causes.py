"""What moves a case's level between processes: the pure parts of `bench/h200_spread_causes_report.py` on
synthetic input, and what it reads from the committed H200 data (`bench/reports/data/h200-spread-causes-2026-12-03`:
the validation set profiled hot, settled and cold; rounds of one workload against rebuilt ones; and the profiler
with each round's memory drawn afresh against rounds reusing it)."""

from __future__ import annotations

import json

import pytest

from bench.h200_spread_causes_report import (
    TWO_LEVEL_CASE,
    Process,
    case_spreads,
    common_offsets,
    during,
    heavy_cases,
    load_processes,
    low_level_share,
    permutation_p,
    read_nvml,
    render,
    same_address_pairs,
    share_of_fives_within,
    spread,
    stratified_p,
    truth_run_starts,
)
from tests.profiling_support import REPO

DATA = REPO / "bench" / "reports" / "data" / "h200-spread-causes-2026-12-03"


def _p(name: str, medians: dict[str, float]) -> Process:
    return Process(name, name.split("-")[0], "gpu", name, medians, {}, {})


def test_a_level_the_cases_share_is_divided_out_and_their_own_spread_is_left() -> None:
    # process b runs every case 1% slow; case "y" also moves on its own, 2% in process c
    procs = [
        _p("x-a", {"x": 100.0, "y": 200.0, "z": 300.0}),
        _p("x-b", {"x": 101.0, "y": 202.0, "z": 303.0}),
        _p("x-c", {"x": 100.0, "y": 204.0, "z": 300.0}),
    ]
    offsets = common_offsets(procs, ["x", "y", "z"])
    assert offsets == pytest.approx({"x-a": 0.0, "x-b": 1.0, "x-c": 0.0})
    raw = case_spreads(procs, ["x", "y", "z"])
    residual = case_spreads(procs, ["x", "y", "z"], offsets)
    assert raw[0] == pytest.approx(1.0) and residual[0] == pytest.approx(0.0, abs=1e-9)
    assert residual[1] == pytest.approx(2.0)


def test_heavy_cases_need_every_process_and_100_us() -> None:
    procs = [_p("a-1", {"big": 150.0, "small": 50.0, "half": 300.0}), _p("a-2", {"big": 151.0, "small": 51.0})]
    assert heavy_cases(procs) == ["big"]


def test_five_process_subsets() -> None:
    assert share_of_fives_within([100.0, 100.1, 100.2, 100.3, 100.4, 100.0]) == 1.0
    # one far process: only the subset without it is within 0.5%
    assert share_of_fives_within([100.0, 100.1, 100.2, 100.3, 100.4, 102.0]) == pytest.approx(1 / 6)


def test_same_address_pairs_only_compare_identical_allocations() -> None:
    rounds = [
        {"us": 207.6, "built": [[1, 2]], "step": [[10, 8]]},
        {"us": 215.5, "built": [[1, 2]], "step": [[10, 8]]},
        {"us": 230.0, "built": [[1, 2]], "step": [[12, 8]]},
        {"us": 190.0, "built": [[3, 2]], "step": [[10, 8]]},
    ]
    assert same_address_pairs(rounds) == (207.6, 215.5)
    assert same_address_pairs(rounds[2:]) is None


def test_the_permutation_test_counts_the_splits_as_extreme_as_the_observed_one() -> None:
    # one far value in the second group: every split that puts it second is as extreme (10 of the 20)
    assert permutation_p([1.0, 1.0, 1.0], [1.0, 1.0, 5.0]) == pytest.approx(0.5)
    assert permutation_p([1.0, 1.0, 5.0], [1.0, 1.0, 1.0]) == pytest.approx(1.0)


def test_the_stratified_test_shuffles_conditions_within_each_lease_only() -> None:
    offsets = {"a": {"h1": -1.0, "x": 0.0, "y": 1.0}, "b": {"h2": -1.0, "z": 0.0}}
    # 3 x 2 relabellings; only the observed one puts both lowest processes among the hot
    assert stratified_p(offsets, {"a": {"h1"}, "b": {"h2"}}) == pytest.approx(1 / 6)
    assert stratified_p(offsets, {"a": {"y"}, "b": {"z"}}) == pytest.approx(1.0)


def test_the_truth_runs_started_warm_and_sometimes_capped() -> None:
    temps, capped, runs = truth_run_starts()
    assert runs == 5 and capped == 2 and (min(temps), max(temps)) == (45.0, 52.0)


def test_a_hot_start_reads_a_little_faster_on_the_committed_h200_data() -> None:
    offsets_by_lease: dict[str, dict[str, float]] = {}
    hot_by_lease: dict[str, set[str]] = {}
    for lease in sorted((DATA / "settle").iterdir()):
        procs = load_processes(lease)
        assert {p.condition for p in procs} == {"hot", "settled", "cold"}
        assert len({p.gpu for p in procs}) == 1
        nvml = read_nvml(lease)
        for p in procs:
            seen = during(nvml, p.times)
            assert seen is not None
            # hot processes start power-capped, for under a second; settled and cold ones never are
            assert (seen["capped_until_s"] > 0) == (p.condition == "hot"), p.name
            assert seen["capped_until_s"] < 1.0
            if p.condition == "settled":
                assert p.times["settle"]["settled"] and p.times["settle"]["waited_s"] < 60
        offsets = common_offsets(procs, heavy_cases(procs))
        offsets_by_lease[lease.name] = offsets
        hot_by_lease[lease.name] = {p.name for p in procs if p.condition == "hot"}
        hot = [offsets[p.name] for p in procs if p.condition == "hot"]
        rest = [offsets[p.name] for p in procs if p.condition != "hot"]
        # low, but by a tenth of a per cent or so: within 0.1% of what the settled and cold starts span
        assert max(hot) <= max(rest) and min(hot) >= min(rest) - 0.1
    assert stratified_p(offsets_by_lease, hot_by_lease) < 0.05


def test_placement_moves_the_two_level_kernel_and_rounds_already_land_apart() -> None:
    five = json.loads((DATA / "workspace" / "five-cases.json").read_text())
    hd256 = five["validation/hd256[backend=efficient]"]
    rebuilt = [r["us"] for r in hd256["rebuilt"]]
    assert spread(rebuilt) > 5 * spread(hd256["same"])
    pair = same_address_pairs(hd256["rebuilt"])
    assert pair is not None, "no two rounds allocated at the same addresses"
    assert (pair[1] - pair[0]) / pair[0] > 0.03  # the same virtual addresses, allocated again, 4% apart
    # a profile run's rounds, tensors from the allocator's cache, already sample both levels in most processes
    reuse = [p for p in load_processes(DATA / "redraw") if p.condition == "reuse"]
    assert len(reuse) == 6
    assert sum(1 for p in reuse if 0.05 <= low_level_share(p.samples[TWO_LEVEL_CASE]) <= 0.95) >= 5


def test_the_report_regenerates_from_its_data() -> None:
    text, merged = render(DATA, "h200-spread-causes.png")
    committed = (REPO / "bench" / "reports" / "h200-spread-causes.md").read_text()
    assert text == committed
    assert len(merged) == 35
