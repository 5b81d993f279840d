"""``analyze``: baseline, noise floor, comparison, change points for one stored run. Plain code: the upload
endpoint calls it inline and the worker's ``analysis.run`` task calls the same function with its session.

``analyze_paired``: a paired job's run against the merge base profiled beside it (docs/architecture.md, "The
paired job"), stored as a second comparison of the run (``mode`` paired), after the stored-history one: the newest
comparison of a run is the one that gave its job's verdict, whoever asks for "the comparison of a run"."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy.orm import Session

from attnprof.core.analysis import AnalysisError, compare
from attnprof.core.analysis.paired import compare_paired
from attnprof.core.documents import ResultDocument
from attnprof.core.documents.paired import PairedDocument
from attnprof.server.baselines import service as baselines
from attnprof.server.baselines import suites
from attnprof.server.comparisons import alert_outbox, alerts, repository
from attnprof.server.comparisons import documents as comparison_documents
from attnprof.server.comparisons.models import Comparison
from attnprof.server.config import Analysis
from attnprof.server.db import utcnow
from attnprof.server.errors import InvalidPayload, NotFound
from attnprof.server.projects import repository as projects
from attnprof.server.runs import documents
from attnprof.server.runs import repository as runs


def analyze(session: Session, *, run_id: str, cfg: Analysis, seed: int = 0) -> Comparison:
    """Compare run ``run_id`` with its baseline, store the comparison, and look for change points when the run
    is on the default branch. Nothing is committed: the caller's request or task owns the transaction.

    The documents come through ``documents.result_of``: the candidate's was kept when it was stored in this process
    (an upload), and the same baseline runs serve comparison after comparison, so most analyses validate none."""
    run = runs.get(session, run_id)
    if run is None:
        raise NotFound(f"no run {run_id}")
    project = projects.get(session, run.project_id)
    assert project is not None
    branch = project.default_branch
    candidate = documents.result_of(session, run)
    # Baselines are runs of the candidate's suite; its name is known here without reading the stored document.
    suites.remember(run.id, candidate.suite.name)
    choice = baselines.select(
        session, candidate=run, default_branch=branch, ancestors=[str(a) for a in run.ancestors], cfg=cfg
    )
    floor = baselines.noise_floor(session, candidate=run, default_branch=branch, cfg=cfg)
    try:
        doc = compare(
            [documents.result_of(session, b) for b in choice.runs],
            candidate,
            noise_floor=floor,
            seed=seed,
            first_run=choice.first_run,
        )
    except AnalysisError as exc:
        raise InvalidPayload(f"cannot compare this run with its baseline: {exc}") from exc
    doc.notes[:0] = choice.notes
    if floor is not None:
        doc.notes.append(f"noise floor {floor:.4f} learnt from this suite's default-branch history on this testbed")
    comparison = repository.add_comparison(
        session,
        Comparison(
            id=str(uuid.uuid4()),
            project_id=run.project_id,
            candidate_run_id=run.id,
            baseline_run_ids=[b.id for b in choice.runs],
            verdict=doc.verdict,
            noise_floor=floor,
            document=doc.model_dump(mode="json", by_alias=True),
            mode="history",
        ),
    )
    comparison_documents.remember(comparison.id, doc)
    if run.branch == branch and not run.suspect:
        added = alerts.detect(session, run=run, document=candidate, cfg=cfg, seed=seed)
        alert_outbox.after_commit(session, [a.id for a in added if a.notify_due_at is not None])
    return comparison


def analyze_paired(
    session: Session, *, run_id: str, base: ResultDocument, paired: PairedDocument, after: Comparison
) -> Comparison:
    """Compare run ``run_id`` (a paired job's head) with ``base`` from the rounds in ``paired``, and store it as the
    run's paired comparison, newer than ``after`` (the run's stored-history comparison, just made). Not committed.
    The base is no run: ``baseline_run_ids`` stays empty, and no change point or baseline ever reads it."""
    run = runs.get(session, run_id)
    if run is None:
        raise NotFound(f"no run {run_id}")
    head = documents.result_of(session, run)
    try:
        doc = compare_paired(base, head, paired)
    except AnalysisError as exc:
        raise InvalidPayload(f"cannot compare this run with its merge base: {exc}") from exc
    # Made in the same transaction as ``after``: a clock that reads the same twice must not tie them.
    created_at = max(utcnow(), after.created_at + timedelta(microseconds=1))
    comparison = repository.add_comparison(
        session,
        Comparison(
            id=str(uuid.uuid4()),
            project_id=run.project_id,
            candidate_run_id=run.id,
            baseline_run_ids=[],
            verdict=doc.verdict,
            noise_floor=None,
            document=doc.model_dump(mode="json", by_alias=True),
            mode="paired",
            created_at=created_at,
        ),
    )
    comparison_documents.remember(comparison.id, doc)
    return comparison
