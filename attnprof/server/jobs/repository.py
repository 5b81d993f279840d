from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import BindParameter, Select, bindparam, case, exists, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, make_transient_to_detached

from attnprof.server.comparisons.models import AlertWebhook
from attnprof.server.jobs.models import (
    OFFERED_SQL,
    OPEN_PR_SQL,
    QUEUED_SQL,
    RUNNING_SQL,
    WAITING_SQL,
    Job,
    PairedResult,
)
from attnprof.server.testbeds.models import Worker
from attnprof.server.testbeds.repository import ON_QUARANTINED_HOST

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


def of_matrix(session: Session, matrix_id: str) -> list[Job]:
    """The jobs of one submission's matrix of testbeds (``ix_jobs_matrix_id``; a matrix holds a handful). Its jobs
    share one ``created_at``, so that none is the newer of a pull request's jobs."""
    q = select(Job).where(Job.matrix_id == matrix_id).order_by(Job.testbed_id)
    return list(session.scalars(q))


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


def offered_unchanged_since(session: Session, *, before: datetime, limit: int) -> list[Job]:
    """Queued jobs offered (a message made for them) before ``before``, oldest offer first, locked. A job waiting for
    the dispatcher was never sent a message: nothing of it can be lost in the broker."""
    q = select(Job).where(text(OFFERED_SQL), Job.offered_at < before).order_by(Job.offered_at)
    return list(session.scalars(q.limit(limit).with_for_update(skip_locked=True)))


# --- the dispatcher -----------------------------------------------------------------------------------------

_TESTBED: BindParameter[int] = bindparam("testbed_id")
_LIVE = (
    select(func.count())
    .select_from(Worker)
    .where(Worker.testbed_id == _TESTBED, Worker.last_seen_at >= bindparam("since"), ~ON_QUARANTINED_HOST)
    .scalar_subquery()
)
_RUNNING = select(func.count()).select_from(Job).where(Job.testbed_id == _TESTBED, text(RUNNING_SQL)).scalar_subquery()
_OFFERED = select(func.count()).select_from(Job).where(Job.testbed_id == _TESTBED, text(OFFERED_SQL)).scalar_subquery()
_OCCUPANCY = select(_LIVE, _RUNNING, _OFFERED, exists().where(Job.testbed_id == _TESTBED, text(WAITING_SQL)))


def occupancy(session: Session, *, testbed_id: int, live_since: datetime) -> tuple[int, int, int, bool]:
    """(live workers, jobs running, jobs offered, whether any job waits) of a testbed, in one statement."""
    row = session.execute(_OCCUPANCY, {"testbed_id": testbed_id, "since": live_since}).one()
    return int(row[0]), int(row[1]), int(row[2]), bool(row[3])


def in_flight_by_project(session: Session, *, testbed_id: int) -> dict[int, int]:
    """Jobs running or offered on a testbed, per project."""
    flying = select(Job.project_id).where(Job.testbed_id == testbed_id, text(f"({RUNNING_SQL}) OR ({OFFERED_SQL})"))
    counts: dict[int, int] = {}
    for project_id in session.scalars(flying):
        counts[project_id] = counts.get(project_id, 0) + 1
    return counts


def waiting_projects(session: Session, *, testbed_id: int) -> dict[int, tuple[bool, datetime]]:
    """The projects with jobs waiting for the dispatcher on a testbed, each with whether all its waiting jobs are
    background ones (a bisection's probes) and its oldest waiting job's time."""
    q = (
        select(Job.project_id, func.min(case((Job.background, 1), else_=0)), func.min(Job.created_at))
        .where(Job.testbed_id == testbed_id, text(WAITING_SQL))
        .group_by(Job.project_id)
    )
    return {int(p): (bool(background), oldest) for p, background, oldest in session.execute(q)}


_LAST_OFFER = (
    select(func.max(Job.offered_at))
    .where(Job.testbed_id == bindparam("testbed_id"), Job.project_id == bindparam("project_id"))
    .where(text("offered_at IS NOT NULL"))
)


def last_offer(session: Session, *, testbed_id: int, project_id: int) -> datetime | None:
    """When a job of the project was last offered on the testbed (``ix_jobs_offers``); None: never."""
    found: datetime | None = session.scalar(_LAST_OFFER, {"testbed_id": testbed_id, "project_id": project_id})
    return found


def next_waiting(session: Session, *, testbed_id: int, project_id: int, limit: int) -> list[Job]:
    """The project's oldest jobs waiting for the dispatcher on the testbed, its background ones last, locked (a row
    another transaction holds, a cancel's, is skipped: it is not waiting for long)."""
    q = (
        select(Job)
        .where(Job.testbed_id == testbed_id, Job.project_id == project_id, text(WAITING_SQL))
        .order_by(Job.background, Job.created_at, Job.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    )
    return list(session.scalars(q))


def testbeds_waiting(session: Session) -> list[int]:
    """The testbeds that have jobs waiting for the dispatcher."""
    return list(session.scalars(select(Job.testbed_id).where(text(WAITING_SQL)).distinct().order_by(Job.testbed_id)))


# --- a submission -------------------------------------------------------------------------------------------

_COUNT_QUEUED = (
    select(func.count())
    .select_from(
        select(Job.id)
        .where(Job.project_id == bindparam("project_id"), text(QUEUED_SQL))
        .limit(bindparam("up_to"))
        .subquery()
    )
    .scalar_subquery()
)


def count_queued(session: Session, *, project_id: int, up_to: int) -> int:
    """The project's queued jobs (its own uncommitted ones included), counted up to ``up_to``."""
    return int(session.scalar(select(_COUNT_QUEUED), {"project_id": project_id, "up_to": up_to}) or 0)


_ADMISSION = select(_COUNT_QUEUED, _LIVE, _RUNNING, _OFFERED)


def admission(
    session: Session, *, project_id: int, up_to: int, testbed_id: int, live_since: datetime
) -> tuple[int, int, int, int]:
    """What a submission is admitted on, in one statement: (the project's queued jobs, its own included, counted up
    to ``up_to``; the testbed's live workers; its jobs running; its jobs offered)."""
    params = {"project_id": project_id, "up_to": up_to, "testbed_id": testbed_id, "since": live_since}
    row = session.execute(_ADMISSION, params).one()
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


# pg_advisory_xact_lock(class, id): the class of the lock on a project's queue (the id is the project's).
_QUEUE_LOCK_CLASS = 0x6A6F62  # "job"


def lock_queue(session: Session, *, project_id: int) -> None:
    """Hold the project's queue lock until the transaction ends (Postgres; SQLite serialises writers anyway)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(_QUEUE_LOCK_CLASS, project_id)))


def open_jobs_of_pr(
    session: Session, *, project_id: int, repo: str, pr: int, other_than: str, created_before: datetime
) -> list[Job]:
    """The project's queued and running jobs of pull request ``pr`` of ``repo`` for a commit other than
    ``other_than``, created before ``created_before``, locked, oldest first (``ix_jobs_open_pr``)."""
    q = (
        select(Job)
        .where(Job.project_id == project_id, Job.pr == pr, text(OPEN_PR_SQL))
        .where(Job.repo == repo, Job.commit != other_than, Job.created_at < created_before)
        .order_by(Job.created_at, Job.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return list(session.scalars(q))


# --- the feedback outbox (``feedback_due_at``) --------------------------------------------------------------
# The state a job's GitHub feedback reports is written by the transaction that changes it; a sender delivers it
# afterwards from the stored row (``attnprof.server.github.outbox``). These statements lock nothing beyond themselves
# and leave ``updated_at`` as it is: a delivery changes no job's state.


def get_fresh(session: Session, job_id: str) -> Job | None:
    """The job row as committed now (not locked): a job this session loaded before gets the row's values."""
    q = select(Job).where(Job.id == job_id).execution_options(populate_existing=True)
    return session.scalars(q).one_or_none()


def feedback_due(session: Session, *, now: datetime, limit: int) -> list[str]:
    """Ids of the jobs whose owed GitHub feedback is due at ``now``, longest owed first (not locked: a delivery
    claims each, and skips one that another delivery holds). A claimed one is due later: it is not listed."""
    q = select(Job.id).where(Job.feedback_due_at <= now).order_by(Job.feedback_due_at, Job.id).limit(limit)
    return list(session.scalars(q))


def claim_feedback(session: Session, *, job_id: str, now: datetime, until: datetime) -> bool:
    """Claim the delivery of job ``job_id``'s feedback if it is owed and due at ``now``: ``feedback_due_at`` is
    moved to ``until`` in one conditional statement, so of two senders only one claims it, and the other (or the
    sweep) finds it due later. False when nothing is due: not owed, waiting out a backoff, or claimed already."""
    q = (
        update(Job)
        .where(Job.id == job_id, Job.feedback_due_at <= now)
        .values(feedback_due_at=until, updated_at=Job.updated_at)
    )
    return bool(session.execute(q.execution_options(synchronize_session=False)).rowcount)  # type: ignore[attr-defined]


def settle_feedback(
    session: Session, *, seen: Job, claim: datetime, due_at: datetime | None, attempts: int, reason: str | None
) -> bool:
    """Record what a delivery did, if the row is still as the sender read it (``seen``) under its claim: the same
    claim, status, reason and failure count. False when it is not (the row changed between the read and this
    statement): read it again and decide again."""
    q = (
        update(Job)
        .where(
            Job.id == seen.id,
            Job.feedback_due_at == claim,
            Job.status == seen.status,
            Job.feedback_attempts == seen.feedback_attempts,
            Job.reason.is_not_distinct_from(seen.reason),
        )
        .values(feedback_due_at=due_at, feedback_attempts=attempts, reason=reason, updated_at=Job.updated_at)
    )
    return bool(session.execute(q.execution_options(synchronize_session=False)).rowcount)  # type: ignore[attr-defined]


# --- a paired job's documents beside its run ------------------------------------------------------------------


def add_paired(session: Session, row: PairedResult) -> PairedResult:
    session.add(row)
    session.flush()
    return row


def paired_of(session: Session, job_id: str) -> PairedResult | None:
    return session.get(PairedResult, job_id)


def projects_to_notify(session: Session, *, testbed_id: int, since: datetime) -> list[int]:
    """Projects with an alert webhook and a job on the testbed since ``since``: those told of its hosts' quarantines."""
    used = exists().where(
        Job.project_id == AlertWebhook.project_id, Job.testbed_id == testbed_id, Job.created_at >= since
    )
    return [
        int(p) for p in session.scalars(select(AlertWebhook.project_id).where(used).order_by(AlertWebhook.project_id))
    ]
