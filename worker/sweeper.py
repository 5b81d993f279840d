"""The plain code behind ``jobs.sweep``: decide in one transaction, commit, then send (enqueue after commit)."""

from __future__ import annotations

import logging

from service import queue
from service.config import Settings
from service.db import utcnow
from service.jobs import sweep
from worker.database import sessions

log = logging.getLogger(__name__)


def run(settings: Settings) -> dict[str, int]:
    """One sweep; returns how many messages were sent again and how many jobs failed for good."""
    with sessions(settings.database_url)() as session:
        report = sweep.sweep(
            session, cfg=settings.sweep, now=utcnow(), pending=lambda name: queue.pending(settings, name)
        )
        session.commit()
    for send in report.sends:
        if send.task == "profile":
            queue.enqueue_profile(settings, job_id=send.job_id, attempt=send.attempt, testbed=send.testbed)
        else:
            queue.enqueue_analysis(settings, job_id=send.job_id)
        log.warning("job %s: sent %s again (%s)", send.job_id, send.task, send.why)
    for job_id in report.failed:
        log.warning("job %s: failed: out of attempts", job_id)
    return {"resent": len(report.sends), "failed": len(report.failed)}
