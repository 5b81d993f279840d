"""Two remedies for the spread between processes: the pure parts of `bench/h200_placement_report.py` on synthetic
processes, and what it reads from the committed data (`bench/reports/data/h200-placement-2026-12-03`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from attnprof.core.documents import load_result
from bench.h200_placement_report import (
    drawn_share,
    load_both,
    pooled_runs,
    pooled_shares,
    pooled_value,
    prediction_section,
    process_start_s,
    render,
    sd_ratio_ci,
    sd_ratio_p,
)
from bench.h200_rounds_report import Process, heavy
from tests.core.result_documents import make_case
from tests.profiling_support import REPO

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


def test_a_pooled_run_takes_its_share_of_rounds_from_each_process_and_the_median_of_their_samples() -> None:
    a = _rounds_process("a", [100.0] * 4 + [200.0] * 6)
    b = _rounds_process("b", [110.0] * 5 + [300.0] * 5)
    c = _rounds_process("c", [120.0] * 3 + [400.0] * 7)
    # one process: all its samples; two: the first five rounds of each; three: the first three of each
    assert pooled_value([a], "c") == pytest.approx(200.0)
    assert pooled_value([a, b], "c") == pytest.approx(110.0)
    assert pooled_value([a, b, c], "c") == pytest.approx(110.0)
    assert pooled_value([b, c, a], "c") == pytest.approx(110.0)


def test_pooled_runs_stay_within_a_command_and_pooling_averages_a_level_that_alternates() -> None:
    first = [_rounds_process(f"a{k}", [100.0 + (k % 2)] * 10) for k in range(6)]
    second = [_rounds_process(f"b{k}", [100.0 + (k % 2)] * 10) for k in range(5)]
    runs = pooled_runs([first, second], 2)
    assert [[p.name for p in r] for r in runs] == [["a0", "a1"], ["a2", "a3"], ["a4", "a5"], ["b0", "b1"], ["b2", "b3"]]
    # one process per run: 1% apart, five runs all on one level only when all five are; two: every run at ~100.5
    single = pooled_shares([first, second], ["c"], 1)["c"]
    assert 0.0 < single < 0.1
    assert pooled_shares([first, second], ["c"], 2)["c"] == 1.0


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
    # a little wider and 2% off: the shift does not make the small ratio significant (each group is taken about
    # its own median; pooled raw, every shuffle would mix the two levels and the test would read p < 0.001)
    base = [_levels(f"b{k}", ids, [o, -o, o]) for k, o in enumerate(offsets)]
    off = [_levels(f"o{k}", ids, [0.02 + 1.3 * o, 0.02 - 1.3 * o, 0.02 + 1.3 * o]) for k, o in enumerate(offsets[::-1])]
    ratio, _, p = sd_ratio_p(base, off, ids, permutations=2000)
    assert ratio == pytest.approx(1.3, rel=0.05) and p > 0.1
    low, high = sd_ratio_ci(base, off, ids, resamples=500)
    assert low < 1.0 < 1.3 < high
    low, high = sd_ratio_ci(narrow, wide, ids, resamples=500)
    assert 1.0 < low < 4.0 < high


def test_a_case_in_two_workspace_files_is_predicted_from_both(tmp_path: Path) -> None:
    narrow = {"rebuilt": [{"us": 200.0 + 0.01 * k} for k in range(12)]}
    wide = {"rebuilt": [{"us": 206.0} for _ in range(12)]}  # another level: half the pooled draws sit on it
    (tmp_path / "a.json").write_text(json.dumps({"s/x": narrow, "s/short": {"rebuilt": [{"us": 50.0}] * 3}}))
    (tmp_path / "b.json").write_text(json.dumps({"s/x": wide}))
    lines, predicted = prediction_section(tmp_path)
    assert list(predicted) == ["s/x"]  # under 100 us: left out
    assert predicted["s/x"] < 0.5  # the second file's draws count, not only the first's (alone: every five within)
    assert "| s/x | a, b | " in "\n".join(lines) and "| 24 |" in "\n".join(lines)


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


def test_a_process_start_is_the_gap_between_ends_less_what_was_profiled() -> None:
    # each process profiled about 30-50 s and ended 40-60 s after the one before it
    assert 2.0 < process_start_s(DATA) < 20.0


def test_the_report_regenerates_from_its_data() -> None:
    text, _, _ = render(DATA, WORKSPACE, RUNS, "h200-placement.png")
    assert text == (REPO / "bench" / "reports" / "h200-placement.md").read_text()
    assert "| reuse | 13 | 22.4/29 | 24/29 |" in text and "| shuffle20 | 13 | 19.8/29 | 17/29 |" in text
    assert "| 2 | 8 | 56 | 24.5/29 |" in text
