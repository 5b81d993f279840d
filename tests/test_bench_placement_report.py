"""Two remedies for the spread between processes: the pure parts of `bench/h200_placement_report.py` on synthetic
processes, and what it reads from the committed data (`bench/reports/data/h200-placement-2026-12-03`)."""

from __future__ import annotations

import json
import random

import pytest

from bench.h200_placement_report import drawn_share, load_both, pooled_value, render, sd_ratio_p
from bench.h200_rounds_report import Process, heavy
from profiler_core.documents import load_result
from tests.profiling_support import REPO
from tests.test_analysis_fixtures import make_case

DATA = REPO / "bench" / "reports" / "data" / "h200-placement-2026-12-03"
WORKSPACE = REPO / "bench" / "reports" / "data" / "h200-spread-causes-2026-12-03" / "workspace"
RUNS = REPO / "bench" / "reports" / "data" / "h200-rounds-2026-12-03"


def _rounds_process(name: str, rounds: list[float], per_round: int = 5) -> Process:
    """A process whose one case ``c`` took ``per_round`` samples at each of ``rounds``' values, in that order."""
    samples = [v for v in rounds for _ in range(per_round)]
    case = make_case("c", samples=samples)
    assert case.latency_us is not None
    latency = case.latency_us.model_copy(update={"round_samples": [per_round] * len(rounds)})
    return Process(name, {"c": case.model_copy(update={"latency_us": latency})}, {})


def _levels(name: str, case_ids: list[str], offsets: list[float]) -> Process:
    return Process(
        name, {i: make_case(i, median_us=100.0 * (1.0 + o), n=30) for i, o in zip(case_ids, offsets, strict=True)}, {}
    )


def test_one_placement_everywhere_is_always_within_and_two_far_apart_levels_drawn_once_are_not() -> None:
    rng = random.Random(0)
    assert drawn_share([100.0] * 12, 10, rng, trials=200) == 1.0
    # two levels 3% apart, one draw per process: five processes rarely all land on the same one
    assert drawn_share([100.0, 103.0], 1, rng, trials=400) < 0.15
    # the more rounds a process draws, the closer the processes' medians
    spread_out = [100.0, 100.4, 100.8, 101.2]
    assert drawn_share(spread_out, 20, rng, trials=400) > drawn_share(spread_out, 2, rng, trials=400)


def test_a_pooled_run_takes_its_share_of_rounds_from_each_process() -> None:
    a = _rounds_process("a", [100.0] * 5 + [200.0] * 5)
    b = _rounds_process("b", [110.0] * 5 + [300.0] * 5)
    # one process: all ten rounds; two: the first five of each
    assert pooled_value([a], "c") == pytest.approx(150.0)
    assert pooled_value([a, b], "c") == pytest.approx(105.0)


def test_the_spread_ratio_reads_a_wider_group_and_ignores_a_shift_in_level() -> None:
    ids = ["x", "y", "z"]
    offsets = [-0.004, 0.004, -0.003, 0.003, 0.0, -0.002, 0.002, 0.001, -0.001, 0.0025]
    narrow = [_levels(f"n{k}", ids, [o / 4, -o / 4, o / 4]) for k, o in enumerate(offsets)]
    wide = [_levels(f"w{k}", ids, [o, -o, o]) for k, o in enumerate(offsets[::-1])]
    ratio, _, p = sd_ratio_p(narrow, wide, ids, permutations=2000)
    assert ratio == pytest.approx(4.0, rel=0.05) and p < 0.01
    assert sd_ratio_p(wide, narrow, ids, permutations=2000)[0] == pytest.approx(0.25, rel=0.05)
    # the same spread about another level is no wider
    shifted = [_levels(f"s{k}", ids, [0.02 + o / 4, 0.02 - o / 4, 0.02 + o / 4]) for k, o in enumerate(offsets)]
    ratio, _, p = sd_ratio_p(narrow, shifted, ids, permutations=2000)
    assert ratio == pytest.approx(1.0, rel=0.05) and p > 0.5


def test_both_suites_are_read_into_one_process_each_on_one_gpu() -> None:
    variants = load_both(DATA)
    assert {k: len(v) for k, v in variants.items()} == {"shuffle20": 13, "reuse": 13}
    for processes in variants.values():
        assert all(len(p.cases) == 45 for p in processes)
        assert {i.split("/")[0] for p in processes for i in p.cases} == {"llama7b", "validation"}
    assert len(heavy(variants["reuse"])) == 29
    gpu = json.loads((DATA / "provenance.json").read_text())["leases"]["placement"]["gpu"].removeprefix("GPU-")
    assert {load_result(f).environment.device.uuid for f in DATA.glob("*/*.json.gz")} == {gpu}
    rounds = {load_result(f).cases[0].latency_us.round_samples is not None for f in DATA.glob("*/*.json.gz")}  # type: ignore[union-attr]
    assert rounds == {True}


def test_the_report_regenerates_from_its_data() -> None:
    text, _, _ = render(DATA, WORKSPACE, RUNS, "h200-placement.png")
    assert text == (REPO / "bench" / "reports" / "h200-placement.md").read_text()
    assert "| reuse | 13 | 24/29 |" in text and "| shuffle20 | 13 | 17/29 |" in text
