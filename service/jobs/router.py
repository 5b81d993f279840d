from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, File, Form, Header, Query, Response, UploadFile
from fastapi.responses import PlainTextResponse

from service import feedback, paging, queue
from service.auth.dependencies import PrincipalDep, ReadProject, SubmitProject
from service.db import INT_MAX, SessionDep
from service.dependencies import SettingsDep
from service.errors import InvalidPayload, PayloadTooLarge
from service.github import service as github
from service.jobs import service
from service.jobs.models import STATES
from service.jobs.schemas import ComparisonOut, JobCreated, JobOut, JobPage

router = APIRouter(prefix="/api/v1", tags=["jobs"])
Status = Literal["queued", "running", "analyzing", "done", "failed", "timed_out", "cancelled"]
assert set(Status.__args__) == set(STATES)  # type: ignore[attr-defined]


def _read(upload: UploadFile, limit: int, what: str) -> bytes:
    data = upload.file.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(f"{what} is over the limit of {limit} bytes")
    return data


@router.post(
    "/projects/{project}/jobs",
    status_code=202,
    response_model=JobCreated,
    responses={200: {"model": JobCreated, "description": "the Idempotency-Key named an existing job"}},
)
def create_job(
    access: SubmitProject,
    session: SessionDep,
    settings: SettingsDep,
    response: Response,
    spec: Annotated[UploadFile, File(description="the suite file (TOML)")],
    testbed: Annotated[str, Form(min_length=1, max_length=100)],
    branch: Annotated[str, Form(min_length=1, max_length=255)],
    commit: Annotated[str, Form(min_length=1, max_length=64)],
    bundle: Annotated[UploadFile | None, File(description="the source, tar.gz")] = None,
    repo: Annotated[str | None, Form(max_length=200)] = None,
    base_commit: Annotated[str | None, Form(max_length=64)] = None,
    ancestors: Annotated[str | None, Form(description="first-parent ancestors, newest first: JSON list or CSV")] = None,
    pr: Annotated[int | None, Form(ge=1, le=INT_MAX)] = None,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
) -> JobCreated:
    """Queue a profiling job. The row is committed before the message is sent; a broker that is down leaves
    the job queued for the sweeper."""
    try:
        spec_text = _read(spec, 1024 * 1024, "spec").decode()
    except UnicodeDecodeError as exc:
        raise InvalidPayload("spec: not UTF-8 text") from exc
    new = service.NewJob(
        spec=spec_text,
        testbed=testbed,
        branch=branch,
        commit=commit,
        repo=repo or None,
        base_commit=base_commit or None,
        ancestors=service.parse_ancestors(ancestors, settings.limits.ancestors),
        pr=pr,
        bundle=_read(bundle, settings.limits.bundle_bytes, "bundle") if bundle is not None else None,
        idempotency_key=idempotency_key or None,
    )
    job, created = service.create(
        session, project_id=access.project.id, new=new, limits=settings.limits, max_attempts=settings.max_attempts
    )
    if not created:
        response.status_code = 200
        return JobCreated(id=job.id, status=job.status)
    session.commit()
    queue.enqueue_profile(settings, job_id=job.id, attempt=job.attempts + 1, testbed=testbed)
    github.send_pending(session, settings, job.id)
    return JobCreated(id=job.id, status=job.status)


@router.get("/projects/{project}/jobs", response_model=JobPage)
def list_jobs(
    access: ReadProject,
    session: SessionDep,
    settings: SettingsDep,
    status: Status | None = None,
    branch: Annotated[str | None, Query(max_length=255)] = None,
    pr: Annotated[int | None, Query(ge=1, le=INT_MAX)] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> JobPage:
    """Jobs of the project, newest first, filtered; ``next`` is the cursor of the following page."""
    rows, last = service.list_page(
        session, project_id=access.project.id, status=status, branch=branch, pr=pr, cursor=cursor, limit=limit
    )
    nxt = paging.encode(last.created_at, last.id) if last else None
    return JobPage(jobs=[service.to_out(session, j) for j in rows], next=nxt)


@router.get("/jobs/{job_id}", response_model=JobOut)
def get_job(job_id: str, principal: PrincipalDep, session: SessionDep) -> JobOut:
    return service.to_out(session, service.get_for(session, principal, job_id))


@router.get("/jobs/{job_id}/comparison", response_model=ComparisonOut)
def get_comparison(job_id: str, principal: PrincipalDep, session: SessionDep) -> ComparisonOut:
    found = service.comparison(session, service.get_for(session, principal, job_id))
    return ComparisonOut(
        id=found.id,
        run_id=found.candidate_run_id,
        verdict=found.verdict,
        baseline=[str(b) for b in found.baseline_run_ids],
        noise_floor=found.noise_floor,
        created_at=found.created_at,
        document=found.document,
    )


@router.get(
    "/jobs/{job_id}/comment",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/markdown": {}}, "description": "the PR comment, GitHub markdown"}},
)
def get_comment(job_id: str, principal: PrincipalDep, session: SessionDep, settings: SettingsDep) -> PlainTextResponse:
    """The markdown of the pull-request comment for this job, as GitHub would show it."""
    job = service.get_for(session, principal, job_id)
    return PlainTextResponse(github.comment_markdown(session, job, settings), media_type="text/markdown")


@router.post("/jobs/{job_id}/cancel", response_model=JobOut)
def cancel_job(job_id: str, principal: PrincipalDep, session: SessionDep, settings: SettingsDep) -> JobOut:
    """Cancel a job that has not ended; its ``error`` status and PR comment are sent after the commit."""
    job = service.cancel(session, service.get_for(session, principal, job_id, role="submit"))
    feedback.job_ended(job)
    session.commit()
    feedback.deliver_after_commit(session, settings, job.id)
    return service.to_out(session, job)
