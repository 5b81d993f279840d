"""The plain code behind ``jobs.sweep``: decide in one transaction, commit, then send (enqueue after commit), then
dispatch every testbed with jobs waiting (the catch-all behind the dispatch that follows each change of a slot),
then deliver the GitHub feedback that is owed and due (``attnprof.server.github.outbox``: each job claimed, sent with no
transaction open, and recorded, in short transactions of its own), and the new alerts owed to projects' webhooks
(``attnprof.server.comparisons.alert_outbox``, the same way). Between the two it starts, advances and reports the
bisections (``attnprof.server.github.bisect``): an alert's webhook owed again for a culprit goes out in the same
sweep. Each sweep also deletes the traces and bundles past their
project's retention (``attnprof.server.retention``, a bounded batch per project, in a transaction of its own), at most
every ``ATTNPROF_RETENTION__INTERVAL_S``."""

from __future__ import annotations

import logging

from attnprof.server import queue
from attnprof.server.comparisons import alert_outbox
from attnprof.server.config import Settings
from attnprof.server.db import utcnow
from attnprof.server.github import bisect, outbox
from attnprof.server.hosts import notices
from attnprof.server.jobs import dispatch, sweep
from attnprof.server.retention import service as retention
from attnprof.worker.analysis.database import sessions

log = logging.getLogger(__name__)

# A sweep runs every few seconds: past this, the rest of the owed feedback waits for the next one.
FEEDBACK_BUDGET_S = 30.0


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
        swept = retention.sweep(session, defaults=settings.retention) if retention.due(settings.retention) else None
        session.commit()
    counts = outbox.deliver_owed(
        sessions(settings.database_url),
        settings,
        report.feedback,
        run_ids=report.run_feedback,
        budget_s=FEEDBACK_BUDGET_S,
    )
    bisected = bisect.sweep(sessions(settings.database_url), settings)
    alerts = alert_outbox.deliver_owed(
        sessions(settings.database_url), settings.alert_webhooks, settings.public_url, budget_s=FEEDBACK_BUDGET_S
    )
    hosts = notices.deliver_owed(sessions(settings.database_url), settings.alert_webhooks, settings.public_url)
    return {
        "resent": len(report.sends),
        "failed": len(report.failed),
        "offered": offered,
        "traces_swept": swept.traces if swept else 0,
        "bundles_swept": swept.bundles if swept else 0,
        **counts,
        **alerts,
        **hosts,
        **bisected,
    }
