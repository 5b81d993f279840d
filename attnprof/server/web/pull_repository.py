"""Queries of the runs page and the pull-request page: every run of a project however it came (a job's worker
stored it, or a self-hosted runner uploaded it), and a pull request's runs and jobs. Narrow column selects, never a
run's whole document."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from attnprof.server.comparisons.models import Comparison
from attnprof.server.jobs.models import Job
from attnprof.server.runs.models import Run
from attnprof.server.testbeds.models import Testbed


def _latest_comparison() -> tuple[Any, Any]:
    """The id and verdict of a run's newest comparison, as correlated scalar subqueries (None: not compared); both
    pick the same row (the newest, then the greatest id)."""

    def newest(column: Any) -> Any:
        return (
            select(column)
            .where(Comparison.candidate_run_id == Run.id)
            .order_by(Comparison.created_at.desc(), Comparison.id.desc())
            .limit(1)
            .correlate(Run)
            .scalar_subquery()
        )

    return newest(Comparison.id).label("comparison_id"), newest(Comparison.verdict).label("verdict")


def _run_columns() -> tuple[Any, ...]:
    comparison_id, verdict = _latest_comparison()
    return (
        Run.id,
        Run.branch,
        Run.commit,
        Run.repo,
        Run.pr,
        Run.created_at,
        Run.suspect,
        Run.host_note,
        Run.job_id,
        Testbed.name.label("testbed"),
        comparison_id,
        verdict,
    )


def list_runs(
    session: Session,
    project_id: int,
    *,
    branch: str | None,
    pr: int | None,
    testbed_id: int | None,
    before: tuple[datetime, str] | None,
    limit: int,
) -> list[Row[tuple[Any, ...]]]:
    """One page of the project's runs, newest first, each with its testbed's name, whether a job made it
    (``job_id``) and its newest comparison's id and verdict. ``before``: the keyset cursor (created_at, id)."""
    q = select(*_run_columns()).join(Testbed, Testbed.id == Run.testbed_id).where(Run.project_id == project_id)
    if branch is not None:
        q = q.where(Run.branch == branch)
    if pr is not None:
        q = q.where(Run.pr == pr)
    if testbed_id is not None:
        q = q.where(Run.testbed_id == testbed_id)
    if before is not None:
        q = q.where((Run.created_at < before[0]) | ((Run.created_at == before[0]) & (Run.id < before[1])))
    return list(session.execute(q.order_by(Run.created_at.desc(), Run.id.desc()).limit(limit)))


def testbed_named(session: Session, project_id: int, name: str) -> int | None:
    """The id of the testbed ``name`` if the project has runs on it (None: no such testbed, or none of its runs)."""
    q = select(Testbed.id).where(Testbed.name == name)
    found = session.scalar(q)
    if found is None:
        return None
    ran = select(Run.id).where(Run.project_id == project_id, Run.testbed_id == found).limit(1)
    return found if session.scalar(ran) is not None else None


def runs_of_pr(session: Session, project_id: int, pr: int, limit: int) -> list[Row[tuple[Any, ...]]]:
    """The runs of pull request ``pr`` of the project, newest first (``ix_runs_pr``)."""
    q = (
        select(*_run_columns())
        .join(Testbed, Testbed.id == Run.testbed_id)
        .where(Run.project_id == project_id, Run.pr == pr)
        .order_by(Run.created_at.desc(), Run.id.desc())
        .limit(limit)
    )
    return list(session.execute(q))


def jobs_of_pr(session: Session, project_id: int, pr: int, limit: int) -> list[Row[tuple[Any, ...]]]:
    """The jobs of pull request ``pr`` of the project in any state, newest first (``ix_jobs_pr``), without their
    specs."""
    q = (
        select(
            Job.id,
            Job.suite_name,
            Job.branch,
            Job.commit,
            Job.repo,
            Job.pr,
            Job.status,
            Job.verdict,
            Job.reason,
            Job.run_id,
            Job.created_at,
            Job.finished_at,
            Testbed.name.label("testbed"),
        )
        .join(Testbed, Testbed.id == Job.testbed_id)
        .where(Job.project_id == project_id, Job.pr == pr)
        .order_by(Job.created_at.desc(), Job.id.desc())
        .limit(limit)
    )
    return list(session.execute(q))


@dataclass(frozen=True)
class PullActivity:
    """A pull request on the overview: its number, its jobs and uploaded runs, and its latest activity."""

    pr: int
    jobs: int
    uploads: int
    latest: datetime


def recent_pulls(session: Session, project_id: int, limit: int, scan: int = 500) -> list[PullActivity]:
    """The project's pull requests with the latest activity (a job submitted or a run uploaded), newest first, each
    with its number of jobs and of uploaded runs (no job made them). Read from the newest ``scan`` jobs and uploads
    that name a pull request (``ix_jobs_listing``, ``ix_runs_listing``), then counted per pull request
    (``ix_jobs_pr``, ``ix_runs_pr``): the cost stays the same however long the project's history."""
    jobs = (
        select(Job.pr, Job.created_at)
        .where(Job.project_id == project_id, Job.pr.is_not(None))
        .order_by(Job.created_at.desc())
        .limit(scan)
    )
    uploads = (
        select(Run.pr, Run.created_at)
        .where(Run.project_id == project_id, Run.pr.is_not(None), Run.job_id.is_(None))
        .order_by(Run.created_at.desc())
        .limit(scan)
    )
    latest: dict[int, datetime] = {}
    for pr, at in [*session.execute(jobs), *session.execute(uploads)]:
        if pr not in latest or at > latest[pr]:
            latest[pr] = at
    top = sorted(latest.items(), key=lambda item: (item[1], item[0]), reverse=True)[:limit]
    numbers = [pr for pr, _ in top]
    if not numbers:
        return []
    job_counts = select(Job.pr, func.count()).where(Job.project_id == project_id, Job.pr.in_(numbers))
    upload_counts = select(Run.pr, func.count()).where(
        Run.project_id == project_id, Run.pr.in_(numbers), Run.job_id.is_(None)
    )
    per_pr_jobs = {pr: n for pr, n in session.execute(job_counts.group_by(Job.pr))}
    per_pr_uploads = {pr: n for pr, n in session.execute(upload_counts.group_by(Run.pr))}
    return [
        PullActivity(pr=pr, jobs=per_pr_jobs.get(pr, 0), uploads=per_pr_uploads.get(pr, 0), latest=at) for pr, at in top
    ]


def pr_counts(session: Session, project_id: int, pr: int) -> tuple[int, int]:
    """(jobs, uploaded runs) of pull request ``pr`` of the project."""
    jobs = select(func.count()).select_from(Job).where(Job.project_id == project_id, Job.pr == pr)
    uploads = (
        select(func.count()).select_from(Run).where(Run.project_id == project_id, Run.pr == pr, Run.job_id.is_(None))
    )
    return int(session.scalar(jobs) or 0), int(session.scalar(uploads) or 0)


def run_feedback(session: Session, run_id: str) -> Row[*tuple[Any, ...]] | None:
    """An uploaded run's GitHub outbox: whether feedback is owed (``feedback_due_at``), the failed deliveries so
    far and why the last one failed (None: no such run)."""
    q = select(Run.repo, Run.feedback_due_at, Run.feedback_attempts, Run.feedback_note).where(Run.id == run_id)
    return session.execute(q).first()
