from __future__ import annotations

import json
import logging
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Header, Path, Request
from fastapi.responses import PlainTextResponse

from attnprof.server.auth.dependencies import PrincipalDep
from attnprof.server.db import SessionDep, request_session
from attnprof.server.dependencies import FeedbackDep, SettingsDep
from attnprof.server.errors import Conflict, InvalidPayload, PayloadTooLarge
from attnprof.server.github import outbox, webhook
from attnprof.server.github import service as github
from attnprof.server.github.client import GitHubError
from attnprof.server.github.schemas import ResendAnswer, WebhookAnswer
from attnprof.server.jobs import dispatch
from attnprof.server.jobs import service as jobs
from attnprof.server.openapi import errors

log = logging.getLogger(__name__)
# Every route says its whole path: the comment's markdown is a job's (``/api/v1/jobs/...``), the rest GitHub's.
router = APIRouter(prefix="/api/v1")


async def _raw_body(request: Request) -> bytes:
    return await request.body()


@router.get(
    "/jobs/{job_id}/comment",
    tags=["jobs"],
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/markdown": {}}, "description": "the PR comment, GitHub markdown"}},
)
def get_comment(job_id: str, principal: PrincipalDep, session: SessionDep, settings: SettingsDep) -> PlainTextResponse:
    """The markdown of the pull-request comment for this job, as GitHub would show it."""
    job = jobs.get_for(session, principal, job_id)
    return PlainTextResponse(github.comment_markdown(session, job, settings), media_type="text/markdown")


@router.post("/github/webhook", tags=["github"], response_model=WebhookAnswer, responses=errors(401, 404, 413, 422))
def receive(
    body: Annotated[bytes, Depends(_raw_body)],
    session: SessionDep,
    settings: SettingsDep,
    background: BackgroundTasks,
    send_feedback: FeedbackDep,
    signature: Annotated[str | None, Header(alias="X-Hub-Signature-256")] = None,
    event: Annotated[str | None, Header(alias="X-GitHub-Event")] = None,
) -> WebhookAnswer:
    """GitHub's webhook: a ``/attnprof rerun`` comment on a pull request, by a user with write access,
    queues a copy of the pull request's newest job of each project; a ``/attnprof bisect`` comment starts a
    bisection of the pull request's commits on the testbed of each such job. Signed with the shared secret."""
    if len(body) > settings.limits.json_body_bytes:
        raise PayloadTooLarge("webhook body over the JSON limit")
    webhook.verify(settings, body, signature)
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise InvalidPayload("webhook body: not JSON") from exc
    data = payload if isinstance(payload, dict) else {}
    found = webhook.rerun_request(event, data)
    bisect = webhook.rerun_request(event, data, webhook.BISECT)
    if found is None and bisect is None:
        return WebhookAnswer(action="ignored", detail="not a /attnprof rerun or bisect comment on a pull request")
    repo, pr, user = found or bisect  # type: ignore[misc]
    # Asked before the session is first used: no transaction is open while GitHub answers.
    client = github.make_client(settings)
    try:
        allowed = webhook.may_rerun(client, repo, user)
    except GitHubError as exc:
        log.warning("rerun on %s#%s by %s: permission check failed: %s", repo, pr, user, exc)
        allowed = False
    finally:
        client.close()
    if not allowed:
        return WebhookAnswer(action="ignored", detail=f"{user} has no write access to {repo}")
    if bisect is not None:
        started, notes = webhook.bisect_pr(session, repo=repo, pr=pr, user=user)
        session.commit()
        detail = f"{len(started)} bisection(s) started" + "".join(f"; {n}" for n in notes)
        return WebhookAnswer(action="bisect", detail=detail, bisections=[b.id for b in started])
    copies = webhook.requeue(session, repo=repo, pr=pr)
    session.commit()
    # The copies wait in the database like any new job, and are offered when their testbed has a worker free.
    dispatch.after_commit(session, settings, {job.testbed_id for job in copies})
    if copies:
        background.add_task(send_feedback, [job.id for job in copies])  # their pending statuses
    return WebhookAnswer(action="rerun", detail=f"{len(copies)} job(s) queued", jobs=[j.id for j in copies])


@router.post("/github/jobs/{job_id}/resend", tags=["github"], response_model=ResendAnswer)
def resend(
    job_id: Annotated[str, Path(max_length=36)],
    principal: PrincipalDep,
    session: SessionDep,
    settings: SettingsDep,
    request: Request,
) -> ResendAnswer:
    """Send the job's commit status (and its PR comment, once it has ended) again from what is stored: after
    GitHub was down for longer than the sweep's retries, or a token without access was fixed. An admin token of
    the job's project. A delivery that fails is recorded on the job and owed to the sweep again (with its
    retries counted afresh); the job's status and verdict never change."""
    job = jobs.get_for(session, principal, job_id, role="admin")
    if not job.repo:
        raise Conflict(f"job {job_id} names no repository: there is nothing to send to GitHub")
    if settings.github_token is None:
        raise Conflict("GitHub feedback is off: the service has no ATTNPROF_GITHUB_TOKEN")
    jobs.owe_feedback(job, at_once=True)
    session.commit()  # the request's transaction ends here: GitHub is called with none open
    delivered = outbox.resend(lambda: request_session(request.app), settings, job.id)
    session.refresh(job)
    state, description = github.status_of(job)
    return ResendAnswer(
        delivered=delivered is True,
        state=state,
        description=description,
        owed_at=job.feedback_due_at,
        reason=job.reason,
    )
