"""Jobs (docs/architecture.md, "Jobs, attempts and leases"): created queued, offered by the dispatcher
(``attnprof.server.jobs.dispatch``), claimed by a worker of their testbed (``attnprof.server.jobs.attempts``), given a
result, analysed.

A submission is admitted (``admit``) within its project's limit of queued jobs, and cancels the open jobs of its
pull request's earlier commits. Nothing here commits or enqueues: the router commits, then dispatches (the row is
the truth).

Every change of state that GitHub hears about (a new job's ``pending``; its end: a verdict, a failure, a timeout, a
cancel) says so on the row, in the same transaction (``owe_feedback``: the ``feedback_due_at`` outbox column).
Nothing here calls GitHub: ``attnprof.server.github.outbox`` sends it from the stored row once that is committed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, inspect
from sqlalchemy.orm import Session

from attnprof.contract.provenance import Provenance
from attnprof.core.errors import SuiteError
from attnprof.core.suite import parse_suite
from attnprof.server import paging
from attnprof.server.artifacts.store import store
from attnprof.server.auth.service import Principal
from attnprof.server.comparisons import repository as comparisons
from attnprof.server.comparisons import service as analysis
from attnprof.server.comparisons.models import Comparison
from attnprof.server.config import Analysis, Fairness, Limits, Retention
from attnprof.server.db import utcnow
from attnprof.server.errors import Conflict, InvalidPayload, NotFound, ServiceError
from attnprof.server.hosts import service as hosts
from attnprof.server.jobs import attempts, dispatch, gpu_time, repository
from attnprof.server.jobs import paired as paired_documents
from attnprof.server.jobs.bundle import check_bundle
from attnprof.server.jobs.models import FINAL, Job
from attnprof.server.jobs.schemas import JobCreated, JobOut, MatrixJob
from attnprof.server.projects import repository as projects
from attnprof.server.projects import retention as quota
from attnprof.server.projects import service as project_service
from attnprof.server.testbeds import repository as testbed_rows
from attnprof.server.testbeds import service as testbeds


@dataclass(frozen=True)
class NewJob:
    """A job as submitted: its provenance already checked (the contract's model), the suite and bundle not yet."""

    spec: str
    testbed: str
    """The one testbed to run on ("": the suite's ``[suite] testbeds``, or ``testbeds``)."""
    provenance: Provenance
    bundle: bytes | None = None
    idempotency_key: str | None = None
    suite_path: str | None = None
    """The suite file's path relative to the repository's root (checked by the contract's rule), None: not sent."""
    base_bundle: bytes | None = None
    """A paired job's second tree, its merge base's source (tar.gz); ``bundle`` and ``base_commit`` come with it."""
    background: bool = False
    """A bisection's probe: offered only while no other job waits on its testbed."""
    testbeds: tuple[str, ...] = ()
    """Several testbeds, one job each (``create_matrix``); empty: ``testbed``, else the suite's."""

    @property
    def paired(self) -> bool:
        return self.base_bundle is not None


def parse_ancestors(raw: str | None, limit: int) -> tuple[str, ...]:
    """A JSON list or a comma/space-separated list of commits, newest first; each is then checked as
    ``Provenance.ancestors`` is."""
    if not raw or not raw.strip():
        return ()
    text = raw.strip()
    if text.startswith("[") and any(c in text[1:] for c in "[{"):  # before parsing: json.loads recurses on nesting
        raise InvalidPayload("ancestors: a flat JSON list of commit hashes (no nested lists or objects)")
    try:
        items = json.loads(text) if text.startswith("[") else re.split(r"[\s,]+", text)
    except json.JSONDecodeError as exc:
        raise InvalidPayload(f"ancestors: not a JSON list: {exc}") from exc
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
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
    message."""
    return suite_head(spec)[0]


def suite_head(spec: str) -> tuple[str, tuple[str, ...]]:
    """The name and the testbeds (``[suite] testbeds``) of the suite ``spec`` after validating it, or
    ``InvalidPayload`` with the profiler core's message. CI sends the same suite file again and again: valid ones are
    remembered (errors are not)."""
    return _remembered_suite_head(spec) if len(spec) <= _REMEMBERED_SPEC_CHARS else _suite_head(spec)


def _suite_head(spec: str) -> tuple[str, tuple[str, ...]]:
    try:
        suite = parse_suite(spec, source="spec")
    except SuiteError as exc:
        raise InvalidPayload(str(exc)) from exc
    return suite.name, suite.testbeds


_remembered_suite_head = functools.lru_cache(maxsize=256)(_suite_head)


def create(
    session: Session,
    *,
    project_id: int,
    new: NewJob,
    limits: Limits,
    max_attempts: int,
    testbed_ids: dict[str, int] | None = None,
    retention: Retention | None = None,
    github_feedback: bool = True,
) -> tuple[Job, bool]:
    """The job for ``new``, and whether it was created (False: the idempotency key named an existing job, which
    is the answer; a retry is checked like the first request). A new job waits for the dispatcher.

    ``testbed_ids`` (name to id) spares the testbed's lookup: a testbed is never renamed or removed, so an id
    read from a committed row stays true; one created here is added by the next request that reads it.

    A job that names a repository its project may not report to is refused before anything is stored
    (``RepoNotAllowed``, 403 naming ``repo``). ``github_feedback`` False (a service with no GitHub token, which posts
    nowhere) lets the repository stand as the job's label: every delivery checks it again before it posts, so a
    token set later reaches no repository the project was not allowed."""
    stored = _prepare(
        session, project_id=project_id, new=new, limits=limits, retention=retention, github_feedback=github_feedback
    )
    return _insert(
        session,
        project_id=project_id,
        new=new,
        stored=stored,
        testbed=new.testbed,
        max_attempts=max_attempts,
        testbed_ids=testbed_ids,
        matrix_id=None,
        now=utcnow(),
    )


def create_matrix(
    session: Session,
    *,
    project_id: int,
    new: NewJob,
    limits: Limits,
    max_attempts: int,
    testbed_ids: dict[str, int] | None = None,
    retention: Retention | None = None,
    github_feedback: bool = True,
) -> tuple[list[Job], bool]:
    """The jobs for ``new``, one per testbed, and whether they were created (False: the idempotency key named an
    earlier submission, whose jobs are the answer).

    The testbeds are ``new.testbeds``, else ``new.testbed``, else the suite's ``[suite] testbeds``; none of them is
    bad input naming ``testbed``. One testbed makes a job alone, exactly as ``create`` does. Several make a matrix:
    the suite and bundles are checked and stored once, the jobs share a ``matrix_id`` and one ``created_at`` (none
    is the newer of its pull request's jobs), and the first carries the idempotency key, so a retry finds them all.
    Each job has its own testbed's queue, workers and baseline."""
    stored = _prepare(
        session, project_id=project_id, new=new, limits=limits, retention=retention, github_feedback=github_feedback
    )
    names = new.testbeds or ((new.testbed,) if new.testbed else stored.suite_testbeds)
    if not names:
        raise InvalidPayload(
            "body.testbed: Field required: name the testbed to run on (testbed), several (testbeds), or list them in "
            'the suite as [suite] testbeds = ["h100", "h200"]'
        )
    matrix_id = str(uuid.uuid4()) if len(names) > 1 else None
    now = utcnow()
    made: list[Job] = []
    for index, name in enumerate(names):
        job, created = _insert(
            session,
            project_id=project_id,
            new=new if index == 0 else dataclasses.replace(new, idempotency_key=None),
            stored=stored,
            testbed=name,
            max_attempts=max_attempts,
            testbed_ids=testbed_ids,
            matrix_id=matrix_id,
            now=now,
        )
        if not created:  # only the first carries the key: the earlier submission's jobs are the answer
            return (repository.of_matrix(session, job.matrix_id) if job.matrix_id else [job]), False
        made.append(job)
    return made, True


@dataclass(frozen=True)
class _Stored:
    """What a submission's checks gave, before its job rows: the suite's name and testbeds, the bundles' hashes."""

    suite_name: str
    suite_testbeds: tuple[str, ...]
    bundle_sha256: str | None
    base_bundle_sha256: str | None


def _prepare(
    session: Session,
    *,
    project_id: int,
    new: NewJob,
    limits: Limits,
    retention: Retention | None,
    github_feedback: bool,
) -> _Stored:
    """Check ``new``'s repository, suite and bundles, and store the bundles (content-addressed: a retry's are
    there already)."""
    if github_feedback:
        project_service.check_may_report(session, project_id=project_id, repo=new.provenance.repo)
    name, suite_testbeds = suite_head(new.spec)
    bundle_sha = base_bundle_sha = None
    # Each tree on its own limits; both checked before either is stored, and the quota counts them together.
    trees = [(field, data) for field, data in (("bundle", new.bundle), ("base_bundle", new.base_bundle)) if data]
    for field, data in trees:
        check_bundle(
            data,
            max_bytes=limits.bundle_bytes,
            max_unpacked_bytes=limits.bundle_unpacked_bytes,
            max_members=limits.bundle_members,
            field=field,
        )
    if trees:
        quota.check_quota(
            session,
            project_id=project_id,
            kind=" and ".join(f.replace("_", " ") for f, _ in trees),
            data=[d for _, d in trees],
            defaults=retention or Retention(),
        )
    if new.bundle is not None:
        bundle_sha = store.put(session, kind="bundle", data=new.bundle)
    if new.base_bundle is not None:
        base_bundle_sha = store.put(session, kind="bundle", data=new.base_bundle)
    return _Stored(
        suite_name=name, suite_testbeds=suite_testbeds, bundle_sha256=bundle_sha, base_bundle_sha256=base_bundle_sha
    )


def _insert(
    session: Session,
    *,
    project_id: int,
    new: NewJob,
    stored: _Stored,
    testbed: str,
    max_attempts: int,
    testbed_ids: dict[str, int] | None,
    matrix_id: str | None,
    now: datetime,
) -> tuple[Job, bool]:
    """The job row on ``testbed``, inserted unless ``new``'s idempotency key is taken (then the job that took it,
    and False)."""
    testbed_id = testbed_ids.get(testbed) if testbed_ids is not None else None
    if testbed_id is None:
        testbed_id, existed = testbeds.ensure_id(session, testbed)
        if existed and testbed_ids is not None:
            testbed_ids[testbed] = testbed_id
    prov = new.provenance
    job = repository.insert_unless_key_taken(
        session,
        {
            "id": str(uuid.uuid4()),
            "project_id": project_id,
            "testbed_id": testbed_id,
            "idempotency_key": new.idempotency_key,
            "spec": new.spec,
            "suite_name": stored.suite_name,
            "suite_path": new.suite_path,
            "bundle_sha256": stored.bundle_sha256,
            "base_bundle_sha256": stored.base_bundle_sha256,
            "paired": new.paired,
            "background": new.background,
            "gpu_seconds": 0.0,
            "repo": prov.repo,
            "branch": prov.branch,
            "commit": prov.commit,
            "base_commit": prov.base_commit,
            "ancestors": list(prov.ancestors),
            "pr": prov.pr,
            "status": "queued",
            "attempts": 0,
            "max_attempts": max_attempts,
            "created_at": now,
            "updated_at": now,
            "feedback_due_at": now if prov.repo else None,  # its pending status (``owe_feedback``)
            "feedback_attempts": 0,
            "matrix_id": matrix_id,
        },
    )
    if job is not None:
        return job, True
    assert new.idempotency_key is not None  # only a key can collide
    existing = repository.get_by_idempotency_key(session, project_id, new.idempotency_key)
    assert existing is not None
    return existing, False


def created(session: Session, made: list[Job]) -> JobCreated:
    """The answer to a submission that made (or, retried, found) ``made``: its jobs by testbed name, the first's id
    as the answer's, as a job alone is answered."""
    named = sorted(((testbed_name(session, j), j) for j in made), key=lambda pair: pair[0])
    first = named[0][1]
    return JobCreated(
        id=first.id,
        status=first.status,
        matrix_id=first.matrix_id,
        jobs=[MatrixJob(id=j.id, testbed=name, status=j.status) for name, j in named],
    )


def project_name(session: Session, job: Job) -> str | None:
    project = projects.get(session, job.project_id)
    return project.name if project else None


def testbed_name(session: Session, job: Job) -> str:
    tb = testbed_rows.get(session, job.testbed_id)
    return tb.name if tb else ""


def testbed_notice(session: Session, *, testbed_id: int, name: str, fairness: Fairness, now: datetime) -> str | None:
    """Why every job queued on the testbed waits, where its testbed holds them all: no live worker serves it, or
    every live one is on a quarantined host; None while one may take a job."""
    return testbeds.no_live_worker(
        session, testbed_id=testbed_id, name=name, live_s=fairness.worker_live_s, now=now
    ) or hosts.waiting_reason(
        session, testbed_id=testbed_id, name=name, since=now - timedelta(seconds=fairness.worker_live_s)
    )


def to_out(session: Session, job: Job, fairness: Fairness | None = None, now: datetime | None = None) -> JobOut:
    """The job as the API shows it; with ``fairness``, a queued job's ``notice`` says when no live worker serves
    its testbed."""
    project = projects.get(session, job.project_id)
    testbed = testbed_name(session, job)
    notice = None
    if fairness is not None and job.status == "queued":
        now = now or utcnow()
        notice = testbed_notice(
            session, testbed_id=job.testbed_id, name=testbed, fairness=fairness, now=now
        ) or gpu_time.quota_notice(session, job, now=now)
    return JobOut(
        id=job.id,
        project=project.name if project else "",
        testbed=testbed,
        suite_name=job.suite_name,
        suite_path=job.suite_path,
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
        paired=job.paired,
        run_id=job.run_id,
        created_at=job.created_at,
        updated_at=job.updated_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        gpu_seconds=round(job.gpu_seconds or 0.0, 3),
        notice=notice,
        matrix_id=job.matrix_id,
    )


def get_for(session: Session, principal: Principal, job_id: str, role: str = "read") -> Job:
    """The job if it is the principal's project's (else 404, whatever the role), then the role check (403)."""
    job = repository.get(session, job_id)
    if job is None or job.project_id != principal.project_id:
        raise NotFound(f"no job {job_id}")
    principal.require(role)
    return job


def cancel(session: Session, job: Job, reason: str = "cancelled by a user") -> Job:
    """Cancel a job that has not ended: its attempt's token opens nothing more (its heartbeat is told), and the
    queued message, if any, claims nothing."""
    if job.status in FINAL:
        raise Conflict(f"job {job.id} is {job.status}: it cannot be cancelled")
    now = utcnow()
    if job.status == "running":  # its worker held the device until now
        attempts.charge(job, now)
    job.status = "cancelled"
    job.reason = reason
    job.finished_at = now
    job.lease_expires_at = None
    if job.job_token_sha256 is not None:
        job.job_token_expires_at = now
    owe_feedback(job, now)
    return job


def owe_feedback(job: Job, now: datetime | None = None, *, at_once: bool = False) -> None:
    """Say, in the transaction that changes ``job``'s state, that GitHub is owed that state (its commit status and,
    once the job has ended, its pull-request comment): ``feedback_due_at`` is set, due now. Nothing is sent here;
    ``attnprof.server.github.outbox`` sends it from the stored row once the transaction is committed, and the sweep
    retries what is still owed. A job that names no repository owes nothing. Not committed.

    A later ``feedback_due_at`` is kept (unless ``at_once``: an admin's resend): a delivery in flight holds the job
    until then, or one that GitHub refused waits out its backoff. The delivery in flight finds the state changed
    when it records what it sent, and owes it again at once: the newer state is always sent after the older one,
    never beside it. The comparison is made in SQL, on the row as committed: a claim taken after this transaction
    read the row is kept too."""
    if not job.repo:
        return
    now = now or utcnow()
    if at_once or not inspect(job).persistent:
        job.feedback_due_at = now
    else:
        job.feedback_due_at = case((Job.feedback_due_at > now, Job.feedback_due_at), else_=now)
    job.feedback_attempts = 0


class QueueFull(ServiceError):
    """429: the project has as many queued jobs as ``ATTNPROF_FAIRNESS__MAX_QUEUED`` allows; nothing was stored."""

    status, error = 429, "queue_full"
    RETRY_AFTER_S = 60

    def __init__(self, *, project: str, queued: int, limit: int) -> None:
        super().__init__(
            f"project {project} has {queued} queued jobs, its limit (ATTNPROF_FAIRNESS__MAX_QUEUED = {limit}): "
            "nothing was stored; submit again once some have started, or cancel some",
            headers={"Retry-After": str(self.RETRY_AFTER_S)},
        )


# Within this many of the limit, submissions to a project count its queue one at a time (a lock on it, held to the
# commit): far from it, the count is taken without the lock, and the submissions running at once (a server holds
# ten sessions a process) cannot pass the limit together.
QUEUE_LOCK_MARGIN = 64


@dataclass(frozen=True)
class Admitted:
    superseded: list[Job]
    """The jobs the new one cancelled: the caller owes their feedback and dispatches their testbeds."""
    room: bool
    """Whether the job's testbed could be offered a job now (read before the commit, without the dispatch's lock):
    if not, no dispatch need follow the commit (``attnprof.server.jobs.dispatch`` says why that is safe)."""


def admit(session: Session, job: Job, *, project: str, cfg: Fairness, now: datetime) -> Admitted:
    """Admit the new ``job`` (inserted, not committed): cancel the open jobs of its pull request's earlier commits
    (``cfg.cancel_superseded``), then hold it to the project's limit of queued jobs (``QueueFull``: the caller rolls
    back, and nothing is stored), reading in the same statement whether its testbed has room."""
    superseded = supersede(session, job) if cfg.cancel_superseded else []
    queued, live, running, offered = repository.admission(
        session,
        project_id=job.project_id,
        up_to=cfg.max_queued + 1,
        testbed_id=job.testbed_id,
        live_since=now - timedelta(seconds=cfg.worker_live_s),
    )
    if queued > cfg.max_queued - QUEUE_LOCK_MARGIN:
        repository.lock_queue(session, project_id=job.project_id)
        queued = repository.count_queued(session, project_id=job.project_id, up_to=cfg.max_queued + 1)
    if queued > cfg.max_queued:
        raise QueueFull(project=project, queued=queued - 1, limit=cfg.max_queued)
    return Admitted(superseded=superseded, room=dispatch.window(live=live, running=running, offered=offered) > 0)


def supersede(session: Session, job: Job) -> list[Job]:
    """Cancel the queued and running jobs of ``job``'s pull request (same project, repository and number) for other
    commits, created before it: a newer push makes them moot. A running one's worker is told by its heartbeat."""
    if job.pr is None or job.repo is None:
        return []
    older = repository.open_jobs_of_pr(
        session,
        project_id=job.project_id,
        repo=job.repo,
        pr=job.pr,
        other_than=job.commit,
        created_before=job.created_at,
    )
    why = f"superseded by commit {job.commit} (job {job.id}), a newer push to pull request #{job.pr}"
    return [cancel(session, old, reason=why) for old in older]


def comparison(session: Session, job: Job, mode: str | None = None) -> Comparison:
    """The comparison that gave ``job`` its verdict (a paired job's: the paired one), or the one of ``mode``
    (history: against stored baseline runs; paired: against the merge base profiled beside it)."""
    if mode == "paired" and not job.paired:
        raise NotFound(f"job {job.id} is not paired: it has no paired comparison (mode=history has its comparison)")
    found = comparisons.latest_for_run(session, job.run_id, mode) if job.run_id else None
    if found is None:
        raise NotFound(f"job {job.id} has no {f'{mode} ' if mode else ''}comparison yet (status {job.status})")
    return found


# --- the analysis worker's side -----------------------------------------------------------------------
# An ``analyzing`` job is a lease too: the analysis task takes it when it starts and renews it from a thread while it
# works, each in a short transaction of its own; the sweep sends the analysis again once it runs out. The
# comparison is computed without holding the job's row, which is locked only to record the verdict: of two
# deliveries at once, the first to record wins and the other's comparison is rolled back (exactly one is stored).


def take_analysis(session: Session, *, job_id: str, lease_s: float) -> Job | None:
    """The job, locked, its analysis lease taken for ``lease_s`` when it is ``analyzing`` (another state: a
    duplicate delivery or a cancelled job, which the caller leaves alone). None when there is no such job."""
    job = repository.get_for_update(session, job_id)
    if job is not None and job.status == "analyzing":
        job.lease_expires_at = utcnow() + timedelta(seconds=lease_s)
    return job


def renew_analysis(session: Session, *, job_id: str, lease_s: float) -> bool:
    """Renew the analysis lease of job ``job_id`` for ``lease_s``; False once it is no longer ``analyzing``."""
    return repository.extend_lease(
        session, job_id=job_id, status="analyzing", until=utcnow() + timedelta(seconds=lease_s)
    )


def compare_job(session: Session, *, job_id: str, cfg: Analysis) -> Comparison | None:
    """Compare the job's stored run with its baseline and store the comparison (not committed; the job's row is not
    locked); a paired job's run is then compared with its merge base too, and that comparison, stored second, is
    the one returned: it gives the job its verdict. None when the job is not ``analyzing``: nothing to do."""
    job = repository.get(session, job_id)
    if job is None or job.run_id is None or job.status != "analyzing":
        return None
    history = analysis.analyze(session, run_id=job.run_id, cfg=cfg)
    if not job.paired:
        return history
    sides = paired_documents.documents_of(session, job.id)
    if sides is None:  # stored with the run, in one transaction: only a row changed by hand lacks them
        raise InvalidPayload(f"job {job.id} is paired but its base and paired documents are not stored")
    return analysis.analyze_paired(session, run_id=job.run_id, base=sides.base, paired=sides.paired, after=history)


def record_verdict(session: Session, *, job_id: str, comparison: Comparison) -> bool:
    """Lock the job and record ``comparison``'s verdict (``analyzing → done``); False when the job is no longer
    ``analyzing`` (another delivery recorded its own, or it was cancelled): the caller rolls ``comparison`` back."""
    job = repository.get_for_update(session, job_id)
    if job is None or job.status != "analyzing" or job.run_id != comparison.candidate_run_id:
        return False
    job.verdict = comparison.verdict
    job.status = "done"
    job.finished_at = utcnow()
    job.lease_expires_at = None
    owe_feedback(job, job.finished_at)
    return True


def analyze_job(session: Session, *, job_id: str, cfg: Analysis) -> Comparison | None:
    """``compare_job`` then ``record_verdict``: the comparison whose verdict the job now has, or None when there was
    nothing to do or another delivery recorded first (then roll back)."""
    found = compare_job(session, job_id=job_id, cfg=cfg)
    if found is None or not record_verdict(session, job_id=job_id, comparison=found):
        return None
    return found


def fail_analysis(session: Session, *, job_id: str, reason: str) -> Job | None:
    """The analysis of a stored run could not be made: the job fails with ``reason`` (its run stays stored)."""
    job = repository.get_for_update(session, job_id)
    if job is None or job.status != "analyzing":
        return None
    job.status = "failed"
    job.reason = reason
    job.finished_at = utcnow()
    job.lease_expires_at = None
    owe_feedback(job, job.finished_at)
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
