"""GitHub feedback for a job: the commit status ``attnprof/<project>`` and the one PR comment per project.

What is sent is always the job's current state, read from the database (the job row, its comparison and run
documents), so a delivery can be made again at any time from what is stored. A job owes feedback while its
``feedback_due_at`` is set: a move to a final state sets it (``owe``), a delivery that succeeds clears it, one
that fails is recorded in the job's ``reason`` and set again with backoff (``Sweep.feedback_retry_s``, doubling,
at most 1 h) until ``Sweep.feedback_attempts`` deliveries failed. The sweep (``jobs.sweep``) delivers what is due;
``POST /api/v1/github/jobs/{id}/resend`` (an admin token) owes it again and delivers it at once. Feedback never
touches a job's status or verdict.

Nothing here commits but ``send_pending`` and ``send_now``, which run after a request's commit and commit what
they record; elsewhere the caller's transaction (the analysis task, the sweep, the resend request) owns it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from profiler_core.documents.result import ResultDocument
from service.comparisons import documents as comparison_documents
from service.comparisons import repository as comparisons
from service.config import Settings, Sweep
from service.db import utcnow
from service.errors import NotFound
from service.github.client import GitHubClient, GitHubError
from service.github.comment import CommentInput, marker, render
from service.jobs import repository as jobs
from service.jobs.models import FINAL, Job
from service.projects import repository as projects
from service.runs import documents
from service.testbeds import repository as testbeds

log = logging.getLogger(__name__)
FEEDBACK_FAILED = "GitHub feedback failed: "
RETRY_MAX_S = 3600.0
_ENDED = {"failed": "failed", "timed_out": "timed out", "cancelled": "cancelled"}


def make_client(
    settings: Settings, *, attempts: int = 4, max_wait_s: float = 60.0, timeout_s: float = 10.0
) -> GitHubClient:
    token = settings.github_token.get_secret_value() if settings.github_token else None
    return GitHubClient(settings.github_api_url, token, attempts=attempts, max_wait_s=max_wait_s, timeout_s=timeout_s)


def request_client(settings: Settings) -> GitHubClient:
    """A client for a delivery made while an HTTP request waits (job creation, a worker's failure report, a
    cancel): two tries and short waits; the sweep retries what it could not deliver."""
    return make_client(settings, attempts=2, max_wait_s=2.0, timeout_s=5.0)


def _project(session: Session, job: Job) -> str:
    project = projects.get(session, job.project_id)
    return project.name if project else str(job.project_id)


def _document(session: Session, run_id: str | None) -> ResultDocument | None:
    if not run_id:
        return None
    try:
        return documents.result_of(session, run_id)
    except NotFound:  # a baseline run deleted since
        return None


def comment_input(session: Session, job: Job, settings: Settings) -> CommentInput:
    """Everything the comment of ``job`` shows, read from the database."""
    found = comparisons.latest_for_run(session, job.run_id) if job.run_id else None
    testbed = testbeds.get(session, job.testbed_id)
    baseline_ids = [str(b) for b in found.baseline_run_ids] if found else []
    return CommentInput(
        project=_project(session, job),
        job_id=job.id,
        status=job.status,
        suite_name=job.suite_name,
        testbed=testbed.name if testbed else "",
        branch=job.branch,
        commit=job.commit,
        public_url=settings.public_url,
        pr=job.pr,
        reason=_strip_note(job),
        run_id=job.run_id,
        comparison_id=found.id if found else None,
        comparison=comparison_documents.comparison_of(found) if found else None,
        candidate=_document(session, job.run_id) if found else None,
        baseline=_document(session, baseline_ids[0]) if baseline_ids else None,
    )


def comment_markdown(session: Session, job: Job, settings: Settings) -> str:
    return render(comment_input(session, job, settings))


def _first_line(text: str | None) -> str:
    """The reason without the feedback note, first line only."""
    kept = (text or "").split(FEEDBACK_FAILED)[0].strip().rstrip(";").strip()
    return kept.splitlines()[0] if kept else ""


def status_of(job: Job) -> tuple[str, str]:
    """The commit status state of ``job`` and its one-line description (GitHub keeps 140 characters)."""
    if job.status in _ENDED:
        return "error", f"no verdict: job {_ENDED[job.status]}: {_first_line(job.reason) or 'no reason recorded'}"
    if job.status != "done" or job.verdict is None:
        return "pending", f"job {job.status}"
    state = "failure" if job.verdict == "fail" else "success"
    return state, f"verdict {job.verdict}" + (" (warnings)" if job.verdict == "warn" else "")


def _target_url(settings: Settings, project: str, job: Job) -> str:
    base = settings.public_url.rstrip("/")
    if job.run_id and job.status == "done":
        return f"{base}/api/v1/projects/{project}/runs/{job.run_id}"
    return f"{base}/api/v1/jobs/{job.id}"


def _strip_note(job: Job) -> str | None:
    kept = (job.reason or "").split(FEEDBACK_FAILED)[0].rstrip("; ")
    return kept or None


def retry_after_s(cfg: Sweep, failures: int) -> float:
    """Seconds before the next delivery after ``failures`` failed ones: ``feedback_retry_s``, doubling, at most
    an hour."""
    return float(min(cfg.feedback_retry_s * 2 ** max(0, failures - 1), RETRY_MAX_S))


def _record(job: Job, error: Exception, cfg: Sweep, now: datetime) -> None:
    """A failed delivery: noted in the job's reason, and owed again after the backoff, or given up."""
    job.feedback_attempts = (job.feedback_attempts or 0) + 1
    if job.feedback_attempts >= cfg.feedback_attempts:
        job.feedback_due_at = None
        then = f"given up after {job.feedback_attempts} deliveries; POST /api/v1/github/jobs/{job.id}/resend"
    else:
        wait_s = retry_after_s(cfg, job.feedback_attempts)
        job.feedback_due_at = now + timedelta(seconds=wait_s)
        then = f"delivery {job.feedback_attempts} of {cfg.feedback_attempts}, retried in {wait_s:.0f} s"
    log.warning("job %s: %s%s (%s)", job.id, FEEDBACK_FAILED, error, then)
    kept = _strip_note(job)
    note = f"{FEEDBACK_FAILED}{error} ({then})"
    job.reason = f"{kept}; {note}" if kept else note


def owe(job: Job, now: datetime | None = None) -> None:
    """Say that ``job`` owes GitHub its current state (a final one, usually), due now. Not committed."""
    if job.repo:
        job.feedback_due_at = now or utcnow()
        job.feedback_attempts = 0


def deliver(
    session: Session, settings: Settings, job: Job, *, client: GitHubClient | None = None, now: datetime | None = None
) -> bool:
    """Send the current state of ``job`` (its status; its PR comment once it is final); False when GitHub
    failed (recorded on the job, owed again). Jobs with no ``repo``, or a service with no GitHub token, get
    nothing and owe nothing. Not committed."""
    if not job.repo or (client is None and settings.github_token is None):
        job.feedback_due_at = None
        return True
    own = client is None
    gh = client or make_client(settings)
    project = _project(session, job)
    try:
        state, description = status_of(job)
        gh.create_status(
            job.repo,
            job.commit,
            state=state,
            context=f"attnprof/{project}",
            description=description,
            target_url=_target_url(settings, project, job),
        )
        if job.pr is not None and state != "pending":
            gh.upsert_comment(job.repo, job.pr, marker=marker(project), body=comment_markdown(session, job, settings))
    except (GitHubError, ValueError) as exc:
        _record(job, exc, settings.sweep, now or utcnow())
        return False
    finally:
        if own:
            gh.close()
    if job.feedback_due_at is not None or job.feedback_attempts:
        job.feedback_due_at, job.feedback_attempts = None, 0
        job.reason = _strip_note(job)
    return True


def send(session: Session, settings: Settings, job_id: str, *, client: GitHubClient | None = None) -> bool:
    """Send the current state of job ``job_id`` now, owed or not (see ``deliver``). Not committed."""
    job = jobs.get(session, job_id)
    return True if job is None else deliver(session, settings, job, client=client)


def _locked(session: Session, job_id: str, *, skip_locked: bool) -> Job | None:
    q = select(Job).where(Job.id == job_id).with_for_update(skip_locked=skip_locked)
    return session.scalars(q).one_or_none()


def send_owed(
    session: Session,
    settings: Settings,
    job_id: str,
    *,
    client: GitHubClient | None = None,
    now: datetime | None = None,
) -> bool | None:
    """Deliver the feedback job ``job_id`` owes if it is due; None when it owes nothing due, or another
    delivery holds the row (it is skipped, never sent twice). Not committed."""
    now = now or utcnow()
    job = _locked(session, job_id, skip_locked=True)
    if job is None or job.feedback_due_at is None or job.feedback_due_at > now:
        return None
    return deliver(session, settings, job, client=client, now=now)


def _after_commit(session: Session, what: str, job_id: str, call: Callable[[], object]) -> None:
    """Run ``call`` in a transaction of its own and commit it; log and roll back whatever it raises."""
    try:
        call()
        session.commit()
    except Exception:
        session.rollback()
        log.exception("job %s: %s was not delivered", job_id, what)


def send_now(session: Session, settings: Settings, job_id: str) -> None:
    """The feedback a job owes since the transaction just committed moved it to a final state, delivered from
    inside a request (the worker's failure report, a cancel) with short waits, committed; never raises. What
    fails stays owed for the sweep."""
    # No token: nothing is sent, and the delivery only clears what the job owed.
    client = request_client(settings) if settings.github_token else None
    try:
        _after_commit(session, "the final status", job_id, lambda: send_owed(session, settings, job_id, client=client))
    finally:
        if client is not None:
            client.close()


def send_pending(session: Session, settings: Settings, job_id: str) -> None:
    """The ``pending`` status of a job just committed, from inside a request: after the commit, with short
    waits, committing, never raising. The row is locked while it is sent, so a final status cannot be sent
    before it; a job already final is left to its own delivery. A failure is owed again to the sweep."""
    if settings.github_token is None:
        return
    client = request_client(settings)

    def pending() -> None:
        job = _locked(session, job_id, skip_locked=False)
        if job is not None and (job.status not in FINAL or job.feedback_due_at is not None):
            deliver(session, settings, job, client=client)

    try:
        _after_commit(session, "the pending status", job_id, pending)
    finally:
        client.close()


def resend(session: Session, settings: Settings, job: Job) -> bool:
    """What an admin asks for after GitHub was fixed: owe the job's feedback again and deliver it now (a few
    tries, waits up to 10 s). Not committed."""
    owe(job)
    job.feedback_attempts = 0
    client = make_client(settings, attempts=3, max_wait_s=10.0)
    try:
        return deliver(session, settings, job, client=client)
    finally:
        client.close()
