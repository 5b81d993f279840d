"""The tasks: thin, idempotent, named ``domain.verb``, taking ids. Each calls plain code, tested without Celery.

Nothing heavy is imported here: a GPU host's worker loads only the profile path (no database, no torch: the
profiler runs in a subprocess, so CUDA starts there, inside the task, never in the worker process).
"""

from __future__ import annotations

import logging

from service.config import get_settings
from worker.celery_app import app

# One line per request at INFO (every heartbeat) would bury what the tasks say.
logging.getLogger("httpx").setLevel(logging.WARNING)


@app.task(name="profile.run", acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
def profile_run(job_id: str, attempt: int, claim_secret: str) -> str:
    """One attempt of a profiling job (GPU host). ``claim_secret``: the message's one-time secret, which the claim
    shows the service (with the worker token) and which is never logged."""
    from worker.gpu import profile

    return profile.run_job(job_id, attempt, claim_secret, profile.ProfileConfig.from_settings(get_settings()))


@app.task(name="analysis.run", acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
def analysis_run(job_id: str) -> str | None:
    """Compare a job's stored run with its baseline and record the verdict (CPU host with the database)."""
    from worker.cpu import verdict as analysis

    return analysis.run(job_id, get_settings())


@app.task(name="jobs.sweep", acks_late=True)  # type: ignore[untyped-decorator]
def jobs_sweep() -> dict[str, int]:
    """Send again what was lost; re-queue or fail what a dead worker held; deliver the GitHub feedback owed."""
    from worker.cpu import sweeper

    return sweeper.run(get_settings())
