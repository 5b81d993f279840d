"""Feedback to the code host when a job is finished: the hook that the analysis task calls.

GitHub feedback (a commit status and a pull-request comment, kernel by kernel) belongs to the "CI
integration" issue and is not built yet. Until then this hook does nothing, by design: the job's verdict
and comparison are stored and served by the API, and the submitting CI step reads them with
``attnprof submit --wait``.
"""

from __future__ import annotations

from sqlalchemy.orm import Session


def notify_job_finished(session: Session, *, job_id: str) -> None:
    """Called by ``analysis.run`` after job ``job_id`` got its verdict, in the task's transaction.

    Does nothing yet (see the module's docstring). Whatever fills it must not raise for a code host that is
    down: the verdict is already the truth, and feedback is retried from the stored state, not from here.
    """
    del session, job_id
