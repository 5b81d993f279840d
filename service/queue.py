"""Enqueueing by task name through a Celery client app (the service never imports the worker).

Always called after the commit that made the job row: if the broker is down the row stays ``queued`` and
the sweeper (``jobs.sweep``, beside the analysis worker) sends it again; the failure is logged, not raised.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from celery import Celery  # type: ignore[import-untyped]

from service.config import Settings

log = logging.getLogger(__name__)

PROFILE_TASK = "profile.run"
ANALYSIS_TASK = "analysis.run"
ANALYSIS_QUEUE = "analysis"


def profile_queue(testbed: str) -> str:
    return f"profile.{testbed}"


def transport_options(settings: Settings) -> dict[str, object]:
    if settings.broker_url.startswith("filesystem://"):
        folder = Path(settings.broker_folder).resolve()
        for sub in ("out", "processed"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        return {
            "data_folder_in": str(folder / "out"),
            "data_folder_out": str(folder / "out"),
            "processed_folder": str(folder / "processed"),
            "store_processed": False,
        }
    # A task is redelivered after this long unacknowledged; profiling runs can be long.
    return {"visibility_timeout": 3 * 3600}


@lru_cache(maxsize=8)
def _client(broker_url: str, folder: str) -> Celery:
    settings = Settings(broker_url=broker_url, broker_folder=folder)
    app = Celery("attnprof-service", broker=broker_url, set_as_current=False)
    app.conf.update(
        broker_transport_options=transport_options(settings),
        broker_connection_retry_on_startup=False,
        broker_connection_max_retries=1,
        task_acks_late=True,
        task_publish_retry=False,
    )
    return app


def client(settings: Settings) -> Celery:
    return _client(settings.broker_url, settings.broker_folder)


def _send(settings: Settings, name: str, args: list[object], queue: str) -> bool:
    try:
        client(settings).send_task(name, args=args, queue=queue)
    except Exception:  # the broker is down or unreachable: the row is the truth, the sweeper resends
        log.exception("enqueue %s on %s failed; the sweeper will send it again", name, queue)
        return False
    return True


def enqueue_profile(settings: Settings, *, job_id: str, attempt: int, testbed: str) -> bool:
    """Send ``profile.run(job_id, attempt)`` to ``profile.<testbed>``; False when the broker refused it."""
    return _send(settings, PROFILE_TASK, [job_id, attempt], profile_queue(testbed))


def enqueue_analysis(settings: Settings, *, job_id: str) -> bool:
    return _send(settings, ANALYSIS_TASK, [job_id], ANALYSIS_QUEUE)


def ping(settings: Settings) -> None:
    """Raise unless the broker answers."""
    if settings.broker_url.startswith("filesystem://"):
        folder = Path(settings.broker_folder)
        if not folder.is_dir():
            raise OSError(f"broker folder {folder} is missing")
        return
    with client(settings).connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)


def queue_depths(settings: Settings) -> dict[str, int]:
    """Messages waiting per queue, where the broker is Redis (a list per queue); empty otherwise."""
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        return {}
    import redis

    r = redis.Redis.from_url(settings.broker_url, socket_timeout=2)
    try:
        names = [n.decode() for n in r.scan_iter(match="profile.*", count=1000)] + [ANALYSIS_QUEUE]
        return {n: int(r.llen(n)) for n in names if r.type(n) == b"list"}
    finally:
        r.close()
