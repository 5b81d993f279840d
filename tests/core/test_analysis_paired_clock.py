"""A paired comparison and a clock that fell while timing: both sides were timed interleaved under it, so it is a note
and not an excuse (an H100 under its power cap read 1,920 MHz of 1,980 while a 15% regression was timed, and the
regression was only a warning). What interleaving does not cancel, another process on the GPU, still excuses."""

from __future__ import annotations

from attnprof.core.analysis.paired import compare_paired
from attnprof.core.documents.comparison import ComparisonDocument, Finding
from attnprof.core.documents.result import CLOCK_DROP_MARK
from tests.core.paired_docs import SAME, SLOWER, paired_sides

CLOCK = f"{CLOCK_DROP_MARK} to 1920 MHz (top 1980 MHz) while timing: power or thermal capping"


def _timing(doc: ComparisonDocument, case: str) -> Finding:
    return next(f for f in doc.findings if f.case == case and f.metric == "latency")


def test_a_clock_that_fell_on_both_sides_leaves_a_paired_regression_failing_and_says_so() -> None:
    base, head, paired = paired_sides([SLOWER, SAME])
    for doc in (base, head):
        doc.case(SLOWER.case).suspect = [CLOCK]  # type: ignore[union-attr]
        doc.run.suspect = [f"{CLOCK_DROP_MARK} more than 3% in 1 of 2 cases"]
    clean = compare_paired(*paired_sides([SLOWER, SAME]))
    doc = compare_paired(base, head, paired)
    assert clean.verdict == doc.verdict == "fail"
    assert _timing(doc, SLOWER.case).verdict == "fail"
    assert not any("suspect" in n for n in doc.notes)
    assert any(n.startswith(CLOCK_DROP_MARK) and SLOWER.case in n and "paired test stands" in n for n in doc.notes)
    assert not any(CLOCK_DROP_MARK in n for n in clean.notes)


def test_another_process_on_the_gpu_still_keeps_a_paired_regression_from_failing() -> None:
    base, head, paired = paired_sides([SLOWER, SAME])
    head.run.suspect = ["1 other process(es) on the GPU at start", f"{CLOCK_DROP_MARK} more than 3% in 1 of 2 cases"]
    doc = compare_paired(base, head, paired)
    assert doc.verdict == "warn"
    note = next(n for n in doc.notes if "head run is suspect" in n)
    assert "other process" in note and CLOCK_DROP_MARK not in note


def test_a_case_suspect_for_another_reason_still_warns() -> None:
    base, head, paired = paired_sides([SLOWER])
    head.case(SLOWER.case).suspect = [CLOCK, "timed while another tenant's job held the GPU"]  # type: ignore[union-attr]
    doc = compare_paired(base, head, paired)
    finding = _timing(doc, SLOWER.case)
    assert finding.verdict == "warn" and "another tenant" in (finding.detail or "")
    assert CLOCK_DROP_MARK not in (finding.detail or "")
