"""The GitHub webhook's logic: the signature check and the ``/attnprof rerun`` and ``/attnprof bisect`` commands."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from typing import Any

from sqlalchemy.orm import Session

from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.server.bisections import service as bisections
from attnprof.server.bisections.models import Bisection
from attnprof.server.config import Settings
from attnprof.server.errors import NotFound, ServiceError, Unauthorized
from attnprof.server.github import repository
from attnprof.server.github.client import GitHubClient
from attnprof.server.jobs import repository as jobs
from attnprof.server.jobs import service as job_service
from attnprof.server.jobs.models import Job
from attnprof.server.projects import service as project_service

RERUN = "/attnprof rerun"
BISECT = "/attnprof bisect"
WRITERS = frozenset({"admin", "maintain", "write"})


def verify(settings: Settings, body: bytes, signature: str | None) -> None:
    """Raise ``Unauthorized`` unless ``signature`` is ``sha256=`` + HMAC-SHA256 of ``body`` with the secret."""
    if settings.github_webhook_secret is None:
        raise NotFound("the GitHub webhook is not configured (ATTNPROF_GITHUB_WEBHOOK_SECRET)")
    key = settings.github_webhook_secret.get_secret_value().encode()
    expected = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
    if not signature or not hmac.compare_digest(expected.encode(), signature.encode()):
        raise Unauthorized("bad or missing X-Hub-Signature-256")


def rerun_request(event: str | None, payload: dict[str, Any], command: str = RERUN) -> tuple[str, int, str] | None:
    """(repo, PR number, user) when the event is a new ``command`` comment (``/attnprof rerun``) on a pull
    request."""
    if event != "issue_comment" or payload.get("action") != "created":
        return None
    issue, comment = payload.get("issue") or {}, payload.get("comment") or {}
    words = str(comment.get("body") or "").strip().split()
    if not issue.get("pull_request") or " ".join(words[:2]) != command:
        return None
    repo = (payload.get("repository") or {}).get("full_name")
    user = (comment.get("user") or {}).get("login")
    number = issue.get("number")
    if not isinstance(repo, str) or not isinstance(user, str) or not isinstance(number, int):
        return None
    return repo, number, user


def may_rerun(client: GitHubClient, repo: str, user: str) -> bool:
    answer = client.request("GET", f"/repos/{repo}/collaborators/{user}/permission").json()
    return answer.get("permission") in WRITERS or answer.get("role_name") in WRITERS


def requeue(session: Session, *, repo: str, pr: int) -> list[Job]:
    """A queued copy of the newest job of each project on the pull request, owing its pending status (not committed,
    not enqueued). Only the projects that may report to ``repo`` now: a job of another project that named it would
    otherwise be run again, and its feedback posted there, on a comment of the repository's users."""
    allowed = project_service.projects_of_repository(session, repo)
    copies = []
    for last in repository.last_jobs_of_pr(session, repo=repo, pr=pr):
        if last.project_id not in allowed:
            continue
        copy = Job(
            id=str(uuid.uuid4()),
            project_id=last.project_id,
            testbed_id=last.testbed_id,
            spec=last.spec,
            suite_name=last.suite_name,
            bundle_sha256=last.bundle_sha256,
            # A paired job's rerun is paired while its base tree is kept (the retention sweep may have deleted it).
            base_bundle_sha256=last.base_bundle_sha256,
            paired=last.base_bundle_sha256 is not None,
            repo=last.repo,
            branch=last.branch,
            commit=last.commit,
            base_commit=last.base_commit,
            ancestors=list(last.ancestors),
            pr=last.pr,
            status="queued",
            max_attempts=last.max_attempts,
        )
        job_service.owe_feedback(copy)
        copies.append(jobs.add(session, copy))
    return copies


def bisect_pr(session: Session, *, repo: str, pr: int, user: str) -> tuple[list[Bisection], list[str]]:
    """A bisection of the pull request's commits (its merge base to its head) for the newest job of each project
    allowed to report to ``repo``, on that job's testbed, for the cases its comparison found slower (every case
    where it has none); and, for each project that got none, why. Not committed."""
    allowed = project_service.projects_of_repository(session, repo)
    started: list[Bisection] = []
    notes: list[str] = []
    for last in repository.last_jobs_of_pr(session, repo=repo, pr=pr):
        if last.project_id not in allowed:
            continue
        if not last.base_commit:
            notes.append(f"job {last.id}: no merge base was sent with it")
            continue
        try:
            b = bisections.from_job(
                session,
                last,
                good=last.base_commit,
                bad=last.commit,
                cases=_slower_cases(session, last),
                by=f"{user} (GitHub, {BISECT} on #{pr})",
                via="comment",
                pr=pr,
            )
        except ServiceError as exc:
            notes.append(f"job {last.id}: {exc.detail}")
            continue
        started.append(b)
    return started, notes


def _slower_cases(session: Session, job: Job) -> list[str]:
    try:
        doc = ComparisonDocument.model_validate(job_service.comparison(session, job).document)
    except ServiceError:
        return []
    return sorted(
        {
            f.case
            for f in doc.findings
            if f.metric == "latency" and f.change is not None and f.change > 0 and f.verdict == "fail"
        }
    )
