"""What moves a case's level between processes: the pure parts of `bench/h200_spread_causes_report.py` on
synthetic input, and what it reads from the committed H200 data (`bench/reports/data/h200-spread-causes-2026-12-03`:
the validation set profiled hot, settled and cold; rounds of one workload against rebuilt ones; and the profiler
with each round's memory drawn afresh against rounds reusing it)."""

from __future__ import annotations

import json
import statistics

import pytest

from bench.h200_spread_causes_report import (
    Process,
    case_spreads,
    common_offsets,
    heavy_cases,
    load_processes,
    read_nvml,
    render,
    same_address_pairs,
    share_of_fives_within,
    spread,
)
from tests.profiling_support import REPO

DATA = REPO / "bench" / "reports" / "data" / "h200-spread-causes-2026-12-03"


def _p(name: str, medians: dict[str, float]) -> Process:
    return Process(name, name.split("-")[0], "gpu", name, medians, {})


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


def test_the_start_state_does_not_set_the_level_on_the_committed_h200_data() -> None:
    for lease in sorted((DATA / "settle").iterdir()):
        procs = load_processes(lease)
        assert {p.condition for p in procs} == {"hot", "settled", "cold"}
        assert len({p.gpu for p in procs}) == 1
        nvml = read_nvml(lease)
        assert len(nvml) > 1000
        for p in procs:
            inside = [r for r in nvml if p.times["profile_start"] <= r[0] <= p.times["profile_end"]]
            capped = sum(1 for r in inside if r[4] & 0x4)
            # hot processes start power-capped; settled and cold ones never are
            assert (capped > 0) == (p.condition == "hot"), p.name
            if p.condition == "settled":
                assert p.times["settle"]["settled"] and p.times["settle"]["waited_s"] < 60
        cases = heavy_cases(procs)
        median_spread = {
            c: statistics.median(case_spreads([p for p in procs if p.condition == c], cases))
            for c in ("hot", "settled", "cold")
        }
        assert median_spread["hot"] <= max(median_spread["settled"], median_spread["cold"])


def test_placement_moves_the_two_level_kernel_and_the_fresh_draw_narrows_it() -> None:
    five = json.loads((DATA / "workspace" / "five-cases.json").read_text())
    hd256 = five["validation/hd256[backend=efficient]"]
    rebuilt = [r["us"] for r in hd256["rebuilt"]]
    assert spread(rebuilt) > 5 * spread(hd256["same"])
    low, high = same_address_pairs(hd256["rebuilt"]) or (0.0, 0.0)
    assert (high - low) / low > 0.03  # the same virtual addresses, allocated again, 4% apart
    redraw = load_processes(DATA / "redraw")
    case = "hd256[backend=efficient]"
    fresh = [p.medians[case] for p in redraw if p.condition == "redraw"]
    reused = [p.medians[case] for p in redraw if p.condition == "reuse"]
    assert len(fresh) == len(reused) == 6
    assert spread(reused) > 2 * spread(fresh)


def test_the_report_regenerates_from_its_data() -> None:
    text, merged = render(DATA, "h200-spread-causes.png")
    committed = (REPO / "bench" / "reports" / "h200-spread-causes.md").read_text()
    assert text == committed
    assert len(merged) == 35
