"""The rule for taking up a way of timing (`bench/h200_adopt.py`): on synthetic processes each way, on the committed
placement data (whose report states the same measures), and its refusals."""

from __future__ import annotations

import sys

import pytest

from bench.h200_adopt import decide, main, render
from bench.h200_rounds_report import Process
from tests.profiling_support import REPO
from tests.test_analysis_fixtures import make_case

PLACEMENT = REPO / "bench" / "reports" / "data" / "h200-placement-2026-12-03"
CASES = ("a", "b", "c", "d")
OFFSETS = [-0.004, 0.004, -0.003, 0.003, -0.002, 0.002, -0.001, 0.001, 0.0, 0.0025]


def _group(prefix: str, scale: float, shift: int = 0) -> list[Process]:
    """Ten processes whose cases (200 µs and more) sit at OFFSETS times ``scale``, each case its own order."""
    out = []
    for k in range(len(OFFSETS)):
        cases = {
            c: make_case(c, median_us=200.0 * (1 + j) * (1 + scale * OFFSETS[(k + shift + 3 * j) % len(OFFSETS)]), n=30)
            for j, c in enumerate(CASES)
        }
        out.append(Process(f"{prefix}-{k}", cases, {}))
    return out


def test_a_candidate_narrower_on_every_case_is_taken_up() -> None:
    d = decide(_group("keep", 1.0), _group("cand", 0.25, shift=1))
    assert d.cases == 4 and d.processes == (10, 10)
    assert d.expected[1] > d.expected[0] and d.interval[1] < 1.0 and d.ratio == pytest.approx(0.25, rel=0.05)
    assert d.adopt and "Verdict: take up `stream`." in render(d, "reuse", "stream")


def test_a_candidate_as_wide_is_kept_out_and_the_reasons_are_named() -> None:
    d = decide(_group("keep", 1.0), _group("cand", 1.0, shift=2))
    assert not d.adopt and d.interval[0] < 1.0 < d.interval[1]
    text = render(d, "reuse", "stream")
    assert "Verdict: keep `reuse`" in text and "not below 1" in text and "did not rise" in text


def test_the_committed_placement_trial_reads_as_its_report_does() -> None:
    from bench.h200_placement_report import load_both

    groups = load_both(PLACEMENT)
    d = decide(groups["reuse"], groups["shuffle20"])
    assert d.cases == 29 and d.processes == (13, 13)
    assert f"{d.expected[0]:.1f}" == "22.4" and f"{d.expected[1]:.1f}" == "19.8"
    assert f"{d.ratio:.2f}" == "1.10" and f"{d.interval[0]:.2f}–{d.interval[1]:.2f}" == "0.87–1.43"
    report = (REPO / "bench" / "reports" / "h200-placement.md").read_text()
    assert "1.10 times the `reuse` ones'" in report and "0.87–1.43" in report
    assert not d.adopt


def test_data_that_cannot_decide_is_refused_with_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["h200_adopt", str(PLACEMENT), "--keep", "reuse", "--candidate", "stream"])
    assert main() == 2
    assert "no processes labelled stream (found: reuse, shuffle20)" in capsys.readouterr().out
    argv = ["h200_adopt", str(PLACEMENT), "--keep", "reuse", "--candidate", "shuffle20", "--min-processes", "14"]
    monkeypatch.setattr(sys, "argv", argv)
    assert main() == 2
    assert "too few processes to decide (reuse 13, shuffle20 13; --min-processes 14)" in capsys.readouterr().out
