"""Testbeds exist from their first use (docs/architecture.md, "Testbeds and fair dispatch"): by a job, a run or a
worker token.

A testbed's key and meaning (what must match for two runs to be compared: device, driver, mode) are its workers'
word alone: the first worker to start sets them from its own device, probed outside the jail before it takes a job,
with the testbed's worker token (``register``). A result document, an upload's or a job's (written by user code),
never changes them: one measured on another key is refused (``KeyMismatch``), and one for a testbed that no worker
has keyed yet is stored as what it claims while the testbed stays keyless (``for_run``).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from attnprof.core.testbed import testbed_key
from attnprof.server.errors import Conflict, InvalidPayload
from attnprof.server.testbeds import repository
from attnprof.server.testbeds.models import Testbed

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# A worker row unseen this long is deleted by the sweep (each testbed keeps its latest): a worker's name holds its
# process id, so every restart adds one.
FORGET_WORKERS_S = 24 * 3600.0


def check_name(name: str) -> str:
    # The name becomes a queue name (profile.<testbed>): keep it to characters every broker accepts.
    if not _NAME.fullmatch(name):
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


class KeyMismatch(InvalidPayload):
    """A result document measured on another testbed key than its testbed's (``environment.testbed_key``)."""


# A meaning is shown in errors and a job's reason; a document's is the user's own text: each part is bounded.
_SHOWN_PARTS = 8
_SHOWN_CHARS = 80


def describe(meaning: dict[str, Any] | None) -> str:
    """What a key hashes, in words (``device NVIDIA H200, driver 580.1, mode cuda``), bounded for an error."""
    if not meaning:
        return "nothing recorded"
    parts = []
    for name, value in sorted(meaning.items())[:_SHOWN_PARTS]:
        text = str(value)
        parts.append(f"{str(name)[:_SHOWN_CHARS]} {text[:_SHOWN_CHARS]}{'…' if len(text) > _SHOWN_CHARS else ''}")
    more = len(meaning) - _SHOWN_PARTS
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def for_run(session: Session, *, name: str | None, key: str, meaning: dict[str, Any]) -> Testbed:
    """The testbed a run belongs to: the one named, else the one keyed with the run's key, else one named after the
    key. Never changes the testbed's key or meaning: a keyed testbed takes runs of its key only (``KeyMismatch``,
    nothing changed); one with no key yet (no worker has registered) takes the run as what it claims to be, and stays
    keyless."""
    testbed = ensure(session, name) if name else repository.get_by_key(session, key) or ensure(session, key)
    if testbed.key is not None and testbed.key != key:
        raise KeyMismatch(
            f"environment.testbed_key: this document was measured on key {key} ({describe(meaning)}); testbed "
            f"{testbed.name} is key {testbed.key} ({describe(testbed.meaning)}), set by its workers: a testbed takes "
            "runs measured on its own device only"
        )
    return testbed


def register(session: Session, *, testbed_id: int, key: str, meaning: dict[str, str]) -> tuple[Testbed, bool]:
    """A worker of the testbed says, at start, which device it profiles on: (the testbed, whether this set its key).
    A testbed with no key takes this one; one with this key is left as it is; one with another key answers
    ``Conflict`` naming both devices (the worker must not start). Of two workers keying one testbed at once, the
    first to commit sets it and the other then compares with it. Not committed."""
    if testbed_key(meaning) != key:
        raise InvalidPayload(f"key: {key} is not the testbed key of meaning ({describe(meaning)})")
    keyed = repository.key_if_none(session, testbed_id, key=key, meaning=meaning)
    testbed = repository.get(session, testbed_id, fresh=True)
    if testbed is None:
        raise Conflict(f"testbed {testbed_id} is gone")
    if testbed.key != key:
        raise Conflict(
            f"this worker's device does not match testbed {testbed.name}: the testbed is {describe(testbed.meaning)} "
            f"(key {testbed.key}); this worker's device is {describe(meaning)} (key {key})"
        )
    return testbed, keyed


# --- live workers: jobs for a testbed with no live worker wait in ``queued``, and say so --------------------------
# (docs/architecture.md, "Testbeds and fair dispatch")


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
