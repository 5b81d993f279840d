"""``render_table`` of a paired comparison: its mode and each case's rounds and stopping reason; a stored-history
comparison's table as it always was."""

from __future__ import annotations

from pathlib import Path

from attnprof.core.analysis import compare, render_table
from attnprof.core.documents import load_result
from tests.core.paired_docs import AMBIGUOUS, BASE_RUN, FASTER, HEAD_RUN, SAME, SLOWER, paired_comparison

DATA = Path(__file__).resolve().parents[1] / "data"


def _block(text: str, case: str) -> list[str]:
    """The row of ``case`` and the indented lines under it."""
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(case + " "))
    out = [lines[i]]
    for line in lines[i + 1 :]:
        if not line.startswith("      "):
            break
        out.append(line)
    return out


def test_a_paired_table_says_its_mode_and_how_each_case_stopped() -> None:
    doc = paired_comparison()
    text = render_table(doc)
    lines = text.splitlines()
    assert lines[0] == "verdict: FAIL"
    assert lines[1].startswith(
        "mode: paired (the merge base and the head interleaved on one device, ABBA rounds; "
        f"{doc.paired.rounds} pairs of rounds in 84 s, at most 15 per case; minimum effect 0.5%"  # type: ignore[union-attr]
    )
    assert lines[1].endswith("stopped: 1 slower, 1 faster, 1 the same, 1 ambiguous)")
    assert lines[2] == f"head {HEAD_RUN} vs merge base {BASE_RUN} (the base side: not a stored run)"
    assert "noise floor" not in text and "baseline" not in lines[2]
    by_case = {f.case: f for f in doc.findings}
    amb = by_case[AMBIGUOUS.case]
    assert amb.more_rounds is not None
    assert (
        _block(text, AMBIGUOUS.case)[1]
        == f"      paired: ambiguous after 15 pairs; ~{amb.more_rounds:,} more would settle it"
    )
    assert _block(text, SLOWER.case)[0].endswith("REGRESSED")
    assert _block(text, SLOWER.case)[1] == f"      paired: slower after {by_case[SLOWER.case].rounds} pairs"
    assert _block(text, FASTER.case)[1] == f"      paired: faster after {by_case[FASTER.case].rounds} pairs"
    # a case shown the same within the minimum effect is listed too, with its rounds
    assert _block(text, SAME.case)[1] == f"      paired: the same within +-0.5% after {by_case[SAME.case].rounds} pairs"
    assert text.isascii()


def test_a_history_table_is_unchanged() -> None:
    # Written by render_table as it was before paired comparisons existed, and again once each kernel's change came
    # with its interval.
    results = DATA / "results"
    baselines = [load_result(p) for p in sorted(results.glob("synthetic-h200-baseline-*.json"))]
    doc = compare(baselines, load_result(results / "synthetic-h200-candidate-5pct-slower.json"))
    text = render_table(doc)
    assert text + "\n" == (DATA / "comments" / "history-5pct-slower.txt").read_text()
    assert "mode:" not in text and "paired" not in text
