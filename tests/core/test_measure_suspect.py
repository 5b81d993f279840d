"""Suspicion: a case timed while its clocks fell is marked; only run-wide causes mark a whole run."""

from __future__ import annotations

from pathlib import Path

from attnprof.core.documents import GpuHealth, load_result
from attnprof.core.measure.environment import mark_clock_drops, suspect_reasons

DATA = Path(__file__).resolve().parents[2] / "bench" / "reports" / "data" / "h200-2026-11-29" / "set-a"


def test_power_capped_block_case_is_marked_on_real_h200_runs() -> None:
    # Runs 1 and 2 of set a timed the block case at 1,860 MHz (top 1,980): it read 6% slow there.
    for name, expected in (("run1.json.gz", ["block"]), ("run2.json.gz", ["block"]), ("run3.json.gz", [])):
        doc = load_result(DATA / name)
        top = doc.environment.health_start.max_sm_clock_mhz if doc.environment.health_start else None
        assert top == 1980
        assert mark_clock_drops(doc.cases, top) == []
        assert [c.id for c in doc.cases if c.suspect] == expected
        for c in doc.cases:
            if c.suspect:
                assert "1860 MHz" in c.suspect[0] and "capping" in c.suspect[0]


def test_run_is_suspect_when_most_cases_lost_their_clock() -> None:
    doc = load_result(DATA / "run3.json.gz")
    timed = [c for c in doc.cases if c.latency_us]
    for c in timed[: len(timed) // 2 + 1]:
        assert c.latency_us is not None
        c.latency_us.sm_clock_mhz_min = 1500.0
    reasons = mark_clock_drops(doc.cases, 1980.0)
    assert len(reasons) == 1 and f"in {len(timed) // 2 + 1} of {len(timed)} cases" in reasons[0]


def test_unknown_reference_clock_marks_nothing() -> None:
    doc = load_result(DATA / "run1.json.gz")
    assert mark_clock_drops(doc.cases, None) == []
    assert not any(c.suspect for c in doc.cases)


def test_power_cap_alone_is_not_suspect_but_thermal_slowdown_and_other_processes_are() -> None:
    capped = GpuHealth(throttle_reasons=["sw_power_cap"], other_processes=0)
    assert suspect_reasons(capped, capped) == []
    hot = GpuHealth(throttle_reasons=["sw_power_cap", "hw_thermal_slowdown"], other_processes=2)
    reasons = suspect_reasons(None, hot)
    assert reasons == ["throttling at end: hw_thermal_slowdown", "2 other process(es) on the GPU at end"]
