"""The worker's side of a job (docs/architecture.md, "Jobs, attempts and leases"): offering an attempt, claiming
it, the attempt's token and its lease.

A worker token only proves which testbed a GPU host serves. Every ``profile.run`` message carries a one-time
claim secret; the job row keeps only its sha256, replaced whenever a new message is made for the job (the
dispatcher's offer of its next attempt, a sweep's resend), so an older message then claims nothing. A claim needs
both the worker token of the job's testbed and the secret of the job's latest message. A wrong or missing secret
is answered as an unknown job is (404): a job id read from the broker plus a worker token opens nothing. A claim
showing the right secret for a job that is no longer waiting for that attempt (a duplicate delivery) answers 409,
and the worker drops it.

The one claim that succeeds answers with the attempt's job token (stored as its sha256 on the row), and only that
token opens the job's bundle, heartbeat, result, failure and trace routes, for that attempt:

- it works while the attempt runs (``running``), and is revoked when the attempt ends: its failure recorded, the
  job re-queued or failed by the sweep because its lease ran out, or cancelled (a cancelled attempt's heartbeat is
  still told so, and nothing else);
- once the attempt's result is stored it opens only the trace uploads (the worker sends them right after the
  result) and a repeat of the result (answered as a duplicate), for ``TRACE_UPLOAD_S`` more, whatever the job's
  state meanwhile (``analyzing``, ``done``).

A claim that succeeded but whose answer was lost is not answered a second time (the same secret again is a
duplicate, 409): nobody then renews the lease, and the sweep gives the job to the next attempt once it runs out.

A job in ``running`` is a lease: the claim takes it for ``lease_s`` (``ATTNPROF_SWEEP__HEARTBEAT_STALE_S``), each
heartbeat renews it, and the sweep re-queues a job whose lease ran out, from the row alone.

Nothing here commits or sends: the routes commit, then send the messages made here.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from attnprof.contract import ids, tasks
from attnprof.contract.provenance import Provenance
from attnprof.contract.worker_api import host_of
from attnprof.server.artifacts.store import store
from attnprof.server.auth.service import Principal, hash_secret
from attnprof.server.config import Retention
from attnprof.server.db import utcnow
from attnprof.server.errors import Conflict, NotFound, Unauthorized
from attnprof.server.hosts import service as hosts
from attnprof.server.jobs import paired as paired_documents
from attnprof.server.jobs import repository
from attnprof.server.jobs.models import Job
from attnprof.server.runs import service as runs
from attnprof.server.runs.models import Run
from attnprof.server.testbeds import repository as testbed_rows
from attnprof.server.testbeds.models import Testbed

CLAIM_SECRET_PREFIX = "apc_"
JOB_TOKEN_PREFIX = "apj_"
# How long after its result an attempt's token still uploads that result's traces (a 100-case suite sends 100 traces
# of up to 64 MiB each, one after the other, right after the result).
TRACE_UPLOAD_S = 900.0


@dataclass(frozen=True)
class ClaimSecret:
    """A profile message's one-time secret: ``plain`` goes into the message only, the row keeps ``sha256``."""

    plain: str = field(repr=False)
    sha256: str

    @classmethod
    def new(cls) -> ClaimSecret:
        plain = CLAIM_SECRET_PREFIX + secrets.token_urlsafe(32)
        return cls(plain=plain, sha256=hash_secret(plain))


def _matches(stored_sha256: str | None, presented_sha256: str) -> bool:
    return stored_sha256 is not None and hmac.compare_digest(stored_sha256, presented_sha256)


def offer_next_attempt(job: Job, testbed: str, *, now: datetime | None = None) -> tasks.ProfileMessage:
    """The ``profile.run`` message offering ``job``'s next attempt to the workers of ``testbed``: every profile
    message is made here (by the dispatcher, ``attnprof.server.jobs.dispatch``, and the sweep's resend of a lost one),
    and sent by ``queue.enqueue_profile`` once the transaction is committed.

    A new secret replaces the row's (an earlier message for the job then claims nothing), and the job counts as
    offered from ``now``, in the caller's transaction."""
    secret = ClaimSecret.new()
    job.claim_secret_sha256 = secret.sha256
    job.offered_at = now or utcnow()
    return tasks.ProfileMessage(
        job_id=ids.JobId(job.id), attempt=job.attempts + 1, testbed=testbed, claim_secret=secret.plain
    )


def charge(job: Job, until: datetime) -> None:
    """Add the attempt that holds ``job`` to its GPU time: from its claim (``started_at``) to ``until``."""
    if job.started_at is not None:
        job.gpu_seconds = (job.gpu_seconds or 0.0) + max(0.0, (until - job.started_at).total_seconds())


def end_attempt(job: Job) -> None:
    """The attempt that held ``job`` is over: its token opens nothing more, and nobody holds a lease. The worker
    that ran it stays in ``claimed_by`` (the next claim replaces it): a failed job's page names the host whose log
    it shows."""
    job.job_token_sha256 = None
    job.job_token_expires_at = None
    job.lease_expires_at = None


def wait_again(job: Job) -> None:
    """``job`` is queued again for its next attempt: it waits in the database until the dispatcher offers it (no
    message claims it meanwhile)."""
    job.status = "queued"
    job.offered_at = None
    job.claim_secret_sha256 = None


def _stale(job: Job, attempt: int) -> Conflict:
    return Conflict(f"job {job.id} is {job.status} at attempt {job.attempts}: attempt {attempt} is stale")


def claim(
    session: Session,
    worker: Principal,
    job_id: str,
    *,
    attempt: int,
    worker_name: str,
    secret: str,
    lease_s: float,
    now: datetime | None = None,
) -> tuple[Job, str]:
    """Start ``attempt`` of a queued job of the worker's testbed: (the job, the attempt's job token, shown once).

    ``NotFound`` for a job that does not exist, is another testbed's, or whose latest message did not carry
    ``secret`` (answered alike); ``Conflict`` for a stale or duplicate delivery: drop it."""
    job = repository.get_for_update(session, job_id)
    if job is None or job.testbed_id != worker.testbed_id or not _matches(job.claim_secret_sha256, hash_secret(secret)):
        raise NotFound(f"no job {job_id} for this worker's testbed")
    if job.status != "queued" or attempt != job.attempts + 1:
        raise _stale(job, attempt)
    now = now or utcnow()
    token = JOB_TOKEN_PREFIX + secrets.token_urlsafe(32)
    job.status = "running"
    job.attempts = attempt
    job.claimed_by = worker_name
    job.heartbeat_at = job.started_at = now
    job.lease_expires_at = now + timedelta(seconds=lease_s)
    job.job_token_sha256 = hash_secret(token)
    job.job_token_expires_at = None
    return job, token


def unoffer(session: Session, worker: Principal, job_id: str, *, attempt: int, secret: str) -> Job | None:
    """Put back in the queue a job whose message a worker that may not run it took (its host is quarantined): the
    job, or None when the message was not the job's latest (nothing to put back)."""
    job = repository.get_for_update(session, job_id)
    if job is None or job.testbed_id != worker.testbed_id or not _matches(job.claim_secret_sha256, hash_secret(secret)):
        return None
    if job.status != "queued" or attempt != job.attempts + 1:
        return None
    wait_again(job)
    return job


def _attempt_job(session: Session, job_id: str, token_sha256: str, *, lock: bool, cancelled_ok: bool = False) -> Job:
    """The job whose attempt the job token hashed to ``token_sha256`` belongs to. ``Unauthorized`` for a job that
    does not exist, another job's or another attempt's token, and a revoked one (answered alike)."""
    job = repository.get_for_update(session, job_id) if lock else repository.get(session, job_id)
    if job is not None and _matches(job.job_token_sha256, token_sha256):
        if job.job_token_expires_at is None or utcnow() < job.job_token_expires_at:
            return job
        if cancelled_ok and job.status == "cancelled":
            return job
    raise Unauthorized(f"this token opens nothing of job {job_id}: a job token opens its own job's attempt only")


def _running(job: Job, attempt: int) -> None:
    if job.status != "running" or attempt != job.attempts:
        raise _stale(job, attempt)


def heartbeat(session: Session, job_id: str, token_sha256: str, *, attempt: int, lease_s: float) -> Job:
    """The attempt is alive: its lease is renewed for ``lease_s``. A cancelled job's heartbeat is told so."""
    job = _attempt_job(session, job_id, token_sha256, lock=True, cancelled_ok=True)
    if job.status == "cancelled":
        return job
    _running(job, attempt)
    job.heartbeat_at = now = utcnow()
    job.lease_expires_at = now + timedelta(seconds=lease_s)
    return job


def worker_testbed(session: Session, worker: Principal) -> Testbed:
    """The testbed a worker token serves (its key is the one last seen in a run, or null before any)."""
    tb = testbed_rows.get(session, worker.testbed_id) if worker.testbed_id is not None else None
    if tb is None:
        raise NotFound("this worker token has no testbed")
    return tb


def bundle(session: Session, job_id: str, token_sha256: str, *, tree: str = "head") -> bytes:
    """The source bundle of a running attempt's job: its own (``head``) or a paired job's merge base's (``base``)."""
    job = _attempt_job(session, job_id, token_sha256, lock=False)
    if job.status != "running":
        raise Conflict(f"job {job_id} is {job.status}: its bundle is served to a running attempt only")
    sha = job.base_bundle_sha256 if tree == "base" else job.bundle_sha256
    data = store.get(session, sha) if sha else None
    if data is None:
        raise NotFound(f"job {job_id} has no {'base bundle' if tree == 'base' else 'bundle'}")
    return data


def accept_result(
    session: Session,
    job_id: str,
    token_sha256: str,
    *,
    attempt: int,
    result: dict[str, object],
    wait_s: float,
    base: dict[str, object] | None = None,
    paired: dict[str, object] | None = None,
) -> tuple[Run, bool]:
    """Store the result of ``attempt`` as a run; returns (run, duplicate). Idempotent per job and attempt. A paired
    job's ``base`` and ``paired`` documents are required, checked before anything is stored, and stored with the run
    in the same transaction (``attnprof.server.jobs.paired``); another job's are refused.

    The job is then ``analyzing``, held for ``wait_s`` by nobody yet (the sweep sends its analysis again when that
    runs out and no message waits for it), and the attempt's token opens only its traces, for ``TRACE_UPLOAD_S``."""
    job = _attempt_job(session, job_id, token_sha256, lock=True)
    if job.run_id is not None:
        run = runs.get_for_job_attempt(session, job_id=job.id, attempt=attempt)
        if run is not None:
            return run, True
        raise Conflict(f"job {job_id} already has the result of another attempt")
    _running(job, attempt)
    document = runs.validate(result)
    sides = paired_documents.validate(paired_job=job.paired, head=document, base=base, paired=paired)
    # The job's provenance as its row holds it: checked when the job was submitted.
    provenance = Provenance.model_construct(
        branch=job.branch,
        commit=job.commit,
        repo=job.repo,
        base_commit=job.base_commit,
        ancestors=tuple(str(a) for a in job.ancestors),
        pr=job.pr,
    )
    run = runs.store_run(
        session,
        project_id=job.project_id,
        document=document,
        provenance=provenance,
        testbed=tb.name if (tb := testbed_rows.get(session, job.testbed_id)) else "",
        job_id=job.id,
        attempt=attempt,
    )
    if job.claimed_by:
        run.host = host_of(job.claimed_by)
        held = hosts.is_quarantined(session, testbed_id=job.testbed_id, worker=job.claimed_by)
        if held is not None:  # quarantined while it ran: its figures are in doubt from the start
            run.host_note = f"host {held.name} was quarantined while this run was measured: {held.reason}"
    if sides is not None:
        paired_documents.store(session, job_id=job.id, attempt=attempt, run_id=run.id, sides=sides)
    now = utcnow()
    charge(job, now)
    job.run_id = run.id
    job.status = "analyzing"
    job.lease_expires_at = now + timedelta(seconds=wait_s)
    job.job_token_expires_at = now + timedelta(seconds=TRACE_UPLOAD_S)
    return run, False


def accept_trace(
    session: Session,
    job_id: str,
    token_sha256: str,
    *,
    attempt: int,
    name: str,
    data: bytes,
    limit_bytes: int,
    retention: Retention | None = None,
) -> None:
    """Attach a trace named in the result of ``attempt`` to the job's run (a repeat replaces it: idempotent)."""
    job = _attempt_job(session, job_id, token_sha256, lock=False)
    run = runs.get_for_job_attempt(session, job_id=job.id, attempt=attempt) if job.run_id else None
    if run is None or run.id != job.run_id:
        raise Conflict(f"job {job_id} has no stored result of attempt {attempt}")
    runs.put_trace(session, run=run, name=name, data=data, limit_bytes=limit_bytes, retention=retention)


def fail(
    session: Session, job_id: str, token_sha256: str, *, attempt: int, reason: str, timed_out: bool, retry: bool
) -> Job:
    """Record a failed attempt (its token is revoked): back to ``queued`` when ``retry`` and attempts remain (it
    waits for the dispatcher, which the caller runs after the commit), else final."""
    job = _attempt_job(session, job_id, token_sha256, lock=True)
    _running(job, attempt)
    charge(job, utcnow())
    end_attempt(job)
    if retry and job.attempts < job.max_attempts:
        wait_again(job)
        job.reason = f"attempt {attempt} failed, retrying: {reason}"
        return job
    job.status = "timed_out" if timed_out else "failed"
    job.reason = reason
    job.finished_at = utcnow()
    return job
