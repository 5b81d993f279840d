"""The comparison page, in the order a person asks: the verdict and the regressions that make it, one line per
regressed case by impact (the PR comment's lines, ``attnprof.server.github.regressions``), a failed case's stored error;
the kernels that moved, largest slowdown (µs) first; the change of every case's time with its interval; the
findings that moved, those unchanged folded; the software that differs, the baseline runs; and, for a project
admin, accepting the candidate as an intended change."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Path, Query
from fastapi.responses import HTMLResponse, RedirectResponse
from markupsafe import Markup, escape
from sqlalchemy.orm import Session

from attnprof.contract.links import PATHS
from attnprof.core import units
from attnprof.core.documents import Kernel
from attnprof.core.documents.comparison import ComparisonDocument, Finding, KernelMove
from attnprof.core.documents.result import ResultDocument
from attnprof.server.comparisons import documents as comparison_documents
from attnprof.server.db import SessionDep
from attnprof.server.errors import NotFound
from attnprof.server.github import regressions as ranked
from attnprof.server.github.comment import case_outcomes
from attnprof.server.runs import documents
from attnprof.server.runs import repository as runs_repository
from attnprof.server.web import repository
from attnprof.server.web.dependencies import AdminFormDep, Viewer, ViewerDep, not_found
from attnprof.server.web.pages import figures, paired_view
from attnprof.server.web.pages.runs import DONE, RULE_WORDS, RunId, apply_rule, dram_bytes_per_iter, run_href
from attnprof.server.web.render import fmt_error, fmt_num, fmt_pct, page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)

ComparisonId = Annotated[str, Path(min_length=1, max_length=200)]
_VERDICT_RANK = {"fail": 0, "warn": 1, "pass": 2}
_STATUS_RANK = {"regressed": 0, "inconclusive": 1, "improved": 2, "unchanged": 3}
VERDICT_WORDS = {
    "fail": "the candidate regressed beyond its minimum effect, or broke",
    "warn": "nothing failed, but something needs a look",
    "pass": "no regression beyond the minimum effects",
}


def comparison_href(viewer: Viewer, comparison_id: str) -> str:
    return PATHS.ui_comparison(viewer.project.name, comparison_id)


def finding_order(f: Finding) -> tuple[int, int, float]:
    """Failing findings first, then regressions before the rest, larger changes first."""
    size = abs(f.change) if f.change is not None else 0.0
    return (_VERDICT_RANK.get(f.verdict, 3), _STATUS_RANK.get(f.status, 4), -size)


def _fmt_value(value: Any, unit: str | None) -> str:
    if isinstance(value, str):
        return value
    if unit == "rel_l2_err" and value is not None:
        return fmt_error(float(value))
    return units.fmt_in_unit(None if value is None else float(value), unit)


def _fmt_field(field: str, value: Any) -> str:
    if value is None:
        return "–"
    if field in ("grid", "block") and isinstance(value, list):
        return "×".join(str(v) for v in value)
    if field in ("theoretical_occupancy", "compute_util", "bandwidth_util"):
        return fmt_pct(float(value))
    if field == "shared_mem_bytes":
        return f"{float(value) / 1024:,.1f} KiB"
    if field == "dram_bytes":
        return f"{float(value):,.0f} B"
    if field == "sm_clock_mhz":
        return f"{float(value):,.0f} MHz"
    if isinstance(value, float):
        return fmt_num(value)
    return str(value)


# The columns of a kernel side by side: (heading, field in the move's changes, its value in the candidate's kernel).
KERNEL_FIELDS: tuple[tuple[str, str, Callable[[Kernel], Any]], ...] = (
    ("Launches / iter.", "launches_per_iter", lambda k: k.launches_per_iter),
    ("Grid", "grid", lambda k: k.grid),
    ("Block", "block", lambda k: k.block),
    ("Registers / thread", "registers_per_thread", lambda k: k.registers_per_thread),
    ("Shared memory", "shared_mem_bytes", lambda k: k.shared_mem_bytes),
    ("Theoretical occupancy", "theoretical_occupancy", lambda k: k.theoretical_occupancy),
    ("Bound", "bound", lambda k: k.bound),
    ("Compute util.", "compute_util", lambda k: k.compute_util),
    ("Bandwidth util.", "bandwidth_util", lambda k: k.bandwidth_util),
    ("DRAM bytes / iter.", "dram_bytes", dram_bytes_per_iter),
    ("SM clock under load", "sm_clock_mhz", lambda k: k.sm_clock_mhz),
)


def _side_by_side(move: KernelMove, candidate: Kernel | None, base_share: float | None) -> dict[str, Any]:
    """A kernel that moved, baseline beside candidate: a field that did not change reads once (the candidate's
    value); one that changed reads ``baseline → candidate`` and is marked changed."""
    changes = {c.field: c for c in [*move.launch, *move.rates]}
    cells = []
    for _, field, value_of in KERNEL_FIELDS:
        if field in changes:
            c = changes[field]
            cells.append((f"{_fmt_field(field, c.baseline)} → {_fmt_field(field, c.candidate)}", True))
        elif candidate is not None:
            cells.append((_fmt_field(field, value_of(candidate)), False))
        else:
            cells.append(("–", False))
    return {
        "key": move.key,
        "phase": move.phase,
        "name": move.name,
        "appeared": move.appeared,
        "vanished": move.vanished,
        "baseline_us": move.baseline_us,
        "candidate_us": move.candidate_us,
        "delta_us": move.delta_us,
        "change": move.change,
        "ci": move.ci,
        "share": (base_share, None if candidate is None else candidate.share),
        "cells": cells,
    }


def _move_delta_us(move: KernelMove) -> float:
    """What a kernel added to the iteration, µs: a kernel that appeared adds all of its time, one that vanished
    takes all of its baseline's off."""
    if move.delta_us is not None:
        return move.delta_us
    return (move.candidate_us or 0.0) - (move.baseline_us or 0.0)


def kernel_diff(
    session: Session, findings: list[Finding], candidate: ResultDocument | None, baseline_run: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every kernel that moved, side by side, in one list sorted by what it added to its case's iteration (µs,
    the largest slowdown first): those of the findings that moved or are inconclusive, and apart those of unchanged
    findings (moves under the case's noise). A kernel of a case is listed once."""
    with_kernels = [f for f in findings if f.kernels]
    if not with_kernels:
        return [], []
    case_ids = list(dict.fromkeys(f.case for f in with_kernels))
    shares: dict[tuple[str, str, str], float] = {}
    if baseline_run is not None:
        totals: dict[str, float] = {}
        for row in repository.kernel_durations(session, baseline_run, case_ids):
            totals[row.case_id] = totals.get(row.case_id, 0.0) + row.duration_median_us
            ident = (row.case_id, row.key, row.phase)
            shares[ident] = shares.get(ident, 0.0) + row.duration_median_us
        shares = {k: v / totals[k[0]] for k, v in shares.items() if totals.get(k[0])}
    moved: list[tuple[float, dict[str, Any]]] = []
    quiet: list[tuple[float, dict[str, Any]]] = []
    seen: set[tuple[str, str, str | None]] = set()
    for f in with_kernels:
        case = candidate.case(f.case) if candidate is not None else None
        kernels: dict[tuple[str, str | None], Kernel] = {(k.key, k.phase): k for k in (case.kernels if case else [])}
        for m in f.kernels:
            if (f.case, m.key, m.phase) in seen:
                continue
            seen.add((f.case, m.key, m.phase))
            side = _side_by_side(
                m,
                None if m.vanished else kernels.get((m.key, m.phase)),
                None if m.appeared else shares.get((f.case, m.key, str(m.phase))),
            )
            side.update(case=f.case, anchor=figures.case_anchor(f.case), metric=f.metric, status=f.status)
            (quiet if f.status == "unchanged" else moved).append((_move_delta_us(m), side))
    return [r for _, r in sorted(moved, key=lambda p: -p[0])], [r for _, r in sorted(quiet, key=lambda p: -p[0])]


ANSWER_LINES_OPEN = 10
"""Regressed cases whose line the answer shows open; the rest are a click away (a suite of hundreds can regress
as a whole, and the kernels that moved must stay near the top)."""
ERROR_MAX_CHARS = 2000
"""Characters of a failed case's stored error shown on the page (it scrolls in its own box)."""
DETAIL_MAX_CHARS = 300
"""Characters of a finding's detail in the findings table (a failed case's detail holds its whole error, which the
answer shows in its box)."""


@dataclass(frozen=True)
class AnswerLine:
    """One regressed case as the PR comment's line says it (HTML), with the stored error of a case that failed."""

    case: str
    anchor: str
    html: Markup
    broken: bool
    error: str | None = None
    error_chars: int = 0


def comment_line_html(line: str) -> Markup:
    """A line of the PR comment as HTML: the list item's dash dropped, the names in backticks as ``<code>``."""
    body = line[2:] if line.startswith("- ") else line
    parts = body.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no code spans rather than a wrong one
        return escape(body)
    return Markup("").join(Markup("<code>{}</code>").format(p) if i % 2 else escape(p) for i, p in enumerate(parts))


def answer_lines(
    doc: ComparisonDocument, baseline: ResultDocument | None, candidate: ResultDocument | None
) -> list[AnswerLine]:
    """The regressed cases, largest impact first, each in the words of the PR comment's line
    (``attnprof.server.github.regressions``: a broken case first, then by the µs the case's median gained)."""
    out = []
    for reg in ranked.by_impact(doc, baseline, candidate):
        error = None
        if any(f.metric == "status" for f in reg.findings):
            case = candidate.case(reg.case) if candidate is not None else None
            if case is not None and case.error is not None:
                error = f"{case.error.type}: {case.error.message}"
        out.append(
            AnswerLine(
                case=reg.case,
                anchor=figures.case_anchor(reg.case),
                html=comment_line_html(ranked.line(reg, baseline, candidate)),
                broken=reg.tier == 0,
                error=None if error is None else error[:ERROR_MAX_CHARS],
                error_chars=0 if error is None else len(error),
            )
        )
    return out


def linked_notes(notes: list[str], project: str, runs: Mapping[str, str]) -> list[Markup]:
    """The comparison's notes as HTML: each run id they name (``runs``: either of a run's two ids, the service's and
    its result document's, to the service's) linked to the run's page; the rest is text."""
    if not runs:
        return [escape(n) for n in notes]
    # the longest first, so that an id that begins another is not matched inside it
    named = re.compile("|".join(re.escape(i) for i in sorted(runs, key=len, reverse=True)))
    out = []
    for note in notes:
        parts: list[Markup] = []
        last = 0
        for m in named.finditer(note):
            href = PATHS.ui_run(project, runs[m.group()])
            parts += [
                escape(note[last : m.start()]),
                Markup('<a href="{}"><code>{}</code></a>').format(href, m.group()),
            ]
            last = m.end()
        parts.append(escape(note[last:]))
        out.append(Markup("").join(parts))
    return out


_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_NOTE_LOOKUPS_MAX = 20
"""Ids in the notes looked up beyond the comparison's own runs (pinned or accepted runs): one indexed query each."""


def note_runs(session: Session, project_id: int, notes: list[str], known: Mapping[str, str]) -> dict[str, str]:
    """Each run id the notes name, to the service's id of that run of the project: ``known`` (the comparison's own
    runs, by both ids) and the other ids they cite (a pinned or accepted run), looked up; an id of no run of the
    project is left out, so it stays text."""
    runs = dict(known)
    cited = dict.fromkeys(i for n in notes for i in _UUID.findall(n) if i not in runs)
    for ref in list(cited)[:_NOTE_LOOKUPS_MAX]:
        try:
            found = runs_repository.resolve_run_id(session, project_id, ref)
        except runs_repository.AmbiguousRunId:
            found = None
        if found is not None:
            runs[ref] = found
    return runs


def _document(session: Session, run_id: str | None) -> ResultDocument | None:
    if run_id is None:
        return None
    try:
        return documents.result_of(session, run_id)
    except NotFound:  # a baseline run deleted since
        return None


@router.get("/comparisons/{comparison_id}", response_class=HTMLResponse)
def comparison_page(
    viewer: ViewerDep,
    session: SessionDep,
    comparison_id: ComparisonId,
    done: Annotated[str | None, Query(max_length=20)] = None,
) -> HTMLResponse:
    found = repository.comparison_in_project(session, viewer.project.id, comparison_id)
    if found is None:
        raise not_found(f"no comparison {comparison_id} in project {viewer.project.name}")
    doc = comparison_documents.comparison_of(found)
    baseline_ids = [str(b) for b in found.baseline_run_ids]
    brief = repository.runs_brief(session, viewer.project.id, [found.candidate_run_id, *baseline_ids])
    baselines = [(b, brief.get(b)) for b in baseline_ids]
    present = [r for _, r in baselines if r is not None]
    newest_baseline = max(present, key=lambda r: r.created_at).id if present else None
    findings = sorted(doc.findings, key=finding_order)
    candidate_href = run_href(viewer, found.candidate_run_id)
    rules = repository.rules_of_runs(session, viewer.project.id, [found.candidate_run_id])
    candidate_doc = _document(session, found.candidate_run_id)
    # The PR comment's lines, in the same words: their changes are the findings' estimates over all baseline runs;
    # the first baseline run's document gives the kernels' bounds and utilisations, as the comment's do.
    lines = answer_lines(doc, _document(session, baseline_ids[0] if baseline_ids else None), candidate_doc)
    moved, quiet = kernel_diff(session, findings, candidate_doc, newest_baseline)
    outcomes = list(case_outcomes(doc).values())  # the comment's count: a case is its worst finding
    # the notes cite the result documents' run ids; the page links them by the service's, runs of this project only
    own = {i: row.id for row in brief.values() for i in (row.id, row.document_run_id) if i}
    ids = note_runs(session, viewer.project.id, doc.notes, own)
    return page(
        "comparison.html",
        viewer=viewer,
        comparison=found,
        doc=doc,
        verdict_words=VERDICT_WORDS.get(found.verdict, found.verdict),
        notes=linked_notes(doc.notes, viewer.project.name, ids),
        candidate=brief.get(found.candidate_run_id),
        candidate_href=candidate_href,
        baselines=baselines,
        case_counts={k: outcomes.count(k) for k in _STATUS_RANK},
        answer=lines[:ANSWER_LINES_OPEN],
        answer_more=lines[ANSWER_LINES_OPEN:],
        findings=[f for f in findings if f.status != "unchanged"],
        unchanged=[f for f in findings if f.status == "unchanged"],
        chart_spec=figures.comparison_changes(findings, doc.settings.thresholds, candidate_href),
        charted_metrics=figures.CHARTED_METRICS,
        moves=moved,
        quiet_moves=quiet,
        kernel_fields=[heading for heading, _, _ in KERNEL_FIELDS],
        settings=doc.settings,
        href=comparison_href(viewer, found.id),
        rules={r.kind: r for r in rules if r.kind == "accept"},
        rule_words=RULE_WORDS,
        rule_action=partial(PATHS.ui_comparison_rule, viewer.project.name, found.id),
        fmt_value=_fmt_value,
        detail_chars=DETAIL_MAX_CHARS,
        anchor=figures.case_anchor,
        done=DONE.get(done or ""),
        **paired_view.context(session, viewer.project.id, doc, found.id, found.candidate_run_id),
    )


@router.get("/runs/{run_id}/comparison")
def latest_comparison(viewer: ViewerDep, session: SessionDep, run_id: RunId) -> RedirectResponse:
    """The run's newest comparison; a paired job's run: its paired one, which gives the verdict."""
    found = repository.comparisons_beside(session, viewer.project.id, run_id)
    if not found:
        raise not_found(f"no comparison of run {run_id} in project {viewer.project.name}")
    return RedirectResponse(comparison_href(viewer, found[0].id), status_code=303)


def _candidate_of(session: Session, viewer: Viewer, comparison_id: str) -> str:
    found = repository.comparison_in_project(session, viewer.project.id, comparison_id)
    if found is None:
        raise not_found(f"no comparison {comparison_id} in project {viewer.project.name}")
    return found.candidate_run_id


@router.post("/comparisons/{comparison_id}/baselines/{kind}")
def accept(
    viewer: AdminFormDep,
    session: SessionDep,
    comparison_id: ComparisonId,
    kind: Annotated[Literal["accept"], Path()],
    reason: Annotated[str, Form(max_length=2000)] = "",
) -> RedirectResponse:
    """Accept the candidate run as an intended change: it becomes the baseline of its testbed key."""
    run_id = _candidate_of(session, viewer, comparison_id)
    apply_rule(session, viewer, run_id=run_id, kind=kind, reason=reason, remove=False)
    return RedirectResponse(f"{comparison_href(viewer, comparison_id)}?done={kind}#baselines", status_code=303)


@router.post("/comparisons/{comparison_id}/baselines/{kind}/remove")
def unaccept(
    viewer: AdminFormDep,
    session: SessionDep,
    comparison_id: ComparisonId,
    kind: Annotated[Literal["accept"], Path()],
) -> RedirectResponse:
    run_id = _candidate_of(session, viewer, comparison_id)
    apply_rule(session, viewer, run_id=run_id, kind=kind, reason="", remove=True)
    return RedirectResponse(f"{comparison_href(viewer, comparison_id)}?done=un{kind}#baselines", status_code=303)
