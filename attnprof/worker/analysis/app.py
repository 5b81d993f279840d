"""The analysis worker's Celery app (CPU host, with the database): ``analysis.run(job_id)`` and ``jobs.sweep()`` on
``analysis`` (docs/architecture.md, "Task messages"), the sweep sent by beat every ``ATTNPROF_SWEEP__INTERVAL_S``
seconds.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from celery import Celery  # type: ignore[import-untyped]
from celery.signals import beat_embedded_init  # type: ignore[import-untyped]

from attnprof.contract import tasks
from attnprof.server.config import Settings
from attnprof.worker.analysis import sweeper, verdict
from attnprof.worker.celery_base import make_celery


def make_app(settings: Settings) -> Celery:
    """The app whose tasks analyse and sweep with ``settings``, and whose beat sends the sweep."""
    app = make_celery("attnprof-analysis", broker_url=settings.broker_url, broker_folder=settings.broker_folder)
    app.conf.update(
        task_default_queue=tasks.ANALYSIS_QUEUE,
        task_routes={
            tasks.ANALYSIS_TASK: {"queue": tasks.ANALYSIS_QUEUE},
            tasks.SWEEP_TASK: {"queue": tasks.ANALYSIS_QUEUE},
        },
        beat_schedule={
            "sweep": {
                "task": tasks.SWEEP_TASK,
                "schedule": settings.sweep.interval_s,
                # A sweep that waited longer than one interval is stale: the next one does its work.
                "options": {"queue": tasks.ANALYSIS_QUEUE, "expires": settings.sweep.interval_s},
            }
        },
    )

    @app.task(name=tasks.ANALYSIS_TASK, shared=False, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def analysis_run(job_id: str) -> str | None:
        """Compare a job's stored run with its baseline and record the verdict."""
        return verdict.run(job_id, settings)

    @app.task(name=tasks.SWEEP_TASK, shared=False, acks_late=True)  # type: ignore[untyped-decorator]
    def jobs_sweep() -> dict[str, int]:
        """Send again what was lost; re-queue or fail what a dead worker held; deliver the GitHub feedback owed."""
        return sweeper.run(settings)

    return app


@beat_embedded_init.connect  # type: ignore[untyped-decorator]
def _beat_dies_with_its_worker(**_: object) -> None:
    """The embedded beat (``-B``) is a child process of the analysis worker: make it stop when the worker dies,
    even by SIGKILL. An orphaned beat would keep sending sweeps beside the next worker's own."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the worker died before the request was made
        os._exit(0)
