"""Feedback to the code host when a job ends: the hooks that the analysis task, the worker's failure report, a
cancel and the sweep call.

Every move to a final state (``done`` with a verdict, ``failed``, ``timed_out``, ``cancelled``) owes the job's
commit status ``attnprof/<project>`` and, for a pull request, the project's one comment on it
(``service.github``). The debt is written on the job in the transaction that ends it, so it outlives a crash;
one delivery pays it. A code host that is down or refuses is recorded in the job's ``reason`` and retried by the
sweep from what is stored; the verdict and comparison are stored already and stay the truth.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from service.config import Settings, get_settings
from service.github import service as github
from service.jobs import repository as jobs
from service.jobs.models import Job

log = logging.getLogger(__name__)


def notify_job_finished(session: Session, *, job_id: str, settings: Settings | None = None) -> None:
    """Called by ``analysis.run`` after job ``job_id`` got its verdict or failed, in the task's transaction
    (which holds the job's row), before its commit.

    Never raises: GitHub's failures are recorded on the job (and owed to the sweep) by ``github.deliver``, and
    anything unexpected is logged, so that the verdict is committed whatever the code host does.
    """
    try:
        job = jobs.get(session, job_id)
        if job is not None:
            github.owe(job)
            github.deliver(session, settings or get_settings(), job)
    except Exception:
        log.exception("job %s: GitHub feedback raised", job_id)


def job_ended(job: Job) -> None:
    """Say, in the transaction that moves ``job`` to a final state, that it owes its feedback. Send it with
    ``deliver_after_commit`` once that transaction is committed."""
    github.owe(job)


def deliver_after_commit(session: Session, settings: Settings, job_id: str) -> None:
    """Deliver, from inside a request and after its commit, the feedback that ``job_ended`` wrote down; commits
    what it records and never raises (what it cannot deliver waits for the sweep)."""
    github.send_now(session, settings, job_id)
