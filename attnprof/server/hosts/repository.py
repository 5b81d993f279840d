from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from attnprof.server.db import insert_for
from attnprof.server.runs.models import Run
from attnprof.server.testbeds.models import Canary, Host, HostNotice, Worker

PASSING = ("learning", "healthy")


def host_for_update(session: Session, *, testbed_id: int, name: str, now: datetime) -> Host:
    """The host's row, made if new, locked until the transaction ends (two canaries of one host judge in turn)."""
    stmt = insert_for(session)(Host).values(testbed_id=testbed_id, name=name, state="learning", first_seen_at=now)
    session.execute(stmt.on_conflict_do_nothing(index_elements=["testbed_id", "name"]))
    q = select(Host).where(Host.testbed_id == testbed_id, Host.name == name).with_for_update()
    return session.scalars(q.execution_options(populate_existing=True)).one()


def passing_history(session: Session, *, testbed_id: int, since: datetime, mode: str) -> list[tuple[str, Any, Any]]:
    """(host, figures, clocks) of the testbed's passing canaries of ``mode`` since ``since``."""
    q = select(Canary.host, Canary.figures, Canary.clocks).where(
        Canary.testbed_id == testbed_id,
        Canary.created_at >= since,
        Canary.mode == mode,
        Canary.state.in_(PASSING),
    )
    return [(h, f, c) for h, f, c in session.execute(q)]


def hosts(session: Session, testbed_ids: Sequence[int] | None = None) -> list[Host]:
    q = select(Host).order_by(Host.testbed_id, Host.name)
    if testbed_ids is not None:
        q = q.where(Host.testbed_id.in_(testbed_ids))
    return list(session.scalars(q))


def host(session: Session, *, testbed_id: int, name: str) -> Host | None:
    return session.scalars(select(Host).where(Host.testbed_id == testbed_id, Host.name == name)).one_or_none()


def latest_canaries(session: Session, host_ids: Sequence[tuple[int, str]]) -> dict[tuple[int, str], Canary]:
    """Each (testbed, host)'s latest canary, in two statements whatever the number of hosts."""
    wanted = set(host_ids)
    if not wanted:
        return {}
    newest = (
        select(func.max(Canary.id))
        .where(Canary.testbed_id.in_({t for t, _ in wanted}))
        .group_by(Canary.testbed_id, Canary.host)
    )
    rows = session.scalars(select(Canary).where(Canary.id.in_(newest)))
    return {(c.testbed_id, c.host): c for c in rows if (c.testbed_id, c.host) in wanted}


def canary_seconds(session: Session, *, since: datetime) -> dict[int, float]:
    """The device seconds canaries took per testbed since ``since``."""
    q = (
        select(Canary.testbed_id, func.sum(Canary.seconds))
        .where(Canary.created_at >= since)
        .group_by(Canary.testbed_id)
    )
    return {int(t): float(s or 0.0) for t, s in session.execute(q)}


def mark_runs(session: Session, *, testbed_id: int, host: str, since: datetime | None, note: str) -> dict[int, int]:
    """Mark the host's runs of the testbed made since ``since`` (all of them: None) with ``note``, each once; how
    many per project."""
    where = [Run.testbed_id == testbed_id, Run.host == host, Run.host_note.is_(None)]
    if since is not None:
        where.append(Run.created_at >= since)
    counts: dict[int, int] = {}
    for project_id, n in session.execute(select(Run.project_id, func.count()).where(*where).group_by(Run.project_id)):
        counts[int(project_id)] = int(n)
    if counts:
        session.execute(update(Run).where(*where).values(host_note=note).execution_options(synchronize_session=False))
    return counts


def add_notices(session: Session, notices: Sequence[HostNotice]) -> None:
    session.add_all(notices)


def live_hosts(session: Session, *, testbed_id: int, since: datetime) -> list[tuple[str | None, str | None]]:
    """(host, its state or None when it never ran a canary) of each live worker of the testbed."""
    q = (
        select(Worker.host, Host.state)
        .outerjoin(Host, (Host.testbed_id == Worker.testbed_id) & (Host.name == Worker.host))
        .where(Worker.testbed_id == testbed_id, Worker.last_seen_at >= since)
    )
    return [(h, s) for h, s in session.execute(q)]
