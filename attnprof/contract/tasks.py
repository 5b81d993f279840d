"""The task contract between the service and the workers (docs/architecture.md, "Task messages"): task names,
queues, the message itself.

``profile.run(job_id, attempt, claim_secret)`` on ``profile.<testbed>``; ``analysis.run(job_id)`` and
``jobs.sweep()`` on ``analysis``. The service publishes these with kombu (``attnprof.server.queue``) and never imports a
worker; the workers' Celery apps register the same names. Framework-free: the standard library only.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from attnprof.contract.ids import JobId

PROFILE_TASK = "profile.run"
ANALYSIS_TASK = "analysis.run"
SWEEP_TASK = "jobs.sweep"
ANALYSIS_QUEUE = "analysis"


def profile_queue(testbed: str) -> str:
    return f"profile.{testbed}"


def transport_options(broker_url: str, broker_folder: str) -> dict[str, object]:
    """Kombu's transport options for the broker at ``broker_url`` (``broker_folder``: the filesystem:// broker's message
    folder, made here when missing)."""
    if broker_url.startswith("filesystem://"):
        folder = Path(broker_folder).resolve()
        for sub in ("out", "processed", "control"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        return {
            # Kombu's default control folder is ./control, relative to whatever directory a process runs in.
            "control_folder": str(folder / "control"),
            "data_folder_in": str(folder / "out"),
            "data_folder_out": str(folder / "out"),
            "processed_folder": str(folder / "processed"),
            "store_processed": False,
        }
    # A task is redelivered after this long unacknowledged; profiling runs can be long.
    return {"visibility_timeout": 3 * 3600}


# Celery's task message protocol 2 (what ``send_task`` writes and a Celery worker reads): the task's name and id in
# the headers, ``[args, kwargs, embed]`` as the JSON body.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
_ORIGIN = f"{socket.gethostname()}/{os.getpid()}"


def task_message(
    name: str, args: list[object], argsrepr: str | None = None
) -> tuple[list[object], dict[str, object], str]:
    """(body, headers, task id) of a protocol-2 task message calling ``name(*args)``, as Celery's ``send_task``
    writes it (tests/worker/test_pipeline.py shows a Celery worker running what this sends). ``argsrepr``: how
    Celery shows the arguments (logs, monitors), ``repr(args)`` unless given."""
    task_id = str(uuid.uuid4())
    headers: dict[str, object] = {
        "lang": "py",
        "task": name,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": repr(args) if argsrepr is None else argsrepr,
        "kwargsrepr": "{}",
        "origin": _ORIGIN,
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    return [args, {}, _EMBED], headers, task_id


@dataclass(frozen=True)
class ProfileMessage:
    """``profile.run(job_id, attempt, claim_secret)`` for the queue ``profile.<testbed>``: the offer of a job's next
    attempt to its testbed's workers. ``claim_secret`` is one-time and exists only here and in the message (the
    job row keeps its sha256): a claim must show it. Never logged (its ``repr`` leaves it out)."""

    job_id: JobId
    attempt: int
    testbed: str
    claim_secret: str = field(repr=False)
