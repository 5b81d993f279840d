"""The pull-request comment of a matrix of testbeds: one comment for the whole submission, gathering its jobs.

Pure: no database, no network (``attnprof.server.github.service`` gathers what it shows). It leads with one table row
per testbed (its verdict, its counts, its GPU time, a link to its job), then the findings that are not portable from
one testbed to another (``attnprof.core.analysis.crossbed``), naming the testbeds and the kernels that moved on each,
then each testbed's own comment (``attnprof.server.github.comment.render``), its headline one level down, each
within an equal share of what is left of GitHub's limit. Every user-chosen string is written by
``attnprof.server.github.markdown``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attnprof.contract.links import Links
from attnprof.core import units
from attnprof.core.analysis.crossbed import NotPortable, Side
from attnprof.server.github.budget import COMMENT_BUDGET_CHARS, github_chars
from attnprof.server.github.comment import CommentInput, case_outcomes, marker, render
from attnprof.server.github.markdown import code, text
from attnprof.server.github.tables import pct

_ICONS = {"pass": "✅", "warn": "⚠️", "fail": "❌"}
_WORST = ("fail", "warn", "pass")
_NAME_MAX = 100
_NOT_PORTABLE_MAX = 20  # cases listed as not portable; the rest counted
_SECTION_FLOOR_CHARS = 1_000  # a testbed's own comment never gets less than this


@dataclass(frozen=True)
class MatrixInput:
    """What the matrix's comment shows: each testbed's job (``CommentInput``, by testbed name), whether every job
    has ended, and the findings that are not portable (empty until then)."""

    project: str
    members: Sequence[CommentInput]
    complete: bool
    not_portable: Sequence[NotPortable]


def _verdict(inp: MatrixInput) -> str | None:
    verdicts = {m.comparison.verdict if m.comparison is not None else None for m in inp.members}
    if not inp.complete or None in verdicts:
        return None
    return next(v for v in _WORST if v in verdicts)


def _headline(inp: MatrixInput) -> str:
    project, n = code(inp.project), len(inp.members)
    verdict = _verdict(inp)
    if verdict is not None:
        return f"## {_ICONS[verdict]} attnprof {project}: **{verdict}** on {n} testbeds"
    if inp.complete:
        return f"## ⛔ attnprof {project}: **no verdict** on every one of {n} testbeds"
    done = sum(1 for m in inp.members if m.status in ("done", "failed", "timed_out", "cancelled"))
    return f"## ⏳ attnprof {project}: {done} of {n} testbeds done"


def _row(m: CommentInput) -> str:
    link = Links(m.public_url).ui_job(m.project, m.job_id)
    gpu = units.fmt_duration_us(m.gpu_seconds * 1e6) if m.gpu_seconds else "–"
    doc = m.comparison
    if doc is None:
        return f"| {code(m.testbed, _NAME_MAX, table=True)} | {text(m.status)} | – | – | {gpu} | [job]({link}) |"
    outcomes = list(case_outcomes(doc).values())
    regressed, improved = outcomes.count("regressed"), outcomes.count("improved")
    verdict = f"{_ICONS[doc.verdict]} {doc.verdict}"
    return (
        f"| {code(m.testbed, _NAME_MAX, table=True)} | {verdict} | {regressed} | {improved} | {gpu} | [job]({link}) |"
    )


def _side(side: Side) -> str:
    moved = ", ".join(code(k, _NAME_MAX) for k in side.kernels)
    interval = f"{pct(side.change)} [{pct(side.low)}, {pct(side.high)}]"
    return f"{side.way} on {code(side.testbed, _NAME_MAX)} {interval}" + (f" ({moved})" if moved else "")


def not_portable_lines(found: Sequence[NotPortable]) -> list[str]:
    """The section that names the findings that are not portable (none: no lines)."""
    if not found:
        return []
    out = [
        "",
        f"### ⚠️ Not portable: {len(found)} case(s) changed differently across testbeds, beyond their intervals",
        "",
    ]
    for n in found[:_NOT_PORTABLE_MAX]:
        what = "opposite ways" if n.kind == "direction" else "by different sizes"
        sides = "; ".join(_side(s) for s in n.sides)
        beds = ", ".join(code(t, _NAME_MAX) for t in n.testbeds)
        out.append(f"- {code(n.case, _NAME_MAX)} {text(n.metric)} moved {what} on {beds}: {sides}")
    if len(found) > _NOT_PORTABLE_MAX:
        out.append(f"- … and {len(found) - _NOT_PORTABLE_MAX} more (`GET /api/v1/jobs/JOB/matrix` lists them all)")
    out += ["", "A verdict on one of these testbeds says nothing of the other: each is judged on its own baseline."]
    return out


def render_matrix(inp: MatrixInput, *, budget_chars: int = COMMENT_BUDGET_CHARS, kernel_tables: bool = True) -> str:
    """The matrix's comment, at most ``budget_chars`` characters as GitHub counts them; its first line is the
    project's hidden marker, the same one a job alone's comment has, so a pull request keeps one comment per project
    whether it ran on one testbed or several."""
    first = inp.members[0]
    out = [marker(inp.project), _headline(inp), ""]
    out.append(
        f"Suite {code(first.suite_name, _NAME_MAX)}, commit {code(first.commit[:12])} on "
        f"{code(first.branch, _NAME_MAX)}, one job per testbed, each against its own testbed's baseline."
    )
    out += ["", "| Testbed | Verdict | Regressed | Improved | GPU time | |", "|---|---|---|---|---|---|"]
    out += [_row(m) for m in inp.members]
    out += not_portable_lines(inp.not_portable)
    head = "\n".join(out)
    share = max(_SECTION_FLOOR_CHARS, (budget_chars - github_chars(head) - 200) // len(inp.members))
    for m in inp.members:
        body = render(m, budget_chars=share, kernel_tables=kernel_tables).split("\n", 1)[1]  # less its marker
        out += ["", "#" + body]  # its headline (## ...) one level down, under the matrix's
    return "\n".join(out)
