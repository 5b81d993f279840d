from __future__ import annotations

from datetime import datetime

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from attnprof.server.jobs.models import Job
from attnprof.server.runs.models import Run


def last_jobs_of_pr(session: Session, *, repo: str, pr: int) -> list[Job]:
    """The newest job of each project for pull request ``pr`` of ``repo`` (any case: GitHub's names ignore it, and a
    webhook names the repository as GitHub spells it) (a pull request has few jobs)."""
    q = (
        select(Job)
        .where(func.lower(Job.repo) == repo.lower(), Job.pr == pr)
        .order_by(Job.project_id, Job.created_at.desc(), Job.id)
    )
    newest: dict[int, Job] = {}
    for job in session.scalars(q):
        newest.setdefault(job.project_id, job)
    return list(newest.values())


def newer_on_pr(session: Session, *, project_id: int, repo: str, pr: int, than: datetime) -> bool:
    """Whether the project has a job or an uploaded run (one no job made) of pull request ``pr`` of ``repo`` created
    after ``than``: then the pull request's one comment belongs to that newer one, and an older one's feedback (a
    retry that comes late) leaves the comment alone."""
    job = select(Job.id).where(Job.project_id == project_id, Job.repo == repo, Job.pr == pr, Job.created_at > than)
    upload = select(Run.id).where(
        Run.project_id == project_id, Run.repo == repo, Run.pr == pr, Run.job_id.is_(None), Run.created_at > than
    )
    return session.scalar(select(exists(job) | exists(upload))) is True
