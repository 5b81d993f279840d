"""Jobs (DESIGN 3.5): created queued, claimed by a worker of their testbed, given a result, analysed.

Nothing here commits or enqueues: the router commits, then enqueues (the row is the truth).
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from dataclasses import dataclass

from sqlalchemy.orm import Session

from profiler_core.errors import SuiteError
from profiler_core.suite import parse_suite
from service import paging
from service.analysis import repository as comparisons
from service.analysis import service as analysis
from service.analysis.models import Comparison
from service.artifacts.store import store
from service.auth.service import Principal
from service.config import Analysis, Limits
from service.db import utcnow
from service.errors import Conflict, InvalidPayload, NotFound
from service.jobs import repository
from service.jobs.bundle import check_bundle
from service.jobs.models import FINAL, Job
from service.jobs.schemas import JobOut
from service.projects import repository as projects
from service.runs import service as runs
from service.runs.models import Run
from service.testbeds import repository as testbed_rows
from service.testbeds import service as testbeds
from service.testbeds.models import Testbed

_SHA = re.compile(r"^[0-9A-Za-z._-]{1,64}$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class NewJob:
    spec: str
    testbed: str
    branch: str
    commit: str
    repo: str | None = None
    base_commit: str | None = None
    ancestors: tuple[str, ...] = ()
    pr: int | None = None
    bundle: bytes | None = None
    idempotency_key: str | None = None


def parse_ancestors(raw: str | None, limit: int) -> tuple[str, ...]:
    """A JSON list or a comma/space-separated list of commits, newest first."""
    if not raw or not raw.strip():
        return ()
    text = raw.strip()
    try:
        items = json.loads(text) if text.startswith("[") else re.split(r"[\s,]+", text)
    except json.JSONDecodeError as exc:
        raise InvalidPayload(f"ancestors: not a JSON list: {exc}") from exc
    if not isinstance(items, list) or not all(isinstance(i, str) and _SHA.match(i) for i in items if i):
        raise InvalidPayload("ancestors: a list of commit hashes")
    out = tuple(i for i in items if i)
    if len(out) > limit:
        raise InvalidPayload(f"ancestors: at most {limit}, got {len(out)}")
    return out


# Suite files this long or shorter are remembered once valid (a suite file is a few KiB; the 256 remembered hold
# at most 16 M characters, whatever clients send).
_REMEMBERED_SPEC_CHARS = 64 * 1024


def suite_name(spec: str) -> str:
    """The name of the suite ``spec`` (TOML) after validating it, or ``InvalidPayload`` with the profiler core's
    message. CI sends the same suite file again and again: valid ones are remembered (errors are not)."""
    return _remembered_suite_name(spec) if len(spec) <= _REMEMBERED_SPEC_CHARS else _suite_name(spec)


def _suite_name(spec: str) -> str:
    try:
        return parse_suite(spec, source="spec").name
    except SuiteError as exc:
        raise InvalidPayload(str(exc)) from exc


_remembered_suite_name = functools.lru_cache(maxsize=256)(_suite_name)


def create(
    session: Session,
    *,
    project_id: int,
    new: NewJob,
    limits: Limits,
    max_attempts: int,
    testbed_ids: dict[str, int] | None = None,
) -> tuple[Job, bool]:
    """The job for ``new``, and whether it was created (False: the idempotency key named an existing job, which
    is the answer; a retry is checked like the first request).

    ``testbed_ids`` (name to id) spares the testbed's lookup: a testbed is never renamed or removed, so an id
    read from a committed row stays true; one created here is added by the next request that reads it."""
    for name, value in (("commit", new.commit), ("base_commit", new.base_commit)):
        if value is not None and not _SHA.match(value):
            raise InvalidPayload(f"{name}: a commit hash (letters, digits, '.', '_', '-'; at most 64)")
    if new.repo is not None and not _REPO.match(new.repo):
        raise InvalidPayload("repo: owner/name")
    name = suite_name(new.spec)
    bundle_sha = None
    if new.bundle is not None:
        check_bundle(
            new.bundle,
            max_bytes=limits.bundle_bytes,
            max_unpacked_bytes=limits.bundle_unpacked_bytes,
            max_members=limits.bundle_members,
        )
        bundle_sha = store.put(session, kind="bundle", data=new.bundle)  # content-addressed: a retry's is there
    testbed_id = testbed_ids.get(new.testbed) if testbed_ids is not None else None
    if testbed_id is None:
        testbed_id, existed = testbeds.ensure_id(session, new.testbed)
        if existed and testbed_ids is not None:
            testbed_ids[new.testbed] = testbed_id
    job = repository.insert_unless_key_taken(
        session,
        {
            "id": str(uuid.uuid4()),
            "project_id": project_id,
            "testbed_id": testbed_id,
            "idempotency_key": new.idempotency_key,
            "spec": new.spec,
            "suite_name": name,
            "bundle_sha256": bundle_sha,
            "repo": new.repo,
            "branch": new.branch,
            "commit": new.commit,
            "base_commit": new.base_commit,
            "ancestors": list(new.ancestors),
            "pr": new.pr,
            "status": "queued",
            "attempts": 0,
            "max_attempts": max_attempts,
            "created_at": (now := utcnow()),
            "updated_at": now,
            "feedback_attempts": 0,
        },
    )
    if job is not None:
        return job, True
    assert new.idempotency_key is not None  # only a key can collide
    existing = repository.get_by_idempotency_key(session, project_id, new.idempotency_key)
    assert existing is not None
    return existing, False


def testbed_name(session: Session, job: Job) -> str:
    tb = testbed_rows.get(session, job.testbed_id)
    return tb.name if tb else ""


def to_out(session: Session, job: Job) -> JobOut:
    project = projects.get(session, job.project_id)
    return JobOut(
        id=job.id,
        project=project.name if project else "",
        testbed=testbed_name(session, job),
        suite_name=job.suite_name,
        repo=job.repo,
        branch=job.branch,
        commit=job.commit,
        base_commit=job.base_commit,
        ancestors=[str(a) for a in job.ancestors],
        pr=job.pr,
        status=job.status,
        verdict=job.verdict,
        reason=job.reason,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        has_bundle=job.bundle_sha256 is not None,
        run_id=job.run_id,
        created_at=job.created_at,
        updated_at=job.updated_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def get_for(session: Session, principal: Principal, job_id: str, role: str = "read") -> Job:
    """The job if it is the principal's project's (else 404, whatever the role), then the role check (403)."""
    job = repository.get(session, job_id)
    if job is None or job.project_id != principal.project_id:
        raise NotFound(f"no job {job_id}")
    principal.require(role)
    return job


def cancel(session: Session, job: Job) -> Job:
    if job.status in FINAL:
        raise Conflict(f"job {job.id} is {job.status}: it cannot be cancelled")
    job.status = "cancelled"
    job.reason = "cancelled by a user"
    job.finished_at = utcnow()
    return job


def comparison(session: Session, job: Job) -> Comparison:
    found = comparisons.latest_for_run(session, job.run_id) if job.run_id else None
    if found is None:
        raise NotFound(f"job {job.id} has no comparison yet (status {job.status})")
    return found


# --- the worker's side -------------------------------------------------------------------------------


def _worker_job(session: Session, worker: Principal, job_id: str, *, lock: bool = True) -> Job:
    job = repository.get_for_update(session, job_id) if lock else repository.get(session, job_id)
    if job is None or job.testbed_id != worker.testbed_id:
        raise NotFound(f"no job {job_id} for this worker's testbed")
    return job


def claim(session: Session, worker: Principal, job_id: str, *, attempt: int, worker_name: str) -> Job:
    """Start ``attempt`` of a queued job. A stale or duplicate delivery gets ``Conflict``: drop it."""
    job = _worker_job(session, worker, job_id)
    if job.status == "running" and attempt == job.attempts and job.claimed_by == worker_name:
        return job  # the same worker asking again: its first answer was lost on the way
    if job.status != "queued" or attempt != job.attempts + 1:
        raise Conflict(f"job {job_id} is {job.status} at attempt {job.attempts}: attempt {attempt} is stale")
    job.status = "running"
    job.attempts = attempt
    job.claimed_by = worker_name
    job.heartbeat_at = job.started_at = utcnow()
    return job


def heartbeat(session: Session, worker: Principal, job_id: str, *, attempt: int) -> Job:
    job = _worker_job(session, worker, job_id)
    if job.status == "cancelled":
        return job
    if job.status != "running" or attempt != job.attempts:
        raise Conflict(f"job {job_id} is {job.status} at attempt {job.attempts}: attempt {attempt} is stale")
    job.heartbeat_at = utcnow()
    return job


def worker_testbed(session: Session, worker: Principal) -> Testbed:
    """The testbed a worker token serves (its key is the one last seen in a run, or null before any)."""
    tb = testbed_rows.get(session, worker.testbed_id) if worker.testbed_id is not None else None
    if tb is None:
        raise NotFound("this worker token has no testbed")
    return tb


def bundle(session: Session, worker: Principal, job_id: str) -> bytes:
    job = _worker_job(session, worker, job_id, lock=False)
    data = store.get(session, job.bundle_sha256) if job.bundle_sha256 else None
    if data is None:
        raise NotFound(f"job {job_id} has no bundle")
    return data


def accept_result(
    session: Session, worker: Principal, job_id: str, *, attempt: int, result: dict[str, object]
) -> tuple[Run, bool]:
    """Store the result of ``attempt`` as a run; returns (run, duplicate). Idempotent per job and attempt."""
    job = _worker_job(session, worker, job_id)
    if job.run_id is not None:
        run = runs.get_for_job_attempt(session, job_id=job.id, attempt=attempt)
        if run is not None:
            return run, True
        raise Conflict(f"job {job_id} already has the result of another attempt")
    if job.status != "running" or attempt != job.attempts:
        raise Conflict(f"job {job_id} is {job.status} at attempt {job.attempts}: attempt {attempt} is stale")
    document = runs.validate(result)
    provenance = runs.Provenance(
        branch=job.branch,
        commit=job.commit,
        repo=job.repo,
        base_commit=job.base_commit,
        ancestors=tuple(str(a) for a in job.ancestors),
        pr=job.pr,
        testbed=testbed_name(session, job),
    )
    run = runs.store_run(
        session, project_id=job.project_id, document=document, provenance=provenance, job_id=job.id, attempt=attempt
    )
    job.run_id = run.id
    job.status = "analyzing"
    return run, False


def accept_trace(
    session: Session, worker: Principal, job_id: str, *, attempt: int, name: str, data: bytes, limit_bytes: int
) -> None:
    """Attach a trace named in the result of ``attempt`` to the job's run (a repeat replaces it: idempotent)."""
    job = _worker_job(session, worker, job_id, lock=False)
    run = runs.get_for_job_attempt(session, job_id=job.id, attempt=attempt) if job.run_id else None
    if run is None or run.id != job.run_id:
        raise Conflict(f"job {job_id} has no stored result of attempt {attempt}")
    runs.put_trace(session, run=run, name=name, data=data, limit_bytes=limit_bytes)


def fail(
    session: Session, worker: Principal, job_id: str, *, attempt: int, reason: str, timed_out: bool, retry: bool
) -> Job:
    """Record a failed attempt: back to ``queued`` when ``retry`` and attempts remain, else final."""
    job = _worker_job(session, worker, job_id)
    if job.status != "running" or attempt != job.attempts:
        raise Conflict(f"job {job_id} is {job.status} at attempt {job.attempts}: attempt {attempt} is stale")
    job.claimed_by = None
    if retry and job.attempts < job.max_attempts:
        job.status = "queued"
        job.reason = f"attempt {attempt} failed, retrying: {reason}"
        return job
    job.status = "timed_out" if timed_out else "failed"
    job.reason = reason
    job.finished_at = utcnow()
    return job


def analyze_job(session: Session, *, job_id: str, cfg: Analysis) -> Comparison | None:
    """What the ``analysis.run`` task calls: compare the job's run, record the verdict. Idempotent."""
    job = repository.get_for_update(session, job_id)
    if job is None or job.run_id is None or job.status not in ("analyzing", "done"):
        return None
    if job.status == "done":
        return comparisons.latest_for_run(session, job.run_id)
    found = analysis.analyze(session, run_id=job.run_id, cfg=cfg)
    job.verdict = found.verdict
    job.status = "done"
    job.finished_at = utcnow()
    return found


def fail_analysis(session: Session, *, job_id: str, reason: str) -> Job | None:
    """The analysis of a stored run could not be made: the job fails with ``reason`` (its run stays stored)."""
    job = repository.get_for_update(session, job_id)
    if job is None or job.status != "analyzing":
        return None
    job.status = "failed"
    job.reason = reason
    job.finished_at = utcnow()
    return job


def list_page(
    session: Session,
    *,
    project_id: int,
    status: str | None,
    branch: str | None,
    pr: int | None,
    cursor: str | None,
    limit: int,
) -> tuple[list[Job], Job | None]:
    rows = repository.list_jobs(
        session,
        project_id=project_id,
        status=status,
        branch=branch,
        pr=pr,
        before=paging.decode(cursor),
        limit=limit + 1,
    )
    return rows[:limit], (rows[limit - 1] if len(rows) > limit else None)
