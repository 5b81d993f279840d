"""What both workers' Celery apps share (``attnprof.worker.profile.app``, ``attnprof.worker.analysis.app``): the broker
connection and how a message is handled. Neither side's code, the server's or the database's is imported here.

Late acknowledgement, rejection when the worker is lost and a prefetch of one: a message is acknowledged only after
its task ran, and a worker holds no job it is not running. Arguments are ids (and the one secret), never documents;
results are not kept (the job row is the truth). Redis in production and tests; kombu's ``filesystem://`` transport
for the embedded default on one machine.
"""

from __future__ import annotations

import logging

from celery import Celery  # type: ignore[import-untyped]

from attnprof.contract import tasks


def make_celery(name: str, *, broker_url: str, broker_folder: str) -> Celery:
    """A Celery app on the broker at ``broker_url`` (``broker_folder``: the ``filesystem://`` broker's message
    folder), with no task yet: each side registers its own."""
    filesystem = broker_url.startswith("filesystem://")
    options = tasks.transport_options(broker_url, broker_folder)
    if filesystem:
        options["polling_interval"] = 0.5  # seconds between looks at the message folder
    app = Celery(name, broker=broker_url, set_as_current=True)
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
        # Remote control needs fanout exchanges: on the folder broker they only add files to poll.
        worker_enable_remote_control=not filesystem,
        worker_send_task_events=False,
        worker_hijack_root_logger=True,
    )
    # One line per request at INFO (every heartbeat, every GitHub call) would bury what the tasks say.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return app
