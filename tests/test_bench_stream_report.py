"""The level a process shares against the stream and the host's CPUs: the pure parts of
`bench/h200_stream_report.py` on synthetic processes, and what it reads from the committed data
(`bench/reports/data/h200-stream-2026-12-03`)."""

from __future__ import annotations

import json

import pytest

from bench.h200_rounds_report import SHARED, Process, heavy, load_runs, load_variants
from bench.h200_stream_report import (
    changed,
    mean_gap_p,
    one_stream_section,
    render,
    shared_levels,
    shared_sd,
    variance_ratio_p,
)
from profiler_core.documents import load_result
from tests.profiling_support import REPO
from tests.test_analysis_fixtures import make_case

DATA = REPO / "bench" / "reports" / "data" / "h200-stream-2026-12-03"
BEFORE = REPO / "bench" / "reports" / "data" / "h200-rounds-2026-12-03"


def _process(name: str, level: float, jitter: float = 0.0) -> Process:
    """A process whose SHARED cases sit ``level`` (relative) off 100 µs, spread around it by ``jitter``."""
    cases = {i: make_case(i, median_us=100.0 * (1.0 + level + jitter * (k - 1.5)), n=30) for k, i in enumerate(SHARED)}
    return Process(name, cases, {})


def test_a_shared_level_is_read_as_the_median_offset_of_the_shared_cases() -> None:
    processes = [_process(f"p{k}", level, jitter=0.001) for k, level in enumerate([-0.004, 0.0, 0.004])]
    levels = shared_levels(processes)
    assert levels == pytest.approx([-0.004, 0.0, 0.004], abs=2e-4)
    assert shared_sd(processes) == pytest.approx(0.004, rel=0.05)


def test_the_variance_test_tells_a_narrower_spread_and_ignores_a_difference_in_level() -> None:
    wide = [-0.004, 0.004, -0.003, 0.003, -0.0035, 0.0035, 0.0, -0.002, 0.002, 0.001, -0.001, 0.0025]
    narrow = [x / 6 for x in wide]
    hits, p = variance_ratio_p(wide, narrow)
    assert p < 0.01 and hits < 100
    # a shift between the groups is not spread: the narrow group moved by 1% gives the very same answer
    assert variance_ratio_p(wide, [x + 0.01 for x in narrow]) == (hits, p)
    # nor with the same spread about another level
    shifted = [x + 0.02 for x in wide[::-1]]
    assert variance_ratio_p(wide, shifted)[1] > 0.2
    # narrower the other way round: no evidence that the second varies less
    assert variance_ratio_p(narrow, wide)[1] > 0.9


def test_a_gap_in_means_is_tested_both_ways() -> None:
    a = [-0.002, 0.001, 0.0, 0.002, -0.001, 0.0015]
    gap, p = mean_gap_p(a, [x + 0.01 for x in a])
    assert gap == pytest.approx(0.01) and p < 0.01
    assert mean_gap_p(a, [x - 0.01 for x in a])[1] == p
    assert mean_gap_p(a, a[::-1])[1] > 0.9


def test_section_4_says_narrowed_only_when_the_test_does_and_names_a_shift_only_when_it_is_one() -> None:
    wide = [-0.004, 0.004, -0.003, 0.003, -0.0035, 0.0035, 0.0, -0.002, 0.002, 0.001, -0.001, 0.0025]
    reuse = [_process(f"r{k}", x, jitter=0.0002) for k, x in enumerate(wide)]
    narrow = [_process(f"n{k}", x / 6, jitter=0.0002) for k, x in enumerate(wide[::-1])]
    stream = [x / 8 for x in wide]
    text = "\n".join(one_stream_section({"reuse": reuse, "one-stream": narrow}, stream))
    assert "One non-default stream for the whole process narrowed the shared level." in text
    assert "no shift is shown" in text
    same = [_process(f"s{k}", x, jitter=0.0002) for k, x in enumerate(wide[::-1])]
    text = "\n".join(one_stream_section({"reuse": reuse, "one-stream": same}, stream))
    assert "was not shown to narrow it" in text and "is narrower than `one-stream`'s" in text
    slow = [_process(f"f{k}", 0.01 + x / 6, jitter=0.0002) for k, x in enumerate(wide[::-1])]
    text = "\n".join(one_stream_section({"reuse": reuse, "one-stream": slow}, stream))
    assert "no shift is shown" not in text and "narrowed the shared level" in text


def test_cases_that_changed_are_those_that_moved_more_than_the_margin() -> None:
    old = {"a": 1.0, "b": 0.1, "c": 0.5, "d": 0.9}
    new = {"a": 0.2, "b": 0.9, "c": 0.6, "d": 0.5}
    assert changed(old, new) == (["b"], ["a", "d"])
    assert changed(old, old) == ([], [])


def test_processes_are_read_by_whole_label_in_the_order_they_ran() -> None:
    found = load_variants(DATA / "pin")
    assert {k: len(v) for k, v in found.items()} == {"pin-lo": 9, "pin-hi": 9, "reuse": 9}
    assert all(p.name.startswith(f"{label}-") for label, ps in found.items() for p in ps)
    for ps in found.values():
        started = [load_result(DATA / "pin" / f"{p.name}.json.gz").run.created_at for p in ps]
        assert started == sorted(started)


def test_the_committed_data_holds_what_the_report_says() -> None:
    leases = json.loads((DATA / "provenance.json").read_text())["leases"]
    first, second, third = (leases[k]["gpu"].removeprefix("GPU-") for k in ("pin, stream", "runs", "one-stream"))
    for folder in ("pin", "stream"):
        assert {load_result(f).environment.device.uuid for f in (DATA / folder).glob("*.json.gz")} == {first}
    variants = load_variants(DATA / "stream")
    assert {k: len(v) for k, v in variants.items()} == {"stream": 13, "reuse": 13}
    assert all(set(SHARED) <= set(p.cases) for ps in variants.values() for p in ps)
    runs = load_runs(DATA / "runs")
    assert len(runs) == 9 and len(heavy(runs)) == 29
    assert {d.environment.device.uuid for p in runs for d in p.documents} == {second}
    assert {load_result(f).environment.device.uuid for f in (DATA / "one-stream").glob("*.json.gz")} == {third}
    one = load_variants(DATA / "one-stream")
    assert {k: len(v) for k, v in one.items()} == {"one-stream": 6, "reuse": 6}
    assert all(set(SHARED) <= set(p.cases) for ps in one.values() for p in ps)


def test_the_report_regenerates_from_its_data() -> None:
    text, variants = render(DATA, BEFORE, "h200-stream.png")
    assert text == (REPO / "bench" / "reports" / "h200-stream.md").read_text()
    assert "| stream per round (785d8bc) | 9 | 19/29 |" in text
    assert "## 4. One non-default stream for the whole process" in text and "p = 0.234" in text
    assert shared_sd(variants["reuse"]) > 3 * shared_sd(variants["stream"])
