from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.jobs.models import Job


def last_jobs_of_pr(session: Session, *, repo: str, pr: int) -> list[Job]:
    """The newest job of each project for pull request ``pr`` of ``repo`` (a pull request has few jobs)."""
    q = select(Job).where(Job.repo == repo, Job.pr == pr).order_by(Job.project_id, Job.created_at.desc(), Job.id)
    newest: dict[int, Job] = {}
    for job in session.scalars(q):
        newest.setdefault(job.project_id, job)
    return list(newest.values())
