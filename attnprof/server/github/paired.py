"""What the PR comment says of a paired comparison (``mode: paired``; docs/architecture.md, "The paired job"): that
its verdict came from the merge base and the head profiled interleaved on one GPU, how each case's rounds stopped,
and, beside it, what the stored-history comparison of the same run said.

Pure: no database, no network. A finding's stopping reason is worded once, by ``attnprof.core.analysis.render``, for
the CLI's table, this comment and the dashboard; what it quotes of a document is escaped
(``attnprof.server.github.markdown``). Changes are fractions in the documents and percentages here.
"""

from __future__ import annotations

from attnprof.core.analysis.render import stopped_counts, stopping
from attnprof.core.documents.comparison import ComparisonDocument, Finding
from attnprof.core.units import fmt_percent
from attnprof.server.github import markdown, tables
from attnprof.server.github.budget import Budget
from attnprof.server.github.regressions import CASE_TIME, name

_ROW_ORDER = {"regressed": 0, "inconclusive": 1, "improved": 2, "unchanged": 3}
_ICONS = {"regressed": "🔴", "improved": "🟢", "inconclusive": "❔"}
_HISTORY_REGRESSED_MAX = 3  # regressed cases of the stored-history comparison named in its line


def lead(doc: ComparisonDocument) -> list[str]:
    """The paragraph that says where the verdict came from: a paired run on one GPU, its pairs of rounds, the
    minimum effect, how the cases stopped."""
    info = doc.paired
    if info is None:
        return []
    wall = f" in {info.wall_s:,.0f} s" if info.wall_s is not None else ""
    return [
        "",
        f"**Paired run on one GPU:** this verdict comes from the merge base and the head profiled interleaved on the "
        f"same GPU (ABBA rounds, one process per side), {info.rounds} pairs of rounds over all cases{wall} "
        f"(at most {info.max_pairs} per case), minimum effect {fmt_percent(info.min_effect, digits=1)}. "
        f"Cases stopped: {markdown.text(stopped_counts(doc), 400)}.",
    ]


def history_line(history: ComparisonDocument, link: str | None) -> list[str]:
    """One line on the stored-history comparison beside the paired one: its verdict and what it counted, the first
    of its regressed cases named; ``link`` (markdown) to its page."""
    s = history.summary
    regressed = list(dict.fromkeys(f.case for f in history.findings if f.status == "regressed"))
    named = ", ".join(name(c) for c in regressed[:_HISTORY_REGRESSED_MAX])
    more = f" and {len(regressed) - _HISTORY_REGRESSED_MAX} more" if len(regressed) > _HISTORY_REGRESSED_MAX else ""
    against = "no baseline run" if history.baseline is None else f"{len(history.baseline)} stored baseline run(s)"
    text = (
        f"Beside it, the stored-history comparison (against {against}) says **{markdown.text(history.verdict)}**, "
        "which does not "
        f"decide: {s.regressed} regressed, {s.improved} improved, {s.inconclusive} inconclusive, "
        f"{s.unchanged} unchanged finding(s)"
    )
    text += f"; regressed: {named}{more}" if named else ""
    text += f" ({link})." if link else "."
    return ["", text]


def _row(f: Finding) -> str:
    interval = f"[{tables.pct(f.ci.low)}, {tables.pct(f.ci.high)}] ({f.ci.level:.0%})" if f.ci else "–"
    clock = tables.pct(f.cycles_change) if f.cycles_change is not None else "–"
    return (
        f"| {_ICONS.get(f.status, '')} | {tables.cell(f.case)} | {markdown.text(stopping(f) or '–', 200)} "
        f"| {tables.words(f.metric)} {tables.pct(f.change)} | {interval} | {clock} |"
    )


def rounds_table(doc: ComparisonDocument, budget: Budget) -> tuple[list[str], int]:
    """The table of each case's rounds (regressed, then ambiguous, improved, the same), as many rows as ``budget``
    holds; and how many rows it left out."""
    timing = [f for f in doc.findings if f.metric in CASE_TIME and f.stopped_by is not None]
    if not timing:
        return [], 0
    timing.sort(key=lambda f: (_ROW_ORDER.get(f.status, 4), f.case))
    head = [
        "",
        f"### Paired rounds per case ({len(timing)})",
        "",
        "| | Case | Stopped | Change | Interval | Time × SM clock |",
        "|---|---|---|---:|---|---:|",
    ]
    if not budget.take(head):
        return [], len(timing)
    rows = []
    for f in timing:
        row = _row(f)
        if not budget.take([row]):
            break
        rows.append(row)
    return head + rows, len(timing) - len(rows)
