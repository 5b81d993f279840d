"""The plain code behind ``analysis.run(job_id)`` (CPU hosts, database access).

The run is already stored (the result upload did it, in its request's transaction). The task holds the job by a
lease (docs/architecture.md, "Jobs, attempts and leases"): it takes it in a short transaction of its own when it
starts (``analyzing`` for ``ATTNPROF_SWEEP__ANALYZING_STALE_S``), and a thread renews it every third of that, each
renewal in its own short transaction, while the work goes on. A worker killed mid-analysis stops renewing; the sweep
sends ``analysis.run`` again once the lease runs out, whatever the broker's ``unacked`` hash says.

The work itself, in one transaction committed here at the task's boundary: compare the run with its baseline,
store the comparison, look for change points when the run is on the default branch
(``attnprof.server.comparisons.analyze`` does all of that), then lock the job's row and record the verdict (``analyzing
→ done``), which marks the job's GitHub feedback as owed. The row is locked only for that last step: if another
delivery recorded its verdict first (or the job was cancelled), this one's comparison is rolled back, so a job gets
exactly one comparison, and a repeated message for a job already done sends nothing.

Once that transaction is committed, and only then, the feedback is sent from the stored rows
(``attnprof.server.github.outbox``: short transactions of its own, none open while GitHub answers), so the verdict never
waits on GitHub; what GitHub refuses stays owed for the sweep.

An analysis that cannot be made (the service says why: a ``ServiceError``) fails the job with that reason and
sends its ``error`` feedback the same way; any other exception is raised, the job stays ``analyzing``, and the
sweeper sends the task again when the lease runs out.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from attnprof.server.config import Settings
from attnprof.server.errors import ServiceError
from attnprof.server.github import outbox
from attnprof.server.jobs import service as jobs
from attnprof.worker.analysis.database import sessions

log = logging.getLogger(__name__)


class LeaseRenewal(threading.Thread):
    """Renews the analysis lease of one job every third of ``lease_s``, each time in a transaction of its own,
    until ``finish`` or until the job is no longer ``analyzing``."""

    def __init__(self, factory: sessionmaker[Session], job_id: str, lease_s: float) -> None:
        super().__init__(name=f"lease-{job_id}", daemon=True)
        self._factory = factory
        self._job_id = job_id
        self._lease_s = lease_s
        self._done = threading.Event()
        self.renewals = 0

    def run(self) -> None:
        while not self._done.wait(self._lease_s / 3):
            try:
                with self._factory() as session:
                    held = jobs.renew_analysis(session, job_id=self._job_id, lease_s=self._lease_s)
                    session.commit()
            except Exception:  # a database hiccup: the next renewal may pass; the lease has two more thirds
                log.exception("job %s: the analysis lease could not be renewed", self._job_id)
                continue
            if not held:
                return
            self.renewals += 1

    def finish(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join()


def run(job_id: str, settings: Settings) -> str | None:
    """Analyse job ``job_id``; returns its verdict (that of a job already done, for a repeated message),
    ``"failed"``, or ``None`` when there is nothing to do (a cancelled job, another delivery's verdict first)."""
    factory = sessions(settings.database_url)
    lease_s = settings.sweep.analyzing_stale_s
    with factory() as session:
        job = jobs.take_analysis(session, job_id=job_id, lease_s=lease_s)
        status, verdict = (job.status, job.verdict) if job is not None else (None, None)
        session.commit()
    if status != "analyzing":
        return verdict if status == "done" else None
    log.info("job %s: analysing (lease %.0f s)", job_id, lease_s)
    renewal = LeaseRenewal(factory, job_id, lease_s)
    renewal.start()
    try:
        outcome = _analyse(factory, job_id, settings, renewal)
    finally:
        renewal.finish()
    if outcome is not None:  # committed: the verdict's (or the failure's) feedback, from the stored rows
        outbox.deliver_owed(factory, settings, [job_id])
    return outcome


def _analyse(factory: sessionmaker[Session], job_id: str, settings: Settings, renewal: LeaseRenewal) -> str | None:
    with factory() as session:
        try:
            found = jobs.compare_job(session, job_id=job_id, cfg=settings.analysis)
            if found is not None and settings.analysis.pause_s:
                log.info("job %s: pausing %.1f s before the verdict (the test knob)", job_id, settings.analysis.pause_s)
                time.sleep(settings.analysis.pause_s)
            # No renewal may wait on the row lock that recording the verdict takes (it ends the lease anyway).
            renewal.finish()
            if found is None or not jobs.record_verdict(session, job_id=job_id, comparison=found):
                session.rollback()
                log.info("job %s: not analysing: no longer analyzing (another delivery recorded it)", job_id)
                return None
            session.commit()
            log.info("job %s: verdict %s", job_id, found.verdict)
            return found.verdict
        except ServiceError as exc:
            session.rollback()
            log.warning("job %s: the analysis failed: %s", job_id, exc.detail)
            jobs.fail_analysis(session, job_id=job_id, reason=f"the analysis failed: {exc.detail}")
            session.commit()
            return "failed"
