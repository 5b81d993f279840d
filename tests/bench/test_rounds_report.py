"""A profile's rounds on the H200: the pure parts of `bench/h200_rounds_report.py` on synthetic input, and what it
reads from the committed data (`bench/reports/data/h200-rounds-2026-12-03`: sixteen processes of both suites with
do_bench beside them, and 42 processes with and without what a process keeps for its life drawn anew each round)."""

from __future__ import annotations

import pytest

from bench.h200_rounds_report import (
    ESTIMATORS,
    SHARED,
    Process,
    heavy,
    load_runs,
    load_variants,
    render,
    share_within,
    spread,
)
from tests.core.result_documents import make_case
from tests.profiling_support import REPO

DATA = REPO / "bench" / "reports" / "data" / "h200-rounds-2026-12-03"


def test_the_share_of_five_process_subsets_within_the_target() -> None:
    assert spread([99.0, 100.0, 101.0]) == pytest.approx(0.02)
    assert share_within([100.0] * 8) == 1.0
    # one process 1% off: only the fives without it (21 of the 56) are within 0.5%
    assert share_within([100.0] * 6 + [101.0, 100.2]) == pytest.approx(21 / 56)
    # six values 0.1% apart: only the two fives that drop an end span 0.4%
    assert share_within([100.0, 100.1, 100.2, 100.3, 100.4, 100.5], k=5, target=0.0045) == pytest.approx(2 / 6)


def test_heavy_cases_are_those_of_a_hundred_microseconds_in_every_process() -> None:
    def proc(name: str, **us: float) -> Process:
        return Process(name, {k: make_case(k, median_us=v, n=30) for k, v in us.items()}, {})

    processes = [proc("p1", a=150.0, b=40.0, c=120.0), proc("p2", a=150.0, b=40.0)]
    assert heavy(processes) == ["a"]


def test_the_committed_data_holds_what_the_report_says() -> None:
    commands = {name: load_runs(DATA / name) for name in ("a", "b")}
    assert [len(ps) for ps in commands.values()] == [8, 8]
    assert all(len(heavy(ps)) == 29 for ps in commands.values())
    variants = load_variants(DATA / "persist")
    assert {k: len(v) for k, v in variants.items()} == {"persist": 21, "reuse": 21}
    assert all(set(SHARED) <= set(p.cases) for ps in variants.values() for p in ps)
    # every estimator reads every heavy case of every process (the round counts are all there)
    for estimator in ESTIMATORS.values():
        assert all(estimator(p.cases[i]) > 0 for ps in commands.values() for p in ps for i in heavy(ps))


def test_the_report_regenerates_from_its_data() -> None:
    text, commands = render(DATA, "h200-rounds.png")
    assert text == (REPO / "bench" / "reports" / "h200-rounds.md").read_text()
    assert "| a | 23/29 |" in text and "| b | 25/29 |" in text
    assert sum(len(ps) for ps in commands.values()) == 16
