"""Testbeds exist from their first use (DESIGN 3.5): by a job, a run or a worker token."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from service.errors import InvalidPayload
from service.testbeds import repository
from service.testbeds.models import Testbed

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# A worker row unseen this long is deleted by the sweep (each testbed keeps its latest): a worker's name holds its
# process id, so every restart adds one.
FORGET_WORKERS_S = 24 * 3600.0


def check_name(name: str) -> str:
    # The name becomes a queue name (profile.<testbed>): keep it to characters every broker accepts.
    if not _NAME.match(name):
        raise InvalidPayload(f"testbed {name!r}: letters, digits, '.', '_' and '-', at most 100 characters")
    return name


def ensure_id(session: Session, name: str) -> tuple[int, bool]:
    """The id of the testbed ``name``, created if new, and whether it existed (its row is committed). Two requests
    that first use one name at once both get its one row."""
    found = repository.id_by_name(session, check_name(name))
    if found is not None:
        return found, True
    inserted = repository.insert_if_new(session, name)
    if inserted is not None:
        return inserted, False
    found = repository.id_by_name(session, name)  # the other one's, committed meanwhile
    assert found is not None
    return found, True


def ensure(session: Session, name: str) -> Testbed:
    testbed = repository.get(session, ensure_id(session, name)[0])
    assert testbed is not None
    return testbed


def for_run(session: Session, *, name: str | None, key: str, meaning: dict[str, Any]) -> Testbed:
    """The testbed a run belongs to: the one named, else the one first seen with its key (named after the key)."""
    testbed = ensure(session, name) if name else repository.get_by_key(session, key) or ensure(session, key)
    testbed.key = key
    testbed.meaning = meaning
    return testbed


# --- live workers (DESIGN 3.5: jobs for a testbed with no live worker wait in ``queued``, and say so) ------------


def worker_alive(session: Session, *, testbed_id: int, name: str, now: datetime, live_s: float) -> tuple[int, bool]:
    """Record that worker ``name`` of the testbed is alive: (how many of its workers are live now, seen in the last
    ``live_s`` seconds, this one included; whether this one just appeared, new or back after ``live_s``)."""
    since = now - timedelta(seconds=live_s)
    before = repository.worker_last_seen(session, testbed_id=testbed_id, name=name)
    repository.worker_seen(session, testbed_id=testbed_id, name=name, now=now)
    return repository.live_workers(session, testbed_id=testbed_id, since=since), before is None or before < since


def no_live_worker(session: Session, *, testbed_id: int, name: str, live_s: float, now: datetime) -> str | None:
    """Why a job queued for the testbed does not start, when no live worker serves it; None while one does."""
    seen = repository.last_worker_seen(session, testbed_id)
    if seen is None:
        return f"no worker has ever served testbed {name}: the job waits in the queue until one starts"
    silent_s = (now - seen).total_seconds()
    if silent_s <= live_s:
        return None
    return f"no live worker has served testbed {name} for {silent_s:.0f} s: the job waits in the queue until one starts"


def forget_workers(session: Session, *, now: datetime) -> int:
    """Delete workers unseen for ``FORGET_WORKERS_S`` (each testbed keeps its latest); returns how many."""
    return repository.forget_workers(session, before=now - timedelta(seconds=FORGET_WORKERS_S))
