"""GitHub feedback for a job or an uploaded run: the commit status ``attnprof/<project>`` and the one PR comment per
project, which a job's and an upload's feedback edit alike (feedback belongs to a run's comparison: an upload that
names its repository owes it as a job does, from its run's ``feedback_due_at``; ``run_feedback_of``, ``run_settled``).

What is sent is always the job's current state, read from the database (the job row, its comparison and run
documents), so a delivery can be made again at any time from what is stored. A job owes feedback while its
``feedback_due_at`` is set: the transaction that changes its state sets it
(``attnprof.server.jobs.service.owe_feedback``), a delivery that succeeds clears it, one that fails is recorded in the
job's ``reason`` and set again with backoff (``Sweep.feedback_retry_s``, doubling, at most 1 h) until
``Sweep.feedback_attempts`` deliveries failed. Feedback never touches a job's status or verdict.

This module reads and decides (``feedback_of``, ``settled``) and sends (``post``, with no transaction open); the
deliveries themselves, with their short transactions, are ``attnprof.server.github.outbox``'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from attnprof.contract.links import PATHS, Links
from attnprof.core.documents.result import ResultDocument
from attnprof.server.comparisons import documents as comparison_documents
from attnprof.server.comparisons import repository as comparisons
from attnprof.server.config import Settings, Sweep
from attnprof.server.errors import NotFound
from attnprof.server.github import markdown
from attnprof.server.github import repository as feedback_rows
from attnprof.server.github.budget import COMPACT_BUDGET_CHARS
from attnprof.server.github.client import GitHubClient, GitHubError
from attnprof.server.github.comment import CommentInput, marker, render
from attnprof.server.github.matrix import MatrixInput, render_matrix
from attnprof.server.jobs import matrix
from attnprof.server.jobs import paired as paired_sides
from attnprof.server.jobs.models import FINAL, Job
from attnprof.server.projects import repository as projects
from attnprof.server.projects import service as project_service
from attnprof.server.projects.service import RepoNotAllowed
from attnprof.server.runs import documents
from attnprof.server.runs import repository as run_rows
from attnprof.server.runs.models import Run
from attnprof.server.testbeds import repository as testbeds

log = logging.getLogger(__name__)
FEEDBACK_FAILED = "GitHub feedback failed: "
RETRY_MAX_S = 3600.0
_ENDED = {"failed": "failed", "timed_out": "timed out", "cancelled": "cancelled"}


def make_client(
    settings: Settings, *, attempts: int = 4, max_wait_s: float = 60.0, timeout_s: float = 10.0
) -> GitHubClient:
    token = settings.github_token.get_secret_value() if settings.github_token else None
    return GitHubClient(settings.github_api_url, token, attempts=attempts, max_wait_s=max_wait_s, timeout_s=timeout_s)


def delivery_client(settings: Settings) -> GitHubClient:
    """The client of a delivery made after a commit (the analysis task, the sweep, a request's send once it has
    answered): two tries, waits of up to 10 s, and 30 s for an answer, so that a slow GitHub is waited for rather
    than asked twice (a comment created twice would stay). The sweep retries what it could not deliver."""
    return make_client(settings, attempts=2, max_wait_s=10.0, timeout_s=30.0)


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
    # A paired job's verdict is its paired comparison's; its stored-history one is shown beside it, and the base
    # side's document (never a run) gives the kernel tables their left side.
    history = None
    base: ResultDocument | None = None
    if found is not None and found.mode == "paired" and job.run_id:
        history = comparisons.latest_for_run(session, job.run_id, mode="history")
        sides = paired_sides.documents_of(session, job.id)
        base = sides.base if sides is not None else None
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
        baseline=base if base is not None else _document(session, baseline_ids[0]) if baseline_ids else None,
        traces=frozenset(run_rows.list_traces(session, job.run_id)) if job.run_id else frozenset(),
        suite_path=job.suite_path,
        history=comparison_documents.comparison_of(history) if history is not None else None,
        history_id=history.id if history is not None else None,
        base_commit=job.base_commit if job.paired else None,
        gpu_seconds=job.gpu_seconds,
    )


def comment_markdown(session: Session, job: Job, settings: Settings) -> str:
    """The markdown of ``job``'s pull-request comment: a matrix's gathers all its testbeds (as they stand now)."""
    if job.matrix_id is not None:
        return render_matrix(matrix_input(session, job.matrix_id, settings))
    return render(comment_input(session, job, settings))


def matrix_input(session: Session, matrix_id: str, settings: Settings) -> MatrixInput:
    """Everything the comment of the matrix ``matrix_id`` shows, read from the database: each testbed's job, and
    the findings that are not portable once every job has ended."""
    found = matrix.of(session, matrix_id)
    members = [comment_input(session, m.job, settings) for m in found.members]
    return MatrixInput(
        project=members[0].project, members=members, complete=found.complete, not_portable=found.not_portable
    )


def context_of(project: str, testbed: str, job: Job) -> str:
    """The commit status's context: ``attnprof/<project>`` for a job alone; ``attnprof/<project>/<testbed>`` for a
    job of a matrix, one status per testbed, so that branch protection can require each GPU type's check by name and
    a failure on one names its GPU in the checks list (docs/github.md, "A matrix of testbeds")."""
    return f"attnprof/{project}/{testbed}" if job.matrix_id is not None else f"attnprof/{project}"


def _first_line(text: str | None) -> str:
    """The reason without the feedback note, first line only, with no control character (a worker's output may
    hold escape sequences)."""
    kept = (text or "").split(FEEDBACK_FAILED)[0].strip().rstrip(";").strip()
    return markdown.one_line(kept.splitlines()[0]).strip() if kept else ""


STATUS_DESCRIPTION_CHARS = 140
"""GitHub's limit on a commit status's description (a longer one is refused, 422). The description is plain text:
GitHub renders no markdown in it."""


def status_of(job: Job) -> tuple[str, str]:
    """The commit status state of ``job`` and its one-line description (at most ``STATUS_DESCRIPTION_CHARS``)."""
    if job.status in _ENDED:
        why = _first_line(job.reason) or "no reason recorded"
        return "error", markdown.clip(f"no verdict: job {_ENDED[job.status]}: {why}", STATUS_DESCRIPTION_CHARS)
    if job.status != "done" or job.verdict is None:
        return "pending", f"job {job.status}"
    state = "failure" if job.verdict == "fail" else "success"
    paired = ", paired run on one GPU" if job.paired else ""
    return state, f"verdict {job.verdict}" + (" (warnings)" if job.verdict == "warn" else "") + paired


def _target_url(settings: Settings, project: str, job: Job) -> str:
    """The dashboard page the status's "Details" opens: the run once the job is done, else the job."""
    links = Links(settings.public_url)
    if job.run_id and job.status == "done":
        return links.ui_run(project, job.run_id)
    return links.ui_job(project, job.id)


def _strip_note(job: Job) -> str | None:
    kept = (job.reason or "").split(FEEDBACK_FAILED)[0].rstrip("; ")
    return kept or None


def retry_after_s(cfg: Sweep, failures: int) -> float:
    """Seconds before the next delivery after ``failures`` failed ones: ``feedback_retry_s``, doubling, at most
    an hour."""
    return float(min(cfg.feedback_retry_s * 2 ** max(0, failures - 1), RETRY_MAX_S))


@dataclass(frozen=True)
class Feedback:
    """What one delivery tells GitHub of a job or an uploaded run, read from the stored rows once the delivery has
    claimed it."""

    job_status: str
    """The job's status when it was read (a job that ended while an older state was sent is sent again)."""
    repo: str
    commit: str
    context: str
    state: str
    description: str
    target_url: str
    pr: int | None
    marker: str
    comment: str | None
    """The pull-request comment's body: for a pull request, once the job has ended (None: no comment)."""
    compact: str | None = None
    """A smaller body of the same comment (the regressed cases' lines, no tables), sent when GitHub refuses
    ``comment`` as too long."""


def check_repo(session: Session, *, project_id: int, repo: str) -> None:
    """Refuse (``RepoNotAllowed``) a delivery to a repository the project may not report to now: read in the
    delivery's claim, right before it posts, so a row stored before the repository was taken from the project (or
    before the check existed) reaches nothing."""
    if not project_service.may_report(session, project_id=project_id, repo=repo):
        reason = project_service.refusal(session, project_id=project_id, repo=repo)
        raise RepoNotAllowed(f"{reason}; nothing was sent to it")


def feedback_of(session: Session, settings: Settings, job: Job) -> Feedback:
    """What GitHub is told of ``job`` (one that names a repository), read from the database: its commit status and,
    for a pull request once the job has ended, its comment. ``ValueError`` when a stored document does not load;
    ``RepoNotAllowed`` when the job's project may not report to its repository."""
    assert job.repo, "a job that names no repository owes nothing"
    check_repo(session, project_id=job.project_id, repo=job.repo)
    project = _project(session, job)
    state, description = status_of(job)
    comment = compact = None
    if job.pr is not None and state != "pending" and not _superseded(session, job.project_id, job.pr, job.repo, job):
        if job.matrix_id is not None:
            # The one comment gathers every testbed: sent by the delivery that finds them all ended (the end of the
            # last to end owes one that reads after it), so no comment missing a testbed is ever posted over it.
            gathered = matrix_input(session, job.matrix_id, settings)
            if gathered.complete:
                comment = render_matrix(gathered)
                compact = render_matrix(gathered, budget_chars=COMPACT_BUDGET_CHARS, kernel_tables=False)
        else:
            inp = comment_input(session, job, settings)
            comment = render(inp)
            compact = render(inp, budget_chars=COMPACT_BUDGET_CHARS, kernel_tables=False)
    testbed = testbeds.get(session, job.testbed_id)
    return Feedback(
        job_status=job.status,
        repo=job.repo,
        commit=job.commit,
        context=context_of(project, testbed.name if testbed else str(job.testbed_id), job),
        state=state,
        description=description,
        target_url=_target_url(settings, project, job),
        pr=job.pr,
        marker=marker(project),
        comment=comment,
        compact=compact,
    )


def _superseded(session: Session, project_id: int, pr: int, repo: str, subject: Job | Run) -> bool:
    """Whether a newer job or upload of the same pull request owns the project's comment now: the feedback of an
    older one (its end, or a retry that comes late) then sends its commit status only, and never puts an older
    commit's verdict back over the newer one's."""
    return feedback_rows.newer_on_pr(session, project_id=project_id, repo=repo, pr=pr, than=subject.created_at)


def post(client: GitHubClient, feedback: Feedback) -> None:
    """Send ``feedback``: the commit status, then the pull-request comment (the project's one, edited in place once
    it exists). ``GitHubError`` when GitHub refuses after the client's retries. Called with no transaction open.

    A comment that GitHub refuses as too long (422) is not sent again as it is: its compact body (``Feedback.compact``)
    is sent in its place at once, and if that is refused too, the error is GitHub's answer to the compact one."""
    client.create_status(
        feedback.repo,
        feedback.commit,
        state=feedback.state,
        context=feedback.context,
        description=feedback.description,
        target_url=feedback.target_url,
    )
    if feedback.comment is not None and feedback.pr is not None:
        try:
            client.upsert_comment(feedback.repo, feedback.pr, marker=feedback.marker, body=feedback.comment)
        except GitHubError as exc:
            smaller = feedback.compact
            if not exc.too_long or smaller is None or len(smaller) >= len(feedback.comment):
                raise
            log.warning(
                "%s#%d: GitHub refused the comment of %d characters as too long (%s); sending its %d-character "
                "compact form",
                feedback.repo,
                feedback.pr,
                len(feedback.comment),
                "; ".join(exc.errors),
                len(smaller),
            )
            client.upsert_comment(feedback.repo, feedback.pr, marker=feedback.marker, body=smaller)


def run_comment_input(session: Session, run: Run, settings: Settings, *, project: str) -> CommentInput:
    """Everything the comment of an uploaded ``run`` shows, read from the database: its latest comparison, as a
    job's comment shows its run's (no job to link; the traces stored so far are linked)."""
    found = comparisons.latest_for_run(session, run.id)
    testbed = testbeds.get(session, run.testbed_id)
    baseline_ids = [str(b) for b in found.baseline_run_ids] if found else []
    candidate = _document(session, run.id)
    return CommentInput(
        project=project,
        job_id="",
        status="done",
        suite_name=candidate.suite.name if candidate is not None else "",
        testbed=testbed.name if testbed else "",
        branch=run.branch,
        commit=run.commit,
        public_url=settings.public_url,
        pr=run.pr,
        run_id=run.id,
        comparison_id=found.id if found else None,
        comparison=comparison_documents.comparison_of(found) if found else None,
        candidate=candidate if found else None,
        baseline=_document(session, baseline_ids[0]) if baseline_ids else None,
        traces=frozenset(run_rows.list_traces(session, run.id)),
    )


def run_feedback_of(session: Session, settings: Settings, run: Run) -> Feedback:
    """What GitHub is told of an uploaded ``run`` (one that names a repository), read from the database: the commit
    status of its latest comparison's verdict and, for a pull request, the project's comment, the same one a job's
    feedback edits. ``ValueError`` when a stored document does not load, or when the run has no comparison (an
    upload is compared in the transaction that stores it); ``RepoNotAllowed`` when the run's project may not report
    to its repository."""
    assert run.repo, "a run that names no repository owes nothing"
    check_repo(session, project_id=run.project_id, repo=run.repo)
    project_row = projects.get(session, run.project_id)
    project = project_row.name if project_row else str(run.project_id)
    found = comparisons.latest_for_run(session, run.id)
    if found is None:
        raise ValueError(f"run {run.id} has no comparison stored")
    state = "failure" if found.verdict == "fail" else "success"
    description = f"verdict {found.verdict}" + (" (warnings)" if found.verdict == "warn" else "") + ", uploaded run"
    comment = compact = None
    if run.pr is not None and not _superseded(session, run.project_id, run.pr, run.repo, run):
        inp = run_comment_input(session, run, settings, project=project)
        comment = render(inp)
        compact = render(inp, budget_chars=COMPACT_BUDGET_CHARS, kernel_tables=False)
    return Feedback(
        job_status="done",
        repo=run.repo,
        commit=run.commit,
        context=f"attnprof/{project}",
        state=state,
        description=description,
        target_url=Links(settings.public_url).ui_run(project, run.id),
        pr=run.pr,
        marker=marker(project),
        comment=comment,
        compact=compact,
    )


@dataclass(frozen=True)
class Settled:
    """A job's outbox columns after a delivery of its feedback."""

    due_at: datetime | None
    attempts: int
    reason: str | None


def settled(job: Job, *, sent_status: str | None, error: Exception | None, cfg: Sweep, now: datetime) -> Settled:
    """What a delivery leaves on ``job`` (the row as read after it), having sent the state of ``sent_status``
    (None: nothing was sent, the service has no GitHub token):

    - GitHub refused (``error``): the failure is noted in the reason, and the feedback owed again after the backoff
      (``retry_after_s``), or given up after ``cfg.feedback_attempts`` failed deliveries (an admin's resend sends
      it then);
    - GitHub refused it for good (a ``GitHubError`` that is not ``retryable``: a 4xx other than a rate limit, such
      as 422 Validation Failed): the same request would get the same answer, so it is noted and given up at once,
      never sent again as it is. A new state of the job owes new feedback; an admin's resend sends it again;
    - not sent, since the job's project may not report to its repository (``RepoNotAllowed``): noted and given up at
      once, as a refusal for good; once the service's admin allows the repository, an admin's resend sends it;
    - delivered: nothing is owed and the note goes; but a job that ended while an older state was being sent owes
      its end at once, so that the end is sent after the older state, never before it.
    """
    kept = _strip_note(job)
    if error is None:
        ended_since = sent_status is not None and job.status != sent_status and job.status in FINAL
        return Settled(due_at=now if ended_since else None, attempts=0, reason=kept)
    attempts = (job.feedback_attempts or 0) + 1
    due_at: datetime | None
    if isinstance(error, RepoNotAllowed):
        due_at, then = None, f"not sent again; once it is allowed, POST {PATHS.api_github_resend(job.id)}"
    elif isinstance(error, GitHubError) and not error.retryable:
        due_at, then = None, f"refused for good, not sent again; POST {PATHS.api_github_resend(job.id)}"
    elif attempts >= cfg.feedback_attempts:
        due_at, then = None, f"given up after {attempts} deliveries; POST {PATHS.api_github_resend(job.id)}"
    else:
        wait_s = retry_after_s(cfg, attempts)
        due_at = now + timedelta(seconds=wait_s)
        then = f"delivery {attempts} of {cfg.feedback_attempts}, retried in {wait_s:.0f} s"
    log.warning("job %s: %s%s (%s)", job.id, FEEDBACK_FAILED, error, then)
    note = f"{FEEDBACK_FAILED}{error} ({then})"
    return Settled(due_at=due_at, attempts=attempts, reason=f"{kept}; {note}" if kept else note)


@dataclass(frozen=True)
class RunSettled:
    """An uploaded run's outbox columns after a delivery of its feedback."""

    due_at: datetime | None
    attempts: int
    note: str | None


def run_settled(run: Run, *, error: Exception | None, cfg: Sweep, now: datetime) -> RunSettled:
    """What a delivery leaves on an uploaded ``run``, by the rules of a job's (``settled``): delivered, nothing owed
    and no note; refused for good (a 4xx other than a rate limit, such as 422, or a repository its project may not
    report to), noted and never sent again as it is;
    refused otherwise, owed again after the backoff until ``cfg.feedback_attempts`` deliveries failed. A run's state
    never changes after its upload, so no newer state can be owed at once."""
    if error is None:
        return RunSettled(due_at=None, attempts=0, note=None)
    attempts = (run.feedback_attempts or 0) + 1
    due_at: datetime | None
    if isinstance(error, RepoNotAllowed):
        due_at, then = None, "not sent again"
    elif isinstance(error, GitHubError) and not error.retryable:
        due_at, then = None, "refused for good, not sent again"
    elif attempts >= cfg.feedback_attempts:
        due_at, then = None, f"given up after {attempts} deliveries"
    else:
        wait_s = retry_after_s(cfg, attempts)
        due_at = now + timedelta(seconds=wait_s)
        then = f"delivery {attempts} of {cfg.feedback_attempts}, retried in {wait_s:.0f} s"
    log.warning("run %s: %s%s (%s)", run.id, FEEDBACK_FAILED, error, then)
    return RunSettled(due_at=due_at, attempts=attempts, note=f"{FEEDBACK_FAILED}{error} ({then})")
