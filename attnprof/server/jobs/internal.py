"""Endpoints for the GPU workers (docs/architecture.md, "Worker API"), described by their own OpenAPI document,
``/internal/openapi.json`` (the public one at ``/openapi.json`` leaves them out).

A worker token (``WorkerToken``) opens the testbed and liveness routes and the claim, which also needs the claim
secret of the job's latest ``profile.run`` message; it alone keys its testbed (``POST /internal/testbed/key``, from
the device the worker probed at start); the claim answers with the attempt's job token (``JobToken``), and only that
opens the job's bundle, heartbeat, result, failure and trace routes (``attnprof.server.jobs.attempts`` says
for how long).
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, BackgroundTasks, Path, Query, Request, Response
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session
from starlette.applications import Starlette

from attnprof.contract import ids, routes
from attnprof.contract.worker_api import (
    Alive,
    AliveAnswer,
    Canary,
    CanaryAnswer,
    Claim,
    ClaimAnswer,
    Failure,
    Heartbeat,
    HeartbeatAnswer,
    WorkerDevice,
    WorkerDeviceAnswer,
    WorkerResult,
    WorkerResultAnswer,
    WorkerTestbed,
)
from attnprof.server import queue
from attnprof.server.auth.dependencies import JobTokenDep, WorkerDep
from attnprof.server.config import Settings
from attnprof.server.db import SessionDep, utcnow
from attnprof.server.dependencies import FeedbackDep, FeedbackSender, SettingsDep
from attnprof.server.errors import Conflict, error_response
from attnprof.server.hosts import notices
from attnprof.server.hosts import service as hosts
from attnprof.server.jobs import attempts, dispatch, service
from attnprof.server.jobs import repository as job_rows
from attnprof.server.jobs.models import FINAL
from attnprof.server.jobs.schemas import JobOut
from attnprof.server.openapi import LICENSE, SERVERS, document_errors, errors, operation_id
from attnprof.server.testbeds import service as testbeds

OPENAPI_PATH = routes.OPENAPI
# Each route's path is its template in ``attnprof.contract.routes``, the paths the worker requests.
router = APIRouter(tags=["internal"], include_in_schema=False, generate_unique_id_function=operation_id)
# The body is read raw (a gzip file, not JSON), so FastAPI cannot describe it: say what it is.
_TRACE_BODY = {"required": True, "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}}
JobIdPath = Annotated[ids.JobId, Path(max_length=36, description="the job's id, as its profile.run message names it")]
# Error answers by the token a route takes: a worker token can be unknown (401), not a worker's (403) or over its
# rate limit (429); a job token is the job's current attempt's or it opens nothing (401, whatever the job).
_WORKER_ERRORS = errors(401, 403, 429)
_JOB_ERRORS = errors(401)


@router.get(routes.TESTBED, response_model=WorkerTestbed, responses=_WORKER_ERRORS)
def testbed(worker: WorkerDep, session: SessionDep) -> WorkerTestbed:
    """The testbed this worker token serves and its key (what a worker checks its GPU against before it starts)."""
    tb = attempts.worker_testbed(session, worker)
    return WorkerTestbed(name=tb.name, key=tb.key, meaning=tb.meaning)


@router.post(routes.TESTBED_KEY, response_model=WorkerDeviceAnswer, responses={**_WORKER_ERRORS, **errors(409, 422)})
def register(body: WorkerDevice, worker: WorkerDep, session: SessionDep) -> WorkerDeviceAnswer:
    """The device this worker profiles on, as it probed it at start (outside the jail, before any job): a testbed
    with no key takes it as its key and meaning; one with the same key is left as it is. 409 when the testbed is
    keyed by another device, naming both: the worker must not start. Only a worker token keys a testbed; a result
    document never does."""
    tb = attempts.worker_testbed(session, worker)
    tb, keyed = testbeds.register(session, testbed_id=tb.id, key=body.key, meaning=body.meaning)
    session.commit()
    return WorkerDeviceAnswer(name=tb.name, key=tb.key, meaning=tb.meaning, keyed=keyed)


@router.post(routes.ALIVE, response_model=AliveAnswer, responses={**_WORKER_ERRORS, **errors(409)})
def alive(body: Alive, worker: WorkerDep, session: SessionDep, settings: SettingsDep) -> AliveAnswer:
    """The worker is alive (busy or idle): it says so every ``ATTNPROF_FAIRNESS__WORKER_ALIVE_S``, and counts as a
    live worker of its testbed for ``ATTNPROF_FAIRNESS__WORKER_LIVE_S`` after each. The dispatcher offers a testbed
    as many jobs as it has live workers free, so a worker that appears (new, or back from silence) may be offered
    one at once. 409 when the body names another testbed than the token's."""
    tb = attempts.worker_testbed(session, worker)
    if body.testbed != tb.name:
        raise Conflict(f"testbed: this worker token serves testbed {tb.name!r}, not {body.testbed!r}")
    live_s = settings.fairness.worker_live_s
    live, appeared = testbeds.worker_alive(session, testbed_id=tb.id, name=body.worker, now=utcnow(), live_s=live_s)
    session.commit()
    if appeared:
        dispatch.after_commit(session, settings, [tb.id])
    return AliveAnswer(testbed=tb.name, live_workers=live, live_s=live_s)


@router.post(routes.CANARY, response_model=CanaryAnswer, responses={**_WORKER_ERRORS, **errors(409, 422)})
def canary(body: Canary, worker: WorkerDep, session: SessionDep, settings: SettingsDep) -> CanaryAnswer:
    """The canary this worker ran on its host (outside the jail, with no user code), judged against its testbed's
    band (docs/service.md, "Host health"). A host outside the band is quarantined: its workers claim no jobs, its
    runs since its last passing canary are marked and left out of baselines, and the projects using the testbed are
    told through their alert webhooks; a canary that passes again releases it. 409 when the body names another
    testbed than the token's."""
    tb = attempts.worker_testbed(session, worker)
    if body.testbed != tb.name:
        raise Conflict(f"testbed: this worker token serves testbed {tb.name!r}, not {body.testbed!r}")
    now = utcnow()
    since = now - timedelta(days=settings.health.notify_days)
    audience = job_rows.projects_to_notify(session, testbed_id=tb.id, since=since)
    judged = hosts.record(session, testbed_id=tb.id, body=body, cfg=settings.health, now=now, audience=audience)
    notices.after_commit(session, [n.id for n in judged.notices])
    session.commit()
    if judged.changed:  # a host joins or leaves the live workers: the testbed's window moves
        dispatch.after_commit(session, settings, [tb.id])
    reasons = list(judged.canary.reasons)
    state = "quarantined" if reasons else judged.canary.state
    return CanaryAnswer(host=judged.host.name, state=state, reasons=reasons, retry_s=settings.health.retry_s)


@router.post(routes.CLAIM, response_model=ClaimAnswer, responses={**_WORKER_ERRORS, **errors(404, 409)})
def claim(job_id: JobIdPath, body: Claim, worker: WorkerDep, session: SessionDep, settings: SettingsDep) -> ClaimAnswer:
    """Start an attempt with the secret of the job's profile.run message, and get its job token. 404 for a job that
    is not this testbed's or whose latest message did not carry this secret; 409 when the delivery is stale (another
    attempt, or the job is no longer queued), and when the worker's host is quarantined (the job goes back to the
    queue for a healthy host): drop the message."""
    lease_s = settings.sweep.heartbeat_stale_s
    if worker.testbed_id is not None:
        held = hosts.is_quarantined(session, testbed_id=worker.testbed_id, worker=body.worker)
        if held is not None:
            again = attempts.unoffer(session, worker, job_id, attempt=body.attempt, secret=body.secret)
            session.commit()
            if again is not None:
                dispatch.after_commit(session, settings, [again.testbed_id])
            raise Conflict(
                f"host {held.name} is quarantined ({held.reason}): it claims no job until it passes its canary; "
                f"job {job_id} is back in the queue"
            )
    job, token = attempts.claim(
        session, worker, job_id, attempt=body.attempt, worker_name=body.worker, secret=body.secret, lease_s=lease_s
    )
    session.commit()
    # The offer became a running job: with no live worker free, the testbed is offered one more to wait for the next.
    dispatch.after_commit(session, settings, [job.testbed_id])
    return ClaimAnswer(
        id=ids.JobId(job.id),
        attempt=job.attempts,
        spec=job.spec,
        bundle_sha256=job.bundle_sha256,
        paired=job.paired,
        base_bundle_sha256=job.base_bundle_sha256,
        repo=job.repo,
        commit=job.commit,
        testbed=service.testbed_name(session, job),
        project=service.project_name(session, job),
        token=token,
        lease_s=lease_s,
    )


@router.post(routes.HEARTBEAT, response_model=HeartbeatAnswer, responses={**_JOB_ERRORS, **errors(409)})
def heartbeat(
    job_id: JobIdPath, body: Heartbeat, token: JobTokenDep, session: SessionDep, settings: SettingsDep
) -> HeartbeatAnswer:
    """The attempt is alive: its lease is renewed. The answer says whether the job was cancelled (stop the work)."""
    job = attempts.heartbeat(
        session, job_id, token.sha256, attempt=body.attempt, lease_s=settings.sweep.heartbeat_stale_s
    )
    return HeartbeatAnswer(status=job.status, cancelled=job.status == "cancelled")


@router.get(
    routes.BUNDLE,
    response_class=Response,
    responses={200: {"content": {"application/gzip": {}}}, **_JOB_ERRORS, **errors(404, 409)},
)
def bundle(
    job_id: JobIdPath,
    token: JobTokenDep,
    session: SessionDep,
    tree: Annotated[
        Literal["head", "base"],
        Query(description="head: the job's source; base: a paired job's merge base's (its base_bundle)"),
    ] = "head",
) -> Response:
    """The job's source bundle (tar.gz), to a running attempt; ``tree=base``: a paired job's base bundle."""
    return Response(attempts.bundle(session, job_id, token.sha256, tree=tree), media_type="application/gzip")


@router.post(routes.RESULT, response_model=WorkerResultAnswer, responses={**_JOB_ERRORS, **errors(409, 422)})
def result(
    job_id: JobIdPath,
    body: WorkerResult,
    token: JobTokenDep,
    session: SessionDep,
    settings: SettingsDep,
    background: BackgroundTasks,
    send_feedback: FeedbackDep,
) -> WorkerResultAnswer | Response:
    """Store the attempt's result document as a run (once per job and attempt), then queue its analysis. A paired
    job's base and paired documents come in the same body and are stored with the run, never as a run.

    A document measured on another testbed key than the job's testbed's is refused (422, naming both keys), and the
    job fails with that reason: nothing is stored and the testbed is left as it was."""
    try:
        run, duplicate = attempts.accept_result(
            session,
            job_id,
            token.sha256,
            attempt=body.attempt,
            result=body.result,
            wait_s=settings.sweep.analyzing_stale_s,
            base=body.base,
            paired=body.paired,
        )
    except testbeds.KeyMismatch as exc:
        return _refuse_result(job_id, body.attempt, exc, token.sha256, session, settings, background, send_feedback)
    if not duplicate:
        session.commit()
        queue.enqueue_analysis(settings, job_id=job_id)
        dispatch.after_commit(session, settings, [run.testbed_id])  # the worker is free
    return WorkerResultAnswer(run_id=ids.RunId(run.id), status="analyzing", duplicate=duplicate)


def _refuse_result(
    job_id: str,
    attempt: int,
    refused: testbeds.KeyMismatch,
    token_sha256: str,
    session: Session,
    settings: Settings,
    background: BackgroundTasks,
    send_feedback: FeedbackSender,
) -> Response:
    """End the job whose result was measured on another key: the document is the job's own output (the user's code
    writes it), so trying again on this testbed cannot help. The failure is committed before the refusal answers,
    and its GitHub feedback is sent once it has (a refusal raised would roll it back, and drop that send)."""
    session.rollback()  # whatever the refused store began
    job = attempts.fail(
        session,
        job_id,
        token_sha256,
        attempt=attempt,
        reason=f"the result document was refused: {refused.detail}",
        timed_out=False,
        retry=False,
    )
    service.owe_feedback(job)
    session.commit()
    dispatch.after_commit(session, settings, [job.testbed_id])  # the worker is free
    if job.repo:
        background.add_task(send_feedback, [job.id])
    response = error_response(refused.status, refused.error, refused.detail)
    response.background = background
    return response


@router.put(
    routes.TRACE,
    status_code=204,
    response_class=Response,
    responses={**_JOB_ERRORS, **errors(404, 409)},
    openapi_extra={"requestBody": _TRACE_BODY},
)
async def trace(
    job_id: JobIdPath,
    name: Annotated[str, Path(min_length=1, max_length=500)],
    attempt: Annotated[int, Query(ge=1)],
    request: Request,
    token: JobTokenDep,
    session: SessionDep,
    settings: SettingsDep,
) -> Response:
    """Attach a trace that the stored result of ``attempt`` names (gzip Chrome trace); a repeat replaces it. The
    attempt's token uploads traces for ``TRACE_UPLOAD_S`` (15 minutes) after its result."""
    data = await request.body()
    attempts.accept_trace(
        session,
        job_id,
        token.sha256,
        attempt=attempt,
        name=name,
        data=data,
        limit_bytes=settings.limits.trace_bytes,
        retention=settings.retention,
    )
    return Response(status_code=204)


@router.post(routes.FAILURE, response_model=JobOut, responses={**_JOB_ERRORS, **errors(409)})
def failure(
    job_id: JobIdPath,
    body: Failure,
    token: JobTokenDep,
    session: SessionDep,
    settings: SettingsDep,
    background: BackgroundTasks,
    send_feedback: FeedbackDep,
) -> JobOut:
    """Record a failed attempt (its token then opens nothing); a retried job is queued again for the next attempt,
    waiting for the dispatcher like a new job. A job that ended (failed, timed out) gets its ``error`` status and
    PR comment once this has answered; GitHub's answer never changes this one."""
    job = attempts.fail(
        session,
        job_id,
        token.sha256,
        attempt=body.attempt,
        reason=body.reason,
        timed_out=body.timed_out,
        retry=body.retry,
    )
    ended = job.status in FINAL
    if ended:
        service.owe_feedback(job)
    out = service.to_out(session, job)
    session.commit()
    dispatch.after_commit(session, settings, [job.testbed_id])  # the worker is free, and a retry waits
    if ended and job.repo:
        background.add_task(send_feedback, [job.id])
    return out


def _in_document(route: APIRoute) -> APIRoute:
    shown = copy.copy(route)
    shown.include_in_schema = True
    return shown


def internal_openapi(app: Starlette) -> dict[str, Any]:
    """The OpenAPI document of the worker routes (built once per app, then kept), with the error answers that
    ``attnprof.server.openapi`` adds to the public one."""
    document: dict[str, Any] | None = getattr(app.state, "internal_openapi", None)
    if document is None:
        routes = [_in_document(r) for r in router.routes if isinstance(r, APIRoute) and r.path != OPENAPI_PATH]
        document = document_errors(
            get_openapi(
                title="attnprof worker API",
                version="1",
                summary="What a GPU worker calls: its testbed, the claim of a job, then the job's attempt",
                routes=routes,
                license_info=LICENSE,
                servers=SERVERS,
            )
        )
        app.state.internal_openapi = document
    return document


@router.get(routes.OPENAPI)
def openapi(request: Request) -> dict[str, Any]:
    """This document: the worker routes and their two bearer schemes (``WorkerToken``, ``JobToken``)."""
    return internal_openapi(request.app)
