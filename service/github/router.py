from __future__ import annotations

import json
import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request

from service import queue
from service.db import SessionDep
from service.dependencies import SettingsDep
from service.errors import InvalidPayload, PayloadTooLarge
from service.github import service as github
from service.github import webhook
from service.github.client import GitHubError
from service.github.schemas import WebhookAnswer
from service.openapi import errors
from service.testbeds import repository as testbeds

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1/github", tags=["github"])


async def _raw_body(request: Request) -> bytes:
    return await request.body()


@router.post("/webhook", response_model=WebhookAnswer, responses=errors(401, 404, 413, 422))
def receive(
    body: Annotated[bytes, Depends(_raw_body)],
    session: SessionDep,
    settings: SettingsDep,
    signature: Annotated[str | None, Header(alias="X-Hub-Signature-256")] = None,
    event: Annotated[str | None, Header(alias="X-GitHub-Event")] = None,
) -> WebhookAnswer:
    """GitHub's webhook: a ``/attnprof rerun`` comment on a pull request, by a user with write access,
    queues a copy of the pull request's newest job of each project. Signed with the shared secret."""
    if len(body) > settings.limits.json_body_bytes:
        raise PayloadTooLarge("webhook body over the JSON limit")
    webhook.verify(settings, body, signature)
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise InvalidPayload("webhook body: not JSON") from exc
    found = webhook.rerun_request(event, payload if isinstance(payload, dict) else {})
    if found is None:
        return WebhookAnswer(action="ignored", detail="not a /attnprof rerun comment on a pull request")
    repo, pr, user = found
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
    copies = webhook.requeue(session, repo=repo, pr=pr)
    session.commit()
    for job in copies:
        tb = testbeds.get(session, job.testbed_id)
        queue.enqueue_profile(settings, job_id=job.id, attempt=1, testbed=tb.name if tb else "")
        github.send_pending(session, settings, job.id)
    return WebhookAnswer(action="rerun", detail=f"{len(copies)} job(s) queued", jobs=[j.id for j in copies])
