"""The pull-request comment, in GitHub markdown, rendered from a job's comparison and its run documents.

Pure: no database, no network. ``render`` takes everything it shows; ``attnprof.server.github.service`` gathers it.
Changes are fractions in the documents and percentages here; durations are microseconds. Everything a user chose
(project, testbed, suite, branch, case and kernel names, notes, details, reasons, a failure's output) is written by
``attnprof.server.github.markdown``, so none of it becomes markup, a mention or the marker. The comment always fits
in one GitHub comment (``attnprof.server.github.budget``): it leads with a line per regressed case
(``attnprof.server.github.regressions``), then as many tables (``attnprof.server.github.tables``) as the budget holds,
then says what it left out and links the comparison page that has it all.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from attnprof.contract.links import Links
from attnprof.core import units
from attnprof.core.documents.comparison import ComparisonDocument, Finding
from attnprof.core.documents.result import ResultDocument
from attnprof.core.report import advice_lines
from attnprof.server.github import paired as paired_words
from attnprof.server.github import regressions as ranked
from attnprof.server.github import tables
from attnprof.server.github.budget import COMMENT_BUDGET_CHARS, GITHUB_COMMENT_MAX_CHARS, Budget, github_chars
from attnprof.server.github.markdown import code, fenced, text
from attnprof.server.github.regressions import Regression, name

MARKER_PREFIX = "<!-- attnprof:"
_ICONS = {"pass": "✅", "warn": "⚠️", "fail": "❌"}
_MOVED = ("regressed", "improved")
_ENDED = {"failed": "failed", "timed_out": "timed out", "cancelled": "was cancelled"}
_DETAIL_MAX = 1000  # characters of a finding's detail, of the suspect reasons, of the software line
_NOTES_MAX = 10  # notes shown (the comparison writes one per suspect case)
_NOTE_MAX = 500  # characters of one note
_ERROR_MAX = 1500  # characters of a failed case's stored error
_TRACES_MAX = 5  # trace links, of the largest regressions
_LEFT_OUT_CHARS = 1000  # kept for the lines that say what was left out
_REASON_MAX = 4000  # characters of the reason shown (a worker's output tail can be long)
_NEXT = {
    "failed": "If the cause is in the code, fix it and push; if it was the worker or the infrastructure, comment "
    "`/attnprof rerun` to run this commit again.",
    "timed_out": "The profiling ran past the worker's wall-clock limit: a target that hangs, or a suite too large "
    "for the limit. Reproduce it locally, then push, or comment `/attnprof rerun`.",
    "cancelled": "Push again or comment `/attnprof rerun` to get a verdict.",
}


def marker(project: str) -> str:
    """The hidden line that finds the project's comment again among a pull request's comments (with its author:
    ``GitHubClient.upsert_comment``). A project's name is lowercase letters, digits, ``.``, ``_`` and ``-``, so it
    cannot end the HTML comment early."""
    return f"{MARKER_PREFIX}{project} -->"


@dataclass(frozen=True)
class CommentInput:
    """What the comment shows about one job (or one upload: ``job_id`` empty). ``baseline`` is one of the pooled
    baseline runs' documents. ``traces``: the names of the run's stored traces, the only ones linked (None: every
    trace the candidate names, as for an upload, whose client sends its traces after the answer). ``base_commit``: a
    paired job's merge base, the tree profiled beside the head (None: not a paired job)."""

    project: str
    job_id: str
    status: str
    suite_name: str
    testbed: str
    branch: str
    commit: str
    public_url: str
    pr: int | None = None
    reason: str | None = None
    run_id: str | None = None
    comparison_id: str | None = None
    comparison: ComparisonDocument | None = None
    candidate: ResultDocument | None = None
    baseline: ResultDocument | None = None
    traces: frozenset[str] | None = None
    suite_path: str | None = None
    history: ComparisonDocument | None = None
    history_id: str | None = None
    base_commit: str | None = None
    gpu_seconds: float | None = None
    """What the check cost: the device seconds the job's attempts held (None: an upload, which no worker ran)."""


def _paired(inp: CommentInput) -> bool:
    return inp.comparison is not None and inp.comparison.mode == "paired"


def _links(inp: CommentInput, cases: list[str]) -> list[str]:
    """The dashboard's pages of the job, its run, its comparison and the regressed cases' traces (a person reads
    the comment: the API's routes would ask their browser for a token)."""
    ui = Links(inp.public_url)
    links = [f"[job]({ui.ui_job(inp.project, inp.job_id)})"] if inp.job_id else []  # an upload has no job
    if inp.run_id:
        links.append(f"[run]({ui.ui_run(inp.project, inp.run_id)})")
    if inp.comparison_id:
        links.append(f"[comparison]({ui.ui_comparison(inp.project, inp.comparison_id)})")
    if _paired(inp) and inp.history_id:
        links.append(f"[history comparison]({ui.ui_comparison(inp.project, inp.history_id)})")
    traces = []
    for case in cases:
        found = inp.candidate.case(case) if inp.candidate is not None else None
        trace = found.trace if found is not None else None
        if inp.run_id and trace and (inp.traces is None or trace in inp.traces):
            traces.append(f"[trace of {name(case)}]({ui.ui_trace(inp.project, inp.run_id, trace)})")
    return ["**Links:** " + " · ".join(links + traces)]


_NO_PATH_SUITE = "attnprof.toml"
_NAME_MAX = 120  # characters of a suite, branch or testbed name shown


def _no_path(inp: CommentInput) -> str:
    """What the reproduction says when the job carries no suite path: where the suite is to be found instead."""
    suite = code(inp.suite_name, _NAME_MAX) if inp.suite_name else ""
    if inp.job_id:
        page = Links(inp.public_url).ui_job(inp.project, inp.job_id)
        return (
            f"No path was sent for the suite {suite} (an older `attnprof submit`): save its spec from "
            f"[the job's page]({page}) as `{_NO_PATH_SUITE}`, then:"
        )
    return f"An upload sends no path for its suite {suite}: put the suite file's path in place of `{_NO_PATH_SUITE}`:"


def _reproduce(inp: CommentInput, cases: list[str], *, compare: bool = True) -> list[str]:
    """How to run it locally, from the repository's root: the suite by its stored path (quoted for a POSIX shell);
    ``compare`` adds the baseline side and the comparison (not for a failed job). A paired job's is its paired run,
    which profiles both sides and compares them in one command."""
    suite = shlex.quote(inp.suite_path) if inp.suite_path else _NO_PATH_SUITE
    lines = ["<details><summary>Reproduce locally</summary>", ""]
    if not inp.suite_path:
        lines += [_no_path(inp), ""]
    commands = [f"git checkout {shlex.quote(inp.commit)}"]
    selected = "".join(f" --case {shlex.quote(c)}" for c in cases[:5])
    if _paired(inp) or inp.base_commit:
        commands += _reproduce_paired(inp, suite, selected)
    else:
        commands.append(f"attnprof profile {suite}{selected} --out candidate.json")
    if compare and not _paired(inp) and not inp.base_commit:
        commands += [
            "# the same on the base commit, written to baseline.json, then:",
            "attnprof compare baseline.json candidate.json",
        ]
    # a case id may hold backticks and line breaks (quoted for the shell): the fence is longer than any run of them
    lines += [*fenced("\n".join(commands), "sh"), "", "</details>"]
    return lines


_BASE_TREE = "../attnprof-base"
"""Where the reproduction checks the merge base out, beside the repository (a worktree: the head stays checked out)."""


def _reproduce_paired(inp: CommentInput, suite: str, selected: str) -> list[str]:
    """The paired run, as the worker made it: the merge base checked out beside the head, both profiled interleaved
    on one GPU by the head's suite; the merge base by its commit when the job names it."""
    base = shlex.quote(inp.base_commit) if inp.base_commit else '"$(git merge-base origin/HEAD HEAD)"'
    return [
        f"git worktree add --detach {_BASE_TREE} {base}",
        f"attnprof paired {suite} --base {_BASE_TREE} --head .{selected} --out attnprof-paired",
        "# attnprof-paired/comparison.json: the paired comparison; remove the base with:",
        f"git worktree remove {_BASE_TREE}",
    ]


def _headline(inp: CommentInput) -> str:
    doc = inp.comparison
    project, testbed = code(inp.project), code(inp.testbed, _NAME_MAX)
    if doc is not None:
        return f"## {_ICONS[doc.verdict]} attnprof {project}: **{text(doc.verdict)}** on {testbed}"
    if inp.status in _ENDED:
        return f"## ⛔ attnprof {project}: **no verdict** (job {_ENDED[inp.status]}) on {testbed}"
    return f"## ⏳ attnprof {project}: job {text(inp.status)} on {testbed}"


def _no_verdict(inp: CommentInput) -> list[str]:
    """What a job that ended without a comparison says: that this commit has no verdict, why, what to do.

    The comment is the pull request's one, updated in place: it says outright that the earlier commit's table is
    gone rather than leaving a verdict that no longer describes the code under review.
    """
    if inp.status not in _ENDED:
        return ["", f"No verdict yet: the job is **{text(inp.status)}**.", "", *_links(inp, []), ""]
    reason = (inp.reason or "no reason was recorded").strip()
    if len(reason) > _REASON_MAX:
        reason = "…" + reason[-_REASON_MAX:]
    stale = " A verdict on an earlier commit of this pull request no longer applies." if inp.pr is not None else ""
    out = [
        "",
        f"**This commit has no verdict:** the job {_ENDED[inp.status]} before its results were compared with the "
        f"baseline, so nothing is known about its performance.{stale}",
        "",
        "**Why:**",
        "",
        *fenced(reason, "text"),
        "",
        _NEXT[inp.status],
        "",
        *_links(inp, []),
        "",
    ]
    if inp.status != "cancelled":
        out += [*_reproduce(inp, [], compare=False), ""]
    return out


# A case's outcome is its worst finding's: one regressed metric makes the case regressed.
_CASE_ORDER = ("regressed", "improved", "inconclusive", "unchanged")


def case_outcomes(doc: ComparisonDocument) -> dict[str, str]:
    """Each compared case's outcome over its findings (latency, bandwidth, variance, ...): the first of
    regressed, improved, inconclusive, unchanged that any of them has. The summary counts cases, not findings."""
    out: dict[str, str] = {}
    for f in doc.findings:
        now = out.get(f.case)
        rank = _CASE_ORDER.index(f.status) if f.status in _CASE_ORDER else len(_CASE_ORDER) - 1
        if now is None or rank < _CASE_ORDER.index(now):
            out[f.case] = _CASE_ORDER[rank]
    return out


def _head(inp: CommentInput, doc: ComparisonDocument) -> tuple[list[str], int]:
    """What the comment says before the regressions: the counts, the testbed, doubts, notes (at most
    ``_NOTES_MAX``), software that differs; and how many notes were left out."""
    s = doc.summary
    baselines = len(doc.baseline or [])
    by_case = case_outcomes(doc)
    counts = {status: sum(1 for v in by_case.values() if v == status) for status in _CASE_ORDER}
    against = "the head against its merge base" if doc.mode == "paired" else f"against {baselines} baseline run(s)"
    out = [
        f"{s.compared} of {s.cases} cases compared {against} "
        f"(testbed {code(doc.testbed_candidate, _NAME_MAX)}): {counts['regressed']} regressed, "
        f"{counts['improved']} improved, "
        f"{counts['inconclusive']} inconclusive, {counts['unchanged']} unchanged "
        f"({len(doc.findings)} finding(s) over their metrics)."
    ]
    if doc.testbed_mismatch:
        beds = ", ".join(code(bed, _NAME_MAX) for bed in doc.testbed_baseline[:_NOTES_MAX])
        more = f" and {len(doc.testbed_baseline) - _NOTES_MAX} more" if len(doc.testbed_baseline) > _NOTES_MAX else ""
        out.append(f"\n⚠️ The baselines ran on other testbeds: {beds}{more}.")
    if doc.suspect:
        out.append("\n⚠️ The candidate's numbers are doubtful: " + text("; ".join(doc.suspect), _DETAIL_MAX))
    out += [f"\n> {text(n, _NOTE_MAX)}" for n in doc.notes[:_NOTES_MAX]]
    if doc.software:
        # each value in a code span: a value may hold commas and semicolons (the timing method's words do); whole
        # entries are left out past the limit, never a span cut in two
        software: list[str] = []
        for sw in doc.software:
            entry = f"{text(sw.name, _NAME_MAX)} {code(sw.baseline or '–', 200)} → {code(sw.candidate or '–', 200)}"
            if sum(len(e) + 2 for e in software) + len(entry) > _DETAIL_MAX:
                software.append(f"… {len(doc.software) - len(software)} more")
                break
            software.append(entry)
        out += ["", "**Software that differs:** " + ", ".join(software)]
    return out, max(0, len(doc.notes) - _NOTES_MAX)


def _advice(inp: CommentInput, case_id: str) -> list[str]:
    """The candidate case's best advice that helped, timed in the same job, as one line; none where none helped."""
    case = inp.candidate.case(case_id) if inp.candidate else None
    lines = advice_lines(case, limit=1) if case is not None else []
    return ["", "💡 " + text(lines[0], _DETAIL_MAX)] if lines else []


def _section(inp: CommentInput, f: Finding) -> list[str]:
    """What one regressed finding says beyond its case's line: its kernels, its detail, the case's rates, and one line
    of advice measured in the same job."""
    return _findings_section(inp, f) + (_advice(inp, f.case) if f.metric in ("backend", *ranked.TIMING) else [])


def _findings_section(inp: CommentInput, f: Finding) -> list[str]:
    detail = [text(f.detail, _DETAIL_MAX)] if f.detail else []
    case_name = name(f.case)
    if f.metric == "backend":
        head = f"#### ⚠️ {case_name}: backend switch {tables.num(f.baseline)} → {tables.num(f.candidate)}"
        return ["", head, *detail, *tables.kernel_sets(inp.baseline, inp.candidate, f.case)]
    if f.metric == "variance":
        return ["", f"#### {case_name}: run-to-run variance {tables.pct(f.change)}", *detail]
    if f.metric == "accuracy":
        return [
            "",
            f"#### ❌ {case_name}: accuracy {tables.num(f.baseline)} → {tables.num(f.candidate)}",
            *detail,
        ]
    if f.metric == "status":
        # a case that ran in the baseline and failed here: its stored error is the first thing to read
        head = f"#### ❌ {case_name}: {tables.num(f.baseline)} → {tables.num(f.candidate)}"
        case = inp.candidate.case(f.case) if inp.candidate else None
        error = case.error if case is not None else None
        if error is None:
            return ["", head, *detail]
        message = ranked.clip(f"{error.type}: {error.message}", _ERROR_MAX)
        return ["", head, *detail, "", *fenced(message, "text")]
    if f.metric in ranked.TIMING:
        out = ["", f"#### {case_name}: {text(f.metric)} {tables.pct(f.change)}", *detail, ""]
        return (
            out
            + tables.achieved(inp.baseline, inp.candidate, f.case)
            + tables.kernel_lines(inp.baseline, inp.candidate, f)
        )
    return []


def _page(inp: CommentInput) -> str:
    """The dashboard page that has everything the comment leaves out: the comparison's (else the run's, the job's)."""
    ui = Links(inp.public_url)
    if inp.comparison_id:
        return f"[the comparison page]({ui.ui_comparison(inp.project, inp.comparison_id)})"
    if inp.run_id:
        return f"[the run's page]({ui.ui_run(inp.project, inp.run_id)})"
    return f"[the job's page]({ui.ui_job(inp.project, inp.job_id)})"


def _left_out(inp: CommentInput, parts: list[str]) -> list[str]:
    if not parts:
        return []
    return [
        "",
        f"**Left out** to keep this comment under GitHub's limit of {GITHUB_COMMENT_MAX_CHARS:,} characters: "
        + "; ".join(parts)
        + f". {_page(inp)} has all of it.",
    ]


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def render(inp: CommentInput, *, budget_chars: int = COMMENT_BUDGET_CHARS, kernel_tables: bool = True) -> str:
    """The comment's markdown, at most ``budget_chars`` characters as GitHub counts them (``budget.github_chars``);
    its first line is the project's hidden marker.

    With a verdict it leads with one line per regressed case, by impact (``attnprof.server.github.regressions``), then
    as many of their kernel tables as fit, in the same order, then the table of the findings that moved and the list of
    all findings if they fit (``kernel_tables`` False: none of these tables, the compact form), then what was left
    out, with a link to the comparison page that has it all; the links and how to reproduce it come last. Every part
    is bounded, so the lines that lead are cut (the top ones kept, the rest counted) only when thousands of cases
    regressed.
    """
    out = [marker(inp.project), _headline(inp), ""]
    cost = f" The check held the GPU for {units.fmt_duration_us(inp.gpu_seconds * 1e6)}." if inp.gpu_seconds else ""
    out.append(
        f"Suite {code(inp.suite_name, _NAME_MAX)}, commit {code(inp.commit[:12])} on {code(inp.branch, _NAME_MAX)}."
        + cost
    )
    doc = inp.comparison
    if doc is None:
        return _fit("\n".join(out + _no_verdict(inp)), inp, budget_chars)
    head, notes_left = _head(inp, doc)
    if doc.mode == "paired":
        # where the verdict came from, up front; then the counts, and what the stored history said beside it
        history = []
        if inp.history is not None:
            page = Links(inp.public_url).ui_comparison(inp.project, inp.history_id) if inp.history_id else None
            history = paired_words.history_line(inp.history, f"[its page]({page})" if page else None)
        head = [*paired_words.lead(doc), "", head[0], *history, *head[1:]]
    out += head
    order = ranked.by_impact(doc, inp.baseline, inp.candidate)
    cases = [r.case for r in order]
    tail = ["", *_links(inp, cases[:_TRACES_MAX]), "", *_reproduce(inp, cases), ""]
    budget = Budget(budget_chars - _LEFT_OUT_CHARS)
    budget.take(out)
    budget.take(tail)
    left: list[str] = [_plural(notes_left, "note", "notes")] if notes_left else []

    shown = _lines(inp, order, budget)
    if order:
        out += ["", f"### Regressed cases, largest first ({len(order)})", "", *shown]
    if len(shown) < len(order):
        left.append(f"the lines of {_plural(len(order) - len(shown), 'more regressed case', 'more regressed cases')}")
        out.append(f"- … and {len(order) - len(shown)} more")
    if doc.mode == "paired":
        # each case's stopping reason comes before the kernel tables: it says how sure the verdict is
        rounds, rows_left = paired_words.rounds_table(doc, budget)
        out += rounds
        if rows_left:
            left.append(f"the paired rounds of {_plural(rows_left, 'case', 'cases')}")
    tabled = 0
    for reg in order[: len(shown)] if kernel_tables else []:
        section = [line for f in reg.findings for line in _section(inp, f)]
        if not budget.take(section):
            break
        out += section
        tabled += 1
    if len(order) > tabled:
        left.append(f"the kernel tables of {_plural(len(order) - tabled, 'case', 'cases')}")

    moved = [f for f in doc.findings if f.status in _MOVED]
    moved.sort(key=lambda f: (f.status != "regressed", f.case, f.metric))
    table = ["", "### Regressions and improvements", "", *tables.findings_table(moved)] if moved else []
    if table and kernel_tables and budget.take(table):
        out += table
    elif table:
        left.append(f"the table of {_plural(len(moved), 'finding that moved', 'findings that moved')}")
    every = [
        "",
        f"<details><summary>All {len(doc.findings)} findings</summary>",
        "",
        *tables.findings_table(doc.findings),
    ]
    every += ["", "</details>"]
    if doc.findings and kernel_tables and budget.take(every):
        out += every
    elif doc.findings:
        left.append(f"the list of all {len(doc.findings)} findings")
    out += _left_out(inp, left)
    return _fit("\n".join(out + tail), inp, budget_chars)


def _lines(inp: CommentInput, order: list[Regression], budget: Budget) -> list[str]:
    """The regressed cases' lines, top first, as many as ``budget`` holds."""
    shown = []
    budget.take(["", "### Regressed cases, largest first (0000000)", ""])
    for reg in order:
        text = ranked.line(reg, inp.baseline, inp.candidate)
        if not budget.take([text]):
            break
        shown.append(text)
    return shown


def _fit(body: str, inp: CommentInput, budget_chars: int) -> str:
    """``body``, or, should it still be over ``budget_chars`` (it is not, with the bounds above), its first lines
    and a line that says the rest is on the dashboard."""
    if github_chars(body) <= budget_chars:
        return body
    cut = f"\n\n**Cut** to stay under GitHub's limit of {GITHUB_COMMENT_MAX_CHARS:,} characters: {_page(inp)} has all."
    room = budget_chars - github_chars(cut)
    kept: list[str] = []
    for line in body.split("\n"):
        room -= github_chars(line) + 1
        if room < 0:
            break
        kept.append(line)
    return "\n".join(kept) + cut
