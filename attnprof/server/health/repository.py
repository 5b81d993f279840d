from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from attnprof.server.jobs.models import STATES, Job
from attnprof.server.testbeds.models import Testbed

__all__ = ["STATES", "jobs_by_state", "ping", "testbed_names"]


def ping(session: Session) -> None:
    session.execute(text("SELECT 1"))


def jobs_by_state(session: Session) -> dict[str, int]:
    return {s: int(n) for s, n in session.execute(select(Job.status, func.count()).group_by(Job.status))}


def testbed_names(session: Session) -> list[str]:
    return list(session.scalars(select(Testbed.name).order_by(Testbed.name)))
