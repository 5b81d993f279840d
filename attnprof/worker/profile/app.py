"""The profile worker's Celery app (GPU host): ``profile.run(job_id, attempt, claim_secret)``, consumed from
``profile.<testbed>`` (docs/architecture.md, "Task messages"; the sender names the queue; the secret is one-time,
and a claim needs it beside the worker token).

Nothing heavy is imported here: a GPU host's worker loads only the profile path (no database, no torch: the
profiler runs in a subprocess, so CUDA starts there, inside the task, never in the worker process).
"""

from __future__ import annotations

from celery import Celery  # type: ignore[import-untyped]

from attnprof.contract import tasks
from attnprof.contract.ids import JobId
from attnprof.worker.celery_base import make_celery
from attnprof.worker.profile import profile
from attnprof.worker.profile.health import Health
from attnprof.worker.profile.settings import GpuWorkerSettings


def make_app(settings: GpuWorkerSettings, health: Health | None = None) -> Celery:
    """The app whose one task profiles with ``settings`` (the device and jail already chosen by the start); with
    ``health``, each task first runs the host's canary when it is due."""
    app = make_celery("attnprof-profile", broker_url=settings.broker_url, broker_folder=settings.broker_folder)

    @app.task(name=tasks.PROFILE_TASK, shared=False, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def profile_run(job_id: str, attempt: int, claim_secret: str) -> str:
        """One attempt of a profiling job. ``claim_secret``: the message's one-time secret, which the claim shows
        the service (with the worker token) and which is never logged."""
        if health is not None:
            health.before_job()
        return profile.run_job(JobId(job_id), attempt, claim_secret, profile.ProfileConfig.from_settings(settings))

    return app
