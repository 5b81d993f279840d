"""The rule for taking up a way of timing (`bench/h200_adopt.py`): on synthetic processes each way, on the committed
placement data (whose report states the same measures), and its refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.h200_adopt import Decision, decide, main, render
from bench.h200_rounds_report import Process
from tests.core.result_documents import make_case
from tests.profiling_support import REPO

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


@pytest.mark.parametrize(
    ("expected", "interval", "adopt"),
    [
        ((20.0, 22.0), (0.70, 0.95), True),
        ((20.0, 22.0), (0.70, 1.05), False),  # more cases within, but the sd ratio not shown below 1
        ((22.0, 20.0), (0.50, 0.80), False),  # narrower, but fewer cases within
        ((20.0, 20.0), (0.50, 0.80), False),  # a tie keeps the runner as it is
        ((20.0, 22.0), (0.70, 1.00), False),  # an interval reaching 1 is not below it
    ],
)
def test_both_conditions_must_hold(expected: tuple[float, float], interval: tuple[float, float], adopt: bool) -> None:
    d = Decision(cases=29, processes=(10, 10), expected=expected, ratio=0.8, interval=interval, p=0.1)
    assert d.adopt is adopt
    assert ("Verdict: take up" in render(d, "reuse", "stream")) is adopt


def test_a_candidate_lacking_cases_or_too_few_processes_cannot_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the candidate ran the validation suite only: the llama7b cases are missing from it
    for suite in ("llama7b", "validation"):
        (tmp_path / suite).mkdir()
        for f in (PLACEMENT / suite).glob("*.json.gz"):
            if suite == "validation" or f.name.startswith("reuse-"):
                (tmp_path / suite / f.name).symlink_to(f)
    monkeypatch.setattr(sys, "argv", ["h200_adopt", str(tmp_path), "--keep", "reuse", "--candidate", "shuffle20"])
    assert main() == 2
    assert "the `shuffle20` processes lack 16 of the 29 cases: llama7b/" in capsys.readouterr().out
    from bench.h200_placement_report import load_both

    groups = load_both(tmp_path)
    with pytest.raises(ValueError, match="the candidate lacks"):
        decide(groups["reuse"], groups["shuffle20"])
    argv = ["h200_adopt", str(PLACEMENT), "--keep", "reuse", "--candidate", "shuffle20", "--min-processes", "4"]
    monkeypatch.setattr(sys, "argv", argv)
    assert main() == 2
    assert "five-process subsets, so at least 5" in capsys.readouterr().out
