"""The plain code behind ``analysis.run(job_id)`` (CPU hosts, database access).

The run is already stored (the result upload did it, in its request's transaction). This compares it with
its baseline, stores the comparison, sets the job's verdict (``analyzing → done``), looks for change points
when the run is on the default branch (``service.analysis.analyze`` does all of that), then calls the
feedback hook (once: a repeated message for a job already done sends nothing). One transaction, committed here,
at the task's boundary.

An analysis that cannot be made (the service says why: a ``ServiceError``) fails the job with that reason and
sends its ``error`` feedback; any other exception is raised, the job stays ``analyzing``, and the sweeper sends
the task again.
"""

from __future__ import annotations

import logging

from service import feedback
from service.config import Settings
from service.errors import ServiceError
from service.jobs import repository as job_rows
from service.jobs import service as jobs
from worker.database import sessions

log = logging.getLogger(__name__)


def run(job_id: str, settings: Settings) -> str | None:
    """Analyse job ``job_id``; returns its verdict, ``"failed"``, or ``None`` when there is nothing to do
    (not analyzing: a duplicate message, a cancelled job)."""
    with sessions(settings.database_url)() as session:
        try:
            # Locked until the commit: a second delivery of this message waits, then finds the job done and sends
            # no second feedback.
            row = job_rows.get_for_update(session, job_id)
            was = row.status if row is not None else None
            found = jobs.analyze_job(session, job_id=job_id, cfg=settings.analysis)
            if found is None:
                session.rollback()
                return None
            if was == "analyzing":
                feedback.notify_job_finished(session, job_id=job_id, settings=settings)
            session.commit()
            log.info("job %s: verdict %s", job_id, found.verdict)
            return found.verdict
        except ServiceError as exc:
            session.rollback()
            log.warning("job %s: the analysis failed: %s", job_id, exc.detail)
            if jobs.fail_analysis(session, job_id=job_id, reason=f"the analysis failed: {exc.detail}") is not None:
                feedback.notify_job_finished(session, job_id=job_id, settings=settings)
            session.commit()
            return "failed"
