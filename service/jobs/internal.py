"""Endpoints for the GPU workers, with worker tokens bound to the job's testbed."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from service import feedback, queue
from service.auth.dependencies import WorkerDep
from service.db import SessionDep
from service.dependencies import SettingsDep
from service.jobs import service
from service.jobs.models import FINAL
from service.jobs.schemas import (
    Claim,
    ClaimAnswer,
    Failure,
    Heartbeat,
    HeartbeatAnswer,
    JobOut,
    WorkerResult,
    WorkerResultAnswer,
    WorkerTestbed,
)

router = APIRouter(prefix="/internal", tags=["internal"])
# The body is read raw (a gzip file, not JSON), so FastAPI cannot describe it: say what it is.
_TRACE_BODY = {"required": True, "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}}


@router.get("/testbed", response_model=WorkerTestbed)
def testbed(worker: WorkerDep, session: SessionDep) -> WorkerTestbed:
    """The testbed this worker token serves and its key (what a worker checks its GPU against before it starts)."""
    tb = service.worker_testbed(session, worker)
    return WorkerTestbed(name=tb.name, key=tb.key, meaning=tb.meaning)


@router.post("/jobs/{job_id}/claim", response_model=ClaimAnswer)
def claim(job_id: str, body: Claim, worker: WorkerDep, session: SessionDep) -> ClaimAnswer:
    """Start an attempt; 409 when the delivery is stale (another attempt, or the job is no longer queued)."""
    job = service.claim(session, worker, job_id, attempt=body.attempt, worker_name=body.worker)
    return ClaimAnswer(
        id=job.id,
        attempt=job.attempts,
        spec=job.spec,
        bundle_sha256=job.bundle_sha256,
        repo=job.repo,
        commit=job.commit,
        testbed=service.testbed_name(session, job),
    )


@router.post("/jobs/{job_id}/heartbeat", response_model=HeartbeatAnswer)
def heartbeat(job_id: str, body: Heartbeat, worker: WorkerDep, session: SessionDep) -> HeartbeatAnswer:
    job = service.heartbeat(session, worker, job_id, attempt=body.attempt)
    return HeartbeatAnswer(status=job.status, cancelled=job.status == "cancelled")


@router.get("/jobs/{job_id}/bundle", response_class=Response, responses={200: {"content": {"application/gzip": {}}}})
def bundle(job_id: str, worker: WorkerDep, session: SessionDep) -> Response:
    return Response(service.bundle(session, worker, job_id), media_type="application/gzip")


@router.post("/jobs/{job_id}/result", response_model=WorkerResultAnswer)
def result(
    job_id: str, body: WorkerResult, worker: WorkerDep, session: SessionDep, settings: SettingsDep
) -> WorkerResultAnswer:
    """Store the attempt's result document as a run (once per job and attempt), then queue its analysis."""
    run, duplicate = service.accept_result(session, worker, job_id, attempt=body.attempt, result=body.result)
    if not duplicate:
        session.commit()
        queue.enqueue_analysis(settings, job_id=job_id)
    return WorkerResultAnswer(run_id=run.id, status="analyzing", duplicate=duplicate)


@router.put(
    "/jobs/{job_id}/traces/{name}",
    status_code=204,
    response_class=Response,
    openapi_extra={"requestBody": _TRACE_BODY},
)
async def trace(
    job_id: str,
    name: Annotated[str, Path(min_length=1, max_length=500)],
    attempt: Annotated[int, Query(ge=1)],
    request: Request,
    worker: WorkerDep,
    session: SessionDep,
    settings: SettingsDep,
) -> Response:
    """Attach a trace that the stored result of ``attempt`` names (gzip Chrome trace); a repeat replaces it."""
    data = await request.body()
    service.accept_trace(
        session, worker, job_id, attempt=attempt, name=name, data=data, limit_bytes=settings.limits.trace_bytes
    )
    return Response(status_code=204)


@router.post("/jobs/{job_id}/failure", response_model=JobOut)
def failure(job_id: str, body: Failure, worker: WorkerDep, session: SessionDep, settings: SettingsDep) -> JobOut:
    """Record a failed attempt; a retried job is queued again for the next attempt. A job that ended (failed, timed
    out) gets its ``error`` status and PR comment after the commit; GitHub's answer never changes this one."""
    job = service.fail(
        session, worker, job_id, attempt=body.attempt, reason=body.reason, timed_out=body.timed_out, retry=body.retry
    )
    out = service.to_out(session, job)
    if job.status == "queued":
        session.commit()
        queue.enqueue_profile(settings, job_id=job.id, attempt=job.attempts + 1, testbed=out.testbed)
    elif job.status in FINAL:
        feedback.job_ended(job)
        session.commit()
        feedback.deliver_after_commit(session, settings, job.id)
    return out
