"""GitHub feedback for a job: the commit status ``attnprof/<project>`` and the one PR comment per project.

Nothing here commits: the caller's transaction (the job creation request, the analysis task) owns it. A call
to GitHub that fails for good is recorded in the job's ``reason`` and never touches its status or verdict.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from profiler_core.documents import parse_result
from profiler_core.documents.comparison import ComparisonDocument
from profiler_core.documents.result import ResultDocument
from service.analysis import repository as comparisons
from service.config import Settings
from service.github.client import GitHubClient, GitHubError
from service.github.comment import CommentInput, marker, render
from service.jobs import repository as jobs
from service.jobs.models import Job
from service.projects import repository as projects
from service.runs import repository as runs
from service.testbeds import repository as testbeds

log = logging.getLogger(__name__)
FEEDBACK_FAILED = "GitHub feedback failed: "


def make_client(settings: Settings, *, attempts: int = 4, max_wait_s: float = 60.0) -> GitHubClient:
    token = settings.github_token.get_secret_value() if settings.github_token else None
    return GitHubClient(settings.github_api_url, token, attempts=attempts, max_wait_s=max_wait_s)


def _project(session: Session, job: Job) -> str:
    project = projects.get(session, job.project_id)
    return project.name if project else str(job.project_id)


def _document(session: Session, run_id: str | None) -> ResultDocument | None:
    run = runs.get(session, run_id) if run_id else None
    return parse_result(run.document, source=f"run {run.id}") if run is not None else None


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
        reason=job.reason,
        run_id=job.run_id,
        comparison_id=found.id if found else None,
        comparison=ComparisonDocument.model_validate(found.document) if found else None,
        candidate=_document(session, job.run_id) if found else None,
        baseline=_document(session, baseline_ids[0]) if baseline_ids else None,
    )


def comment_markdown(session: Session, job: Job, settings: Settings) -> str:
    return render(comment_input(session, job, settings))


def status_of(job: Job) -> tuple[str, str]:
    """The commit status state of ``job`` and its one-line description (GitHub keeps 140 characters)."""
    if job.status in ("failed", "timed_out", "cancelled"):
        return "error", f"job {job.status}: {(job.reason or '').splitlines()[0] if job.reason else 'no reason given'}"
    if job.status != "done" or job.verdict is None:
        return "pending", f"job {job.status}"
    state = "failure" if job.verdict == "fail" else "success"
    return state, f"verdict {job.verdict}" + (" (warnings)" if job.verdict == "warn" else "")


def _target_url(settings: Settings, project: str, job: Job) -> str:
    base = settings.public_url.rstrip("/")
    if job.run_id:
        return f"{base}/api/v1/projects/{project}/runs/{job.run_id}"
    return f"{base}/api/v1/jobs/{job.id}"


def _record(job: Job, error: Exception) -> None:
    log.warning("job %s: %s%s", job.id, FEEDBACK_FAILED, error)
    kept = (job.reason or "").split(FEEDBACK_FAILED)[0].rstrip("; ")
    note = f"{FEEDBACK_FAILED}{error}"
    job.reason = f"{kept}; {note}" if kept else note


def send(session: Session, settings: Settings, job_id: str, *, client: GitHubClient | None = None) -> bool:
    """Send the status of job ``job_id`` (and its PR comment once it is finished); False when GitHub failed
    (recorded on the job). Jobs with no ``repo``, or a service with no GitHub token, get nothing."""
    job = jobs.get(session, job_id)
    if job is None or not job.repo or (client is None and settings.github_token is None):
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
        _record(job, exc)
        return False
    finally:
        if own:
            gh.close()
    return True


def send_pending(session: Session, settings: Settings, job_id: str) -> None:
    """The ``pending`` status of a job just committed, from inside a request: after the commit, with fewer
    attempts and short waits (the analysis task sends the final status), committing a recorded failure, and
    never raising."""
    if settings.github_token is None:
        return
    client = make_client(settings, attempts=2, max_wait_s=2.0)
    try:
        if not send(session, settings, job_id, client=client):
            session.commit()
    except Exception:
        session.rollback()
        log.exception("job %s: the pending status was not sent", job_id)
    finally:
        client.close()
