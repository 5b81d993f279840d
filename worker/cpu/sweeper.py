"""The plain code behind ``jobs.sweep``: decide in one transaction, commit, then send (enqueue after commit), then
dispatch every testbed with jobs waiting (the catch-all behind the dispatch that follows each change of a slot),
then deliver the GitHub feedback that is owed and due, one job per transaction."""

from __future__ import annotations

import logging
import time

from service import queue
from service.config import Settings
from service.db import utcnow
from service.github import service as github
from service.jobs import dispatch, sweep
from worker.cpu.database import sessions

log = logging.getLogger(__name__)

# A sweep runs every few seconds: past this, the rest of the owed feedback waits for the next one.
FEEDBACK_BUDGET_S = 30.0


def deliver_feedback(settings: Settings, job_ids: list[str], *, budget_s: float = FEEDBACK_BUDGET_S) -> dict[str, int]:
    """Deliver the owed feedback of ``job_ids``, each in its own committed transaction; a job whose row another
    delivery holds is skipped. Returns how many were delivered and how many failed (recorded, owed again)."""
    counts = {"delivered": 0, "undelivered": 0}
    if not job_ids:
        return counts
    factory = sessions(settings.database_url)
    # No token: nothing is sent, and each delivery only clears what the job owed.
    client = github.make_client(settings, attempts=2, max_wait_s=10.0) if settings.github_token else None
    started = time.monotonic()
    try:
        for job_id in job_ids:
            if time.monotonic() - started > budget_s:
                break
            with factory() as session:
                try:
                    done = github.send_owed(session, settings, job_id, client=client)
                    session.commit()
                except Exception:
                    session.rollback()
                    log.exception("job %s: delivering its GitHub feedback raised", job_id)
                    done = False
            if done is True:
                counts["delivered"] += 1
            elif done is False:
                counts["undelivered"] += 1
    finally:
        if client is not None:
            client.close()
    return counts


def run(settings: Settings) -> dict[str, int]:
    """One sweep; returns how many messages were sent again, how many jobs failed for good, how many the dispatch
    offered, and how many owed GitHub feedbacks were delivered or failed again."""
    with sessions(settings.database_url)() as session:
        report = sweep.sweep(
            session, cfg=settings.sweep, now=utcnow(), pending=lambda name: queue.pending(settings, name)
        )
        session.commit()
        for send in report.sends:
            if send.message is not None:
                queue.enqueue_profile(settings, send.message)
            else:
                queue.enqueue_analysis(settings, job_id=send.job_id)
            log.warning("job %s: sent %s again (%s)", send.job_id, send.task, send.why)
        for job_id in report.failed:
            log.warning("job %s: failed: out of attempts", job_id)
        offered = dispatch.after_commit(session, settings, report.dispatch)
    counts = deliver_feedback(settings, report.feedback)
    return {"resent": len(report.sends), "failed": len(report.failed), "offered": offered, **counts}
