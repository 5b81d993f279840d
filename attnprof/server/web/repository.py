"""Queries of the pages that no API route shares (the trends page's are in ``trend_repository``): narrow column
selects, never a run's whole document."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session, aliased, defer

from attnprof.server.baselines.models import BaselineRule
from attnprof.server.comparisons.models import Alert, Comparison
from attnprof.server.jobs import repository as jobs
from attnprof.server.jobs.models import Job
from attnprof.server.runs.models import Run, RunCase, RunKernel
from attnprof.server.testbeds.models import Testbed


def testbeds_in_use(session: Session, project_id: int) -> list[Row[tuple[Any, ...]]]:
    """Each testbed the project has runs on: name, key, meaning, its run count and its latest run's time."""
    per = (
        select(Run.testbed_id, func.count().label("runs"), func.max(Run.created_at).label("latest"))
        .where(Run.project_id == project_id)
        .group_by(Run.testbed_id)
        .subquery()
    )
    q = (
        select(Testbed.id, Testbed.name, Testbed.key, Testbed.meaning, per.c.runs, per.c.latest)
        .join(per, per.c.testbed_id == Testbed.id)
        .order_by(per.c.latest.desc())
    )
    return list(session.execute(q))


def latest_runs(session: Session, project_id: int, branch: str, limit: int) -> list[Row[tuple[Any, ...]]]:
    """The newest runs on ``branch`` with the verdict of their latest comparison (None: not compared)."""
    verdict = (
        select(Comparison.verdict)
        .where(Comparison.candidate_run_id == Run.id)
        .order_by(Comparison.created_at.desc())
        .limit(1)
        .correlate(Run)
        .scalar_subquery()
    )
    q = (
        select(
            Run.id,
            Run.commit,
            Run.branch,
            Run.pr,
            Run.created_at,
            Run.suspect,
            Run.mode,
            Run.job_id,
            Testbed.name.label("testbed"),
            verdict.label("verdict"),
        )
        .join(Testbed, Testbed.id == Run.testbed_id)
        .where(Run.project_id == project_id, Run.branch == branch)
        .order_by(Run.created_at.desc(), Run.id.desc())
        .limit(limit)
    )
    return list(session.execute(q))


def recent_alerts(session: Session, project_id: int, limit: int) -> list[dict[str, Any]]:
    """The newest alerts with what the overview shows of each: the alert, its testbed, and the commits around the
    step (the last run of the old level and the first of the new)."""
    before = aliased(Run)
    q = (
        select(Alert, Testbed.name.label("testbed"), Run.commit.label("commit"), before.commit.label("before_commit"))
        .join(Run, Run.id == Alert.run_id)
        .outerjoin(before, before.id == Alert.before_run_id)
        .join(Testbed, Testbed.id == Alert.testbed_id)
        .where(Alert.project_id == project_id)
        .order_by(Alert.id.desc())
        .limit(limit)
    )
    return [
        {"alert": alert, "testbed": testbed, "commit": commit, "before_commit": before_commit}
        for alert, testbed, commit, before_commit in session.execute(q)
    ]


def recent_jobs(session: Session, project_id: int, limit: int) -> list[Row[tuple[Any, ...]]]:
    q = (
        select(
            Job.id,
            Job.suite_name,
            Job.branch,
            Job.commit,
            Job.pr,
            Job.status,
            Job.verdict,
            Job.reason,
            Job.run_id,
            Job.created_at,
            Testbed.name.label("testbed"),
        )
        .join(Testbed, Testbed.id == Job.testbed_id)
        .where(Job.project_id == project_id)
        .order_by(Job.created_at.desc(), Job.id.desc())
        .limit(limit)
    )
    return list(session.execute(q))


def _verdicts_comparison() -> Any:
    """The id of the comparison that gave a job's run its verdict, as a scalar subquery correlated to ``Job``: the
    newest, as ``comparisons.latest_for_run`` picks it (a paired job's run has two; the paired one is stored after
    the stored-history one), the greatest id breaking a tie so that every page names the same one."""
    return (
        select(Comparison.id)
        .where(Comparison.candidate_run_id == Job.run_id)
        .order_by(Comparison.created_at.desc(), (Comparison.mode == "paired").desc(), Comparison.id.desc())
        .limit(1)
        .correlate(Job)
        .scalar_subquery()
    )


def job_states(session: Session, project_id: int, job_ids: Sequence[str]) -> list[Row[tuple[Any, ...]]]:
    """Status, verdict, reason, attempts, times, run and comparison of the given jobs of the project (the others
    are left out)."""
    if not job_ids:
        return []
    q = select(
        Job.id,
        Job.status,
        Job.verdict,
        Job.reason,
        Job.run_id,
        Job.attempts,
        Job.max_attempts,
        Job.started_at,
        Job.finished_at,
        _verdicts_comparison().label("comparison_id"),
    ).where(Job.project_id == project_id, Job.id.in_(job_ids))
    return list(session.execute(q))


# --- jobs pages --------------------------------------------------------------------------------------------


def list_jobs(
    session: Session,
    project_id: int,
    *,
    status: str | None,
    branch: str | None,
    pr: int | None,
    before: tuple[datetime, str] | None,
    limit: int,
) -> list[Row[tuple[Any, ...]]]:
    """One page of the project's jobs, newest first, without their specs (``ix_jobs_listing``)."""
    q = select(
        Job.id,
        Job.suite_name,
        Job.branch,
        Job.commit,
        Job.pr,
        Job.status,
        Job.verdict,
        Job.reason,
        Job.attempts,
        Job.max_attempts,
        Job.run_id,
        Job.created_at,
        Job.started_at,
        Job.finished_at,
        Testbed.name.label("testbed"),
    ).join(Testbed, Testbed.id == Job.testbed_id)
    q = jobs.listing(q, project_id=project_id, status=status, branch=branch, pr=pr, before=before, limit=limit)
    return list(session.execute(q))


def job_in_project(session: Session, project_id: int, job_id: str) -> Row[*tuple[Any, ...]] | None:
    """A job of the project with its testbed's name and whether its run has a comparison (None: no such job
    in this project)."""
    q = (
        select(
            Job.id,
            Job.suite_name,
            Job.suite_path,
            Job.spec,
            Job.repo,
            Job.branch,
            Job.commit,
            Job.base_commit,
            Job.pr,
            Job.status,
            Job.verdict,
            Job.reason,
            Job.attempts,
            Job.max_attempts,
            Job.claimed_by,
            Job.run_id,
            Job.created_at,
            Job.started_at,
            Job.finished_at,
            Job.updated_at,
            Job.gpu_seconds,
            Job.matrix_id,
            Testbed.name.label("testbed"),
            _verdicts_comparison().label("comparison_id"),
        )
        .join(Testbed, Testbed.id == Job.testbed_id)
        .where(Job.project_id == project_id, Job.id == job_id)
    )
    return session.execute(q).first()


def run_page_row(session: Session, project_id: int, run_id: str) -> Row[*tuple[Any, ...]] | None:
    """A run of the project with its provenance and its testbed's name and meaning (its document comes through
    ``attnprof.server.runs.documents``), or None for an unknown run or another project's."""
    q = (
        select(
            Run.id,
            Run.document_run_id,
            Run.branch,
            Run.commit,
            Run.repo,
            Run.pr,
            Run.base_commit,
            Run.mode,
            Run.suspect,
            Run.job_id,
            Run.created_at,
            Run.testbed_key,
            Run.host,
            Run.host_note,
            Testbed.name.label("testbed"),
            Testbed.meaning.label("testbed_meaning"),
        )
        .join(Testbed, Testbed.id == Run.testbed_id)
        .where(Run.id == run_id, Run.project_id == project_id)
    )
    return session.execute(q).first()


def comparisons_beside(session: Session, project_id: int, run_id: str) -> list[Row[*tuple[Any, ...]]]:
    """Id, verdict, time and mode (``history`` or ``paired``) of the newest comparison of each mode whose candidate
    is ``run_id``: a paired job's run has both, the paired one (which gives the verdict) first; any other run has
    its newest only."""
    q = (
        select(Comparison.id, Comparison.verdict, Comparison.created_at, Comparison.mode)
        .where(Comparison.candidate_run_id == run_id, Comparison.project_id == project_id)
        .order_by(Comparison.created_at.desc())
        .limit(_BESIDE_LOOKED_AT)
    )
    newest: dict[str, Row[*tuple[Any, ...]]] = {}
    for row in session.execute(q):
        newest.setdefault(row.mode, row)
    return sorted(newest.values(), key=lambda r: r.mode != "paired")


_BESIDE_LOOKED_AT = 20
"""A run's newest comparisons looked through for one of each mode (a run is compared again when its job is)."""


def comparison_in_project(session: Session, project_id: int, comparison_id: str) -> Comparison | None:
    q = select(Comparison).where(Comparison.id == comparison_id, Comparison.project_id == project_id)
    return session.scalars(q).one_or_none()


def runs_brief(session: Session, project_id: int, run_ids: Sequence[str]) -> dict[str, Row[*tuple[Any, ...]]]:
    """Provenance of the given runs of the project (others left out), by id; documents not read."""
    if not run_ids:
        return {}
    q = (
        select(
            Run.id,
            Run.branch,
            Run.commit,
            Run.pr,
            Run.created_at,
            Run.suspect,
            Run.mode,
            Run.testbed_key,
            Run.document_run_id,
            Testbed.name.label("testbed"),
        )
        .join(Testbed, Testbed.id == Run.testbed_id)
        .where(Run.project_id == project_id, Run.id.in_(run_ids))
    )
    return {row.id: row for row in session.execute(q)}


def rules_of_runs(session: Session, project_id: int, run_ids: Sequence[str]) -> list[BaselineRule]:
    """The baseline rules (pin, exclude, accept) that name any of ``run_ids``, oldest first."""
    if not run_ids:
        return []
    q = select(BaselineRule).where(BaselineRule.project_id == project_id, BaselineRule.run_id.in_(run_ids))
    return list(session.scalars(q.order_by(BaselineRule.created_at, BaselineRule.id)))


def kernel_durations(session: Session, run_id: str, case_ids: Sequence[str]) -> list[Row[tuple[Any, ...]]]:
    """Case id, kernel key, phase and per-iteration median duration (µs) of each kernel of the given cases."""
    if not case_ids:
        return []
    q = (
        select(RunCase.case_id, RunKernel.key, RunKernel.phase, RunKernel.duration_median_us)
        .join(RunKernel, RunKernel.run_case_id == RunCase.id)
        .where(RunCase.run_id == run_id, RunCase.case_id.in_(case_ids))
    )
    return list(session.execute(q))


def run_without_document(session: Session, project_id: int, run_id: str) -> Run | None:
    """A run of the project with its document left unread (a trace download or a baseline rule needs the row,
    not the megabyte of JSON)."""
    q = select(Run).options(defer(Run.document)).where(Run.id == run_id, Run.project_id == project_id)
    return session.scalars(q).one_or_none()


def latest_run_per_testbed(session: Session, project_id: int) -> list[Row[tuple[Any, ...]]]:
    """The newest run of the project on each testbed: its id, testbed name, device, branch, commit and time."""
    newest = (
        select(Run.testbed_id, func.max(Run.created_at).label("at"))
        .where(Run.project_id == project_id)
        .group_by(Run.testbed_id)
        .subquery()
    )
    q = (
        select(Run.id, Testbed.name.label("testbed"), Run.branch, Run.commit, Run.created_at, Testbed.meaning)
        .join(newest, (newest.c.testbed_id == Run.testbed_id) & (newest.c.at == Run.created_at))
        .join(Testbed, Testbed.id == Run.testbed_id)
        .where(Run.project_id == project_id)
        .order_by(Testbed.name)
    )
    return list(session.execute(q))
