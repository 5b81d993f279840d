"""Feedback to the code host when a job is finished: the hook that the analysis task calls.

It sends the job's commit status ``attnprof/<project>`` and, for a pull request, updates the project's one
comment on it (``service.github``). A code host that is down or refuses is recorded in the job's ``reason``;
the verdict and comparison are stored already and stay the truth.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from service.config import get_settings
from service.github import service as github

log = logging.getLogger(__name__)


def notify_job_finished(session: Session, *, job_id: str) -> None:
    """Called by ``analysis.run`` after job ``job_id`` got its verdict, in the task's transaction.

    Never raises: GitHub's failures are recorded on the job by ``github.send``, and anything unexpected is
    logged, so that the verdict is committed whatever the code host does.
    """
    try:
        github.send(session, get_settings(), job_id)
    except Exception:
        log.exception("job %s: GitHub feedback raised", job_id)
