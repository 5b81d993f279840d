"""The workers' Celery app, configured from the settings (``ATTNPROF_BROKER_URL`` and the rest).

The task contract (DESIGN 3.4): ``profile.run(job_id, attempt, claim_secret)`` on ``profile.<testbed>`` (the
sender names the queue; the secret is one-time, and a claim needs it beside the worker token),
``analysis.run(job_id)`` on ``analysis``, ``jobs.sweep`` on ``analysis`` every ``ATTNPROF_SWEEP__INTERVAL_S``
seconds from beat. Arguments are ids (and the one secret), never documents; results are not kept (the job row is
the truth). Late acknowledgement, rejection when the worker is lost and a prefetch of one: a message is
acknowledged only after its task ran, and a worker holds no job it is not running.

Redis in production and tests; kombu's ``filesystem://`` transport for the embedded default on one machine.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from celery import Celery  # type: ignore[import-untyped]
from celery.signals import beat_embedded_init  # type: ignore[import-untyped]

from attnprof.contract import tasks
from service.config import Settings, get_settings


def make_app(settings: Settings) -> Celery:
    filesystem = settings.broker_url.startswith("filesystem://")
    options = tasks.transport_options(settings.broker_url, settings.broker_folder)
    if filesystem:
        options["polling_interval"] = 0.5  # seconds between looks at the message folder
    app = Celery("attnprof", broker=settings.broker_url, include=["worker.tasks"], set_as_current=True)
    app.conf.update(
        broker_transport_options=options,
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
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
        # Remote control needs fanout exchanges: on the folder broker they only add files to poll.
        worker_enable_remote_control=not filesystem,
        worker_send_task_events=False,
        worker_hijack_root_logger=True,
    )
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


app = make_app(get_settings())
