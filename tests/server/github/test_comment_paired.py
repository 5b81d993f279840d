"""The PR comment of a paired job: the verdict's origin up front, each case's stopping reason, the stored-history
comparison beside it in one line; a history-only job's comment unchanged to the byte; the size bound held."""

from __future__ import annotations

from pathlib import Path

from attnprof.core.analysis import compare
from attnprof.server.github.budget import COMMENT_BUDGET_CHARS, COMPACT_BUDGET_CHARS, github_chars
from attnprof.server.github.comment import render
from tests.core.paired_docs import AMBIGUOUS, FASTER, SAME, SLOWER, Shape, paired_comparison
from tests.core.result_documents import runs
from tests.server.github.test_comment import _input

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "comments"


def _history():
    return compare(runs(3, seed=1), runs(1, seed=2, factor=1.05, prefix="cand")[0])


def test_a_paired_verdict_says_so_up_front_with_its_pairs_and_minimum_effect() -> None:
    doc = paired_comparison()
    assert doc.paired is not None
    text = render(_input(comparison=doc, candidate=None, baseline=None))
    lines = text.splitlines()
    lead = next(i for i, line in enumerate(lines) if line.startswith("**Paired run on one GPU:**"))
    assert lead < next(i for i, line in enumerate(lines) if "cases compared" in line), "the origin comes first"
    assert (
        f"merge base and the head profiled interleaved on the same GPU (ABBA rounds, one process per side), "
        f"{doc.paired.rounds} pairs of rounds over all cases in 84 s (at most 15 per case), minimum effect 0.5%."
    ) in text
    assert "Cases stopped: 1 slower, 1 faster, 1 the same, 1 ambiguous." in text
    assert "4 of 4 cases compared the head against its merge base" in text
    assert "baseline run(s)" not in text, "the base side is not a stored baseline run"
    assert "history comparison" not in text and "stored-history" not in text


def test_each_case_shows_how_its_rounds_stopped_and_an_ambiguous_one_what_would_settle_it() -> None:
    doc = paired_comparison()
    text = render(_input(comparison=doc, candidate=None, baseline=None))
    table = text.split("### Paired rounds per case (4)\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert table[0] == "| | Case | Stopped | Change | Interval | Time × SM clock |"
    rows = {row.split("`")[1]: row for row in table[2:]}
    assert list(rows) == [SLOWER.case, AMBIGUOUS.case, FASTER.case, SAME.case], "regressed, ambiguous, improved, same"
    by_case = {f.case: f for f in doc.findings}
    amb = by_case[AMBIGUOUS.case]
    assert amb.stopped_by == "max_rounds" and amb.rounds == 15 and amb.more_rounds
    # "~" escaped: GitHub strikes through text between single tildes
    assert f"| ambiguous after 15 pairs; \\~{amb.more_rounds:,} more would settle it |" in rows[AMBIGUOUS.case]
    assert rows[AMBIGUOUS.case].startswith("| ❔ |")
    assert f"| slower after {by_case[SLOWER.case].rounds} pairs |" in rows[SLOWER.case]
    assert rows[SLOWER.case].startswith("| 🔴 |")
    assert f"| faster after {by_case[FASTER.case].rounds} pairs |" in rows[FASTER.case]
    assert f"| the same within ±0.5% after {by_case[SAME.case].rounds} pairs |" in rows[SAME.case]


def test_the_history_comparison_beside_it_is_one_line_with_its_verdict_and_a_link() -> None:
    doc, history = paired_comparison(), _history()
    assert history.verdict == "fail" and history.mode == "history"
    text = render(_input(comparison=doc, candidate=None, baseline=None, history=history, history_id="c-2"))
    line = next(line for line in text.splitlines() if line.startswith("Beside it, the stored-history comparison"))
    assert "(against 3 stored baseline run(s)) says **fail**, which does not decide" in line
    assert "regressed: `prefill[backend=cudnn]`" in line
    assert line.endswith("([its page](https://perf.example/ui/p/flash/comparisons/c-2)).")
    assert "[history comparison](https://perf.example/ui/p/flash/comparisons/c-2)" in text
    # the verdict is the paired one's
    assert text.splitlines()[1].startswith(f"## ❌ attnprof `flash`: **{doc.verdict}**")


def test_a_history_only_comment_is_unchanged_to_the_byte() -> None:
    # The golden files were written by the comment as it was before paired comparisons existed, and written again
    # once each kernel's change came with its interval (the fixtures' kernels hold five rounds of traced iterations).
    assert render(_input()) == (GOLDEN / "history-5pct-slower.md").read_text()
    compact = render(_input(), budget_chars=COMPACT_BUDGET_CHARS, kernel_tables=False)
    assert compact == (GOLDEN / "history-5pct-slower-compact.md").read_text()
    # a second document given beside a history verdict changes nothing either
    assert render(_input(history=_history(), history_id="c-2")) == render(_input())


def test_a_paired_comment_of_thousands_of_cases_stays_within_its_budget_and_says_what_it_left_out() -> None:
    long = "x" * 90
    shapes = [
        Shape(f"prefill[backend=cudnn,seq_q={i},{long}]", 1.03 if i % 3 == 0 else 1.0, 0.0005) for i in range(1500)
    ]
    doc = paired_comparison(shapes)
    inp = _input(comparison=doc, candidate=None, baseline=None, history=_history(), history_id="c-2")
    for budget, tables in ((COMMENT_BUDGET_CHARS, True), (COMPACT_BUDGET_CHARS, False)):
        text = render(inp, budget_chars=budget, kernel_tables=tables)
        assert github_chars(text) <= budget
        assert text.count("**Paired run on one GPU:**") == 1 and "Beside it, the stored-history comparison" in text
        assert "**Left out**" in text and "the paired rounds of " in text
        assert "**Cut**" not in text, "every part is bounded: nothing is cut at the end"
        assert text.rstrip().endswith("</details>"), "the links and the reproduction are kept"


def _reproduction(text: str) -> list[str]:
    section = text.split("<details><summary>Reproduce locally</summary>", 1)[1]
    return section.split("```sh\n", 1)[1].split("\n```", 1)[0].split("\n")


def test_a_paired_comment_reproduces_the_paired_run_beside_a_worktree_of_the_merge_base() -> None:
    doc, base = paired_comparison(), "9" * 40
    text = render(_input(comparison=doc, candidate=None, baseline=None, base_commit=base))
    assert _reproduction(text) == [
        "git checkout abcdef0123456789",
        f"git worktree add --detach ../attnprof-base {base}",
        f"attnprof paired benches/llama7b.toml --base ../attnprof-base --head . --case '{SLOWER.case}' "
        "--out attnprof-paired",
        "# attnprof-paired/comparison.json: the paired comparison; remove the base with:",
        "git worktree remove ../attnprof-base",
    ]
    assert "attnprof compare" not in text and "attnprof profile" not in text


def test_a_paired_reproduction_without_the_base_commit_finds_the_merge_base() -> None:
    text = render(_input(comparison=paired_comparison(), candidate=None, baseline=None, suite_path=None))
    lines = _reproduction(text)
    assert lines[1] == 'git worktree add --detach ../attnprof-base "$(git merge-base origin/HEAD HEAD)"'
    assert lines[2] == (
        f"attnprof paired attnprof.toml --base ../attnprof-base --head . --case '{SLOWER.case}' --out attnprof-paired"
    )


def test_a_failed_paired_job_reproduces_its_paired_run() -> None:
    text = render(
        _input(status="failed", reason="boom", comparison=None, candidate=None, baseline=None, base_commit="8" * 40)
    )
    lines = _reproduction(text)
    assert lines[1] == f"git worktree add --detach ../attnprof-base {'8' * 40}"
    assert lines[2] == "attnprof paired benches/llama7b.toml --base ../attnprof-base --head . --out attnprof-paired"
