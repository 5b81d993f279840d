from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from service.jobs.models import STATES, Job

__all__ = ["STATES", "jobs_by_state", "ping"]


def ping(session: Session) -> None:
    session.execute(text("SELECT 1"))


def jobs_by_state(session: Session) -> dict[str, int]:
    return {s: int(n) for s, n in session.execute(select(Job.status, func.count()).group_by(Job.status))}
