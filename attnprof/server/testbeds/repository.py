from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, exists, func, select, update
from sqlalchemy.orm import Session, aliased

from attnprof.contract.worker_api import host_of
from attnprof.server.db import insert_for
from attnprof.server.testbeds.models import Host, Testbed, Worker


def get_by_name(session: Session, name: str) -> Testbed | None:
    return session.scalars(select(Testbed).where(Testbed.name == name)).one_or_none()


_ID_BY_NAME = select(Testbed.id).where(Testbed.name == bindparam("name"))


def id_by_name(session: Session, name: str) -> int | None:
    found: int | None = session.scalar(_ID_BY_NAME, {"name": name})
    return found


def insert_if_new(session: Session, name: str) -> int | None:
    """The id of a testbed inserted as ``name``, or None when that name is taken (by a row committed meanwhile or
    by one another transaction is inserting: this waits for that one to end)."""
    stmt = insert_for(session)(Testbed).values(name=name).on_conflict_do_nothing(index_elements=["name"])
    found: int | None = session.scalar(stmt.returning(Testbed.id))
    return found


def get_by_key(session: Session, key: str) -> Testbed | None:
    return session.scalars(select(Testbed).where(Testbed.key == key).order_by(Testbed.id).limit(1)).one_or_none()


def get(session: Session, testbed_id: int, *, fresh: bool = False) -> Testbed | None:
    """The testbed; ``fresh``: read again from the database even when the session holds it."""
    return session.get(Testbed, testbed_id, populate_existing=fresh)


def key_if_none(session: Session, testbed_id: int, *, key: str, meaning: dict[str, Any]) -> bool:
    """Set the testbed's key and meaning if it has no key (one statement: of two transactions at once, the second
    waits for the first and then finds the key set); whether it set them."""
    q = update(Testbed).where(Testbed.id == testbed_id, Testbed.key.is_(None)).values(key=key, meaning=meaning)
    done = session.execute(q.execution_options(synchronize_session=False))
    return bool(done.rowcount)  # type: ignore[attr-defined]


def clear_key(session: Session, testbed_id: int) -> bool:
    """Forget the testbed's key and meaning (its next worker keys it again); whether it had one."""
    q = update(Testbed).where(Testbed.id == testbed_id, Testbed.key.is_not(None)).values(key=None, meaning=None)
    done = session.execute(q.execution_options(synchronize_session=False))
    return bool(done.rowcount)  # type: ignore[attr-defined]


def lock_for_dispatch(session: Session, testbed_id: int, now: datetime) -> str | None:
    """Take the testbed's dispatch lock until the transaction ends and return its name; None when there is no such
    testbed. On Postgres the lock is ``FOR UPDATE`` on its row, which also waits for every transaction inserting a
    job for it (their foreign key holds ``FOR KEY SHARE`` on the row until they end); on SQLite, the update of
    ``dispatched_at`` takes the database's write lock, which does the same."""
    found: str | None = session.scalar(select(Testbed.name).where(Testbed.id == testbed_id).with_for_update())
    if found is not None:
        q = update(Testbed).where(Testbed.id == testbed_id).values(dispatched_at=now)
        session.execute(q.execution_options(synchronize_session=False))
    return found


def worker_seen(session: Session, *, testbed_id: int, name: str, now: datetime) -> None:
    """Record that the worker ``name`` of the testbed is alive at ``now`` (one upsert), with its host."""
    host = host_of(name)
    values = {"testbed_id": testbed_id, "name": name, "host": host, "first_seen_at": now, "last_seen_at": now}
    stmt = insert_for(session)(Worker).values(**values)
    stmt = stmt.on_conflict_do_update(index_elements=["testbed_id", "name"], set_={"last_seen_at": now, "host": host})
    session.execute(stmt)


def worker_last_seen(session: Session, *, testbed_id: int, name: str) -> datetime | None:
    q = select(Worker.last_seen_at).where(Worker.testbed_id == testbed_id, Worker.name == name)
    found: datetime | None = session.scalar(q)
    return found


# A worker on a quarantined host (docs/service.md, "Host health") is not live: it claims no jobs.
ON_QUARANTINED_HOST = exists().where(
    Host.testbed_id == Worker.testbed_id, Host.name == Worker.host, Host.state == "quarantined"
)


def live_workers(session: Session, *, testbed_id: int, since: datetime) -> int:
    """Workers of the testbed seen since ``since``, less those on a quarantined host (they claim no jobs)."""
    q = select(func.count()).select_from(Worker)
    q = q.where(Worker.testbed_id == testbed_id, Worker.last_seen_at >= since, ~ON_QUARANTINED_HOST)
    return int(session.scalar(q) or 0)


def last_worker_seen(session: Session, testbed_id: int) -> datetime | None:
    """When a worker of the testbed last said it is alive; None: none ever did (``ix_workers_seen``)."""
    found: datetime | None = session.scalar(
        select(func.max(Worker.last_seen_at)).where(Worker.testbed_id == testbed_id)
    )
    return found


def forget_workers(session: Session, *, before: datetime) -> int:
    """Delete the workers not seen since ``before``, except each testbed's latest (which says when its testbed was
    last served); returns how many were deleted."""
    newer = aliased(Worker)
    q = delete(Worker).where(
        Worker.last_seen_at < before,
        exists().where(newer.testbed_id == Worker.testbed_id, newer.last_seen_at > Worker.last_seen_at),
    )
    return int(session.execute(q.execution_options(synchronize_session=False)).rowcount)  # type: ignore[attr-defined]
