from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Select, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, make_transient_to_detached

from service.jobs.models import Job

_Q = TypeVar("_Q", bound=Select[*tuple[Any, ...]])
_NULL_ROW: dict[str, Any] = dict.fromkeys(c.key for c in Job.__table__.columns)
_INSERT_JOB = {
    backend.dialect.name: backend.insert(Job.__table__)
    .on_conflict_do_nothing(index_elements=["project_id", "idempotency_key"])
    .returning(Job.__table__.c.id)
    for backend in (postgresql, sqlite)
}


def add(session: Session, job: Job) -> Job:
    session.add(job)
    session.flush()
    return job


def insert_unless_key_taken(session: Session, values: dict[str, Any]) -> Job | None:
    """The job inserted from ``values`` (columns left out are null), or None when its project already has a job
    with its idempotency key: one ``INSERT ... ON CONFLICT DO NOTHING RETURNING id``, no savepoint, no flush.
    The job comes back as the session's object, built from ``values`` rather than read back."""
    row = _NULL_ROW | values
    # The values go as parameters of one statement built once, not into a new statement (27 bound values
    # coerced anew on every request cost as much as executing it).
    stmt = _INSERT_JOB[session.get_bind().dialect.name]
    if session.scalar(stmt, row) is None:
        return None
    job = Job(**row)
    make_transient_to_detached(job)  # as if loaded: every attribute set, none pending
    session.add(job)
    return job


def get(session: Session, job_id: str) -> Job | None:
    return session.get(Job, job_id)


def get_for_update(session: Session, job_id: str) -> Job | None:
    """The job row, locked until the transaction ends (Postgres; SQLite serialises writers anyway), read afresh:
    a job this session loaded before the lock gets the row's values as they are now."""
    q = select(Job).where(Job.id == job_id).with_for_update().execution_options(populate_existing=True)
    return session.scalars(q).one_or_none()


def get_by_idempotency_key(session: Session, project_id: int, key: str) -> Job | None:
    q = select(Job).where(Job.project_id == project_id, Job.idempotency_key == key)
    return session.scalars(q).one_or_none()


def listing(
    q: _Q,
    *,
    project_id: int,
    status: str | None,
    branch: str | None,
    pr: int | None,
    before: tuple[datetime, str] | None,
    limit: int,
) -> _Q:
    """``q`` (a select over ``jobs``) narrowed to one page of the project's jobs, newest first
    (``ix_jobs_listing``); ``before`` is the keyset cursor (created_at, id) of the page's start."""
    q = q.where(Job.project_id == project_id)
    if status is not None:
        q = q.where(Job.status == status)
    if branch is not None:
        q = q.where(Job.branch == branch)
    if pr is not None:
        q = q.where(Job.pr == pr)
    if before is not None:
        q = q.where((Job.created_at < before[0]) | ((Job.created_at == before[0]) & (Job.id < before[1])))
    return q.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit)


def list_jobs(
    session: Session,
    *,
    project_id: int,
    status: str | None,
    branch: str | None,
    pr: int | None,
    before: tuple[datetime, str] | None,
    limit: int,
) -> list[Job]:
    q = listing(select(Job), project_id=project_id, status=status, branch=branch, pr=pr, before=before, limit=limit)
    return list(session.scalars(q))


def _stale(session: Session, q: Select[Job], limit: int) -> list[Job]:
    # SKIP LOCKED: two sweeps at once (a beat that fired twice) each take different rows, never the same.
    return list(session.scalars(q.order_by(Job.created_at).limit(limit).with_for_update(skip_locked=True)))


def lease_expired(session: Session, *, status: str, now: datetime, limit: int) -> list[Job]:
    """Jobs in ``status`` (``running``, ``analyzing``) whose lease ran out before ``now`` (``ix_jobs_lease``), oldest
    first, locked. A held job without a lease (one held when the leases were introduced) counts as expired."""
    q = select(Job).where(Job.status == status, (Job.lease_expires_at < now) | Job.lease_expires_at.is_(None))
    return _stale(session, q, limit)


def extend_lease(session: Session, *, job_id: str, status: str, until: datetime) -> bool:
    """Move the lease of job ``job_id`` to ``until`` if it is still in ``status``, in one statement (no row is
    loaded); False when it is not."""
    q = update(Job).where(Job.id == job_id, Job.status == status).values(lease_expires_at=until)
    return bool(session.execute(q.execution_options(synchronize_session=False)).rowcount)  # type: ignore[attr-defined]


def unchanged_since(session: Session, *, status: str, before: datetime, limit: int) -> list[Job]:
    """Jobs in ``status`` whose row has not changed since ``before``, oldest first, locked."""
    return _stale(session, select(Job).where(Job.status == status, Job.updated_at < before), limit)
