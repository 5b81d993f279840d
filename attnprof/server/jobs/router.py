from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, BackgroundTasks, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile

from attnprof.core.suite import MAX_TESTBEDS, TESTBED_NAME
from attnprof.server import paging
from attnprof.server.auth.dependencies import Authorization, PrincipalDep, ProjectName, ReadProject, project_access
from attnprof.server.config import Limits, Settings
from attnprof.server.db import INT_MAX, SessionDep, request_session, session_slot, utcnow
from attnprof.server.dependencies import FeedbackDep, SettingsDep, feedback_sender_of
from attnprof.server.errors import InvalidPayload, PayloadTooLarge
from attnprof.server.jobs import dispatch, gpu_time, matrix, service
from attnprof.server.jobs.models import STATES, Job
from attnprof.server.jobs.schemas import (
    DayUsageOut,
    JobComparison,
    JobCreated,
    JobFields,
    JobOut,
    JobPage,
    MatrixOut,
    NotPortableOut,
    SideOut,
    UsageOut,
    submission_schema,
)
from attnprof.server.projects import repository as projects

router = APIRouter(prefix="/api/v1", tags=["jobs"])
# Checked after the token, like every other field (documented as the header's maxLength).
IDEMPOTENCY_KEY_CHARS = 200
Status = Literal["queued", "running", "analyzing", "done", "failed", "timed_out", "cancelled"]
assert set(Status.__args__) == set(STATES)  # type: ignore[attr-defined]


def _read(upload: UploadFile, limit: int, what: str) -> bytes:
    data = upload.file.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(f"{what} is over the limit of {limit} bytes")
    return data


def _missing(name: str) -> dict[str, Any]:
    return {"type": "missing", "loc": ("body", name), "msg": "Field required", "input": None}


def _in_body(exc: ValidationError) -> list[dict[str, Any]]:
    return [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]


def _testbeds(raw: str) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """The ``testbeds`` field (a JSON list or CSV of names) read, or the errors that name it: each a testbed's name
    (the rule of ``[suite] testbeds``), distinct, at most ``MAX_TESTBEDS``."""
    loc = ("body", "testbeds")
    text = raw.strip()
    names: Any
    try:
        names = json.loads(text) if text.startswith("[") else [n for n in re.split(r"[\s,]+", text) if n]
    except json.JSONDecodeError:
        names = None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        msg = 'a list of testbed names, as JSON (["h100", "h200"]) or comma-separated (h100,h200)'
        return (), [{"type": "value_error", "loc": loc, "msg": msg, "input": raw}]
    if len(names) > MAX_TESTBEDS:
        msg = f"at most {MAX_TESTBEDS} testbeds, got {len(names)}"
        return (), [{"type": "too_long", "loc": loc, "msg": msg, "input": raw}]
    errors = [
        {
            "type": "value_error",
            "loc": loc,
            "msg": f"testbed {name!r}: letters, digits, '.', '_' and '-', starting with a letter or digit, "
            "at most 100 characters",
            "input": raw,
        }
        for name in names
        if not TESTBED_NAME.fullmatch(name)
    ]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        msg = f"each testbed once: {', '.join(map(repr, repeated))} named more than once"
        errors.append({"type": "value_error", "loc": loc, "msg": msg, "input": raw})
    return tuple(names), errors


def read_submission(form: FormData, limits: Limits, idempotency_key: str | None) -> service.NewJob:
    """The job a submission's form asks for: every field checked (422 naming it, as FastAPI words it), the files
    read within their limits (413). ``testbeds`` names several testbeds (one job each); neither it nor ``testbed``
    leaves the choice to the suite's ``[suite] testbeds`` (``service.create_matrix``)."""
    errors: list[dict[str, Any]] = []
    values: dict[str, str] = {}
    for name in JobFields.model_fields:
        value = form.get(name)
        if isinstance(value, UploadFile):
            errors.append({"type": "string_type", "loc": ("body", name), "msg": "a text field, not a file"})
        elif value:  # an empty field is one left out
            values[name] = str(value)
    fields = None
    try:
        fields = JobFields.model_validate(values)
    except ValidationError as exc:
        errors += _in_body(exc)
    testbeds: tuple[str, ...] = ()
    if "testbeds" in values:
        if "testbed" in values:
            msg = "give testbed (one) or testbeds (several), not both"
            errors.append({"type": "value_error", "loc": ("body", "testbeds"), "msg": msg, "input": values["testbeds"]})
        elif fields is not None:
            testbeds, bad = _testbeds(values["testbeds"])
            errors += bad
    spec, bundle, base_bundle = form.get("spec"), form.get("bundle") or None, form.get("base_bundle") or None
    if spec is None or spec == "":
        errors.insert(0, _missing("spec"))
    for name, file in (("bundle", bundle), ("base_bundle", base_bundle)):
        if file is not None and not isinstance(file, UploadFile):
            errors.append({"type": "file_type", "loc": ("body", name), "msg": "a file (tar.gz), not a text field"})
    if base_bundle is not None:  # a paired job: its two trees, and the commit the base tree is
        for name, present in (("bundle", bundle is not None), ("base_commit", "base_commit" in values)):
            if not present:
                msg = f"Field required: a job with base_bundle (a paired job) needs {name} too"
                errors.append({**_missing(name), "msg": msg})
    if errors or fields is None:
        raise RequestValidationError(errors)
    # The suite may come as a file or as a text field.
    raw = _read(spec, 1024 * 1024, "spec") if isinstance(spec, UploadFile) else str(spec).encode()
    try:
        spec_text = raw.decode()
    except UnicodeDecodeError as exc:
        raise InvalidPayload("spec: not UTF-8 text") from exc
    try:
        provenance = fields.provenance(service.parse_ancestors(fields.ancestors, limits.ancestors))
    except ValidationError as exc:  # an ancestor that is no commit hash
        raise RequestValidationError(_in_body(exc)) from None
    return service.NewJob(
        spec=spec_text,
        testbed=fields.testbed or "",
        testbeds=testbeds,
        provenance=provenance,
        bundle=_read(bundle, limits.bundle_bytes, "bundle") if isinstance(bundle, UploadFile) else None,
        base_bundle=_read(base_bundle, limits.bundle_bytes, "base_bundle")
        if isinstance(base_bundle, UploadFile)
        else None,
        idempotency_key=idempotency_key or None,
        suite_path=fields.suite_path,
    )


def _submit(
    app: Starlette, form: FormData, *, project: str, authorization: str | None, idempotency_key: str | None
) -> tuple[JobCreated, bool, list[str]]:
    """Everything a job submission does that blocks, on one thread of the pool, in this order: the token and the
    project (401, 429, 404, 403), the form (422, 413), the repository the project may report to (403), the row with
    the jobs it supersedes cancelled and within the project's queue limit (429), committed; then the dispatch of its
    testbed (a message sent if a worker is free). Returns the answer, whether the job was created, and the jobs that
    owe GitHub feedback now (its pending status, the superseded jobs' end), to be sent once the answer is."""
    settings: Settings = app.state.settings
    with request_session(app) as session:
        access = project_access(app, session, authorization, project, "submit")
        if idempotency_key is not None and len(idempotency_key) > IDEMPOTENCY_KEY_CHARS:
            raise RequestValidationError(
                [
                    {
                        "type": "string_too_long",
                        "loc": ("header", "Idempotency-Key"),
                        "msg": f"String should have at most {IDEMPOTENCY_KEY_CHARS} characters",
                    }
                ]
            )
        new = read_submission(form, settings.limits, idempotency_key)
        made, created = service.create_matrix(
            session,
            project_id=access.project_id,
            new=new,
            limits=settings.limits,
            max_attempts=settings.max_attempts,
            testbed_ids=app.state.testbed_ids,
            retention=settings.retention,
            github_feedback=settings.github_token is not None,
        )
        answer = service.created(session, made)
        if not created:
            session.rollback()  # a retry leaves nothing: not its bundle, not a testbed it named
            return answer, False, []
        superseded: list[Job] = []
        testbeds: set[int] = set()
        for job in made:  # the first cancels the pull request's older jobs; each is held to the queue limit
            admitted = service.admit(session, job, project=project, cfg=settings.fairness, now=job.created_at)
            superseded += admitted.superseded
            # No room on its testbed: the dispatch that follows the next slot freed there offers it.
            testbeds |= {old.testbed_id for old in admitted.superseded} | ({job.testbed_id} if admitted.room else set())
        session.commit()
        dispatch.after_commit(session, settings, testbeds)
    return answer, True, [j.id for j in (*made, *superseded) if j.repo]


@router.post(
    "/projects/{project}/jobs",
    status_code=202,
    response_model=JobCreated,
    responses={200: {"model": JobCreated, "description": "the Idempotency-Key named an existing job"}},
    openapi_extra={
        "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": submission_schema()}}}
    },
)
async def create_job(
    request: Request,
    response: Response,
    background: BackgroundTasks,
    project: ProjectName,
    authorization: Authorization = None,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", json_schema_extra={"maxLength": IDEMPOTENCY_KEY_CHARS})
    ] = None,
) -> JobCreated:
    """Queue a profiling job. It waits in the database until a worker of its testbed is free and its project's
    turn comes (round-robin across projects); its message is sent after the commit, and a broker that is down
    leaves it queued for the sweeper. 429 when the project has ``ATTNPROF_FAIRNESS__MAX_QUEUED`` jobs queued; a
    job for a pull request cancels that pull request's queued and running jobs of earlier commits. With
    ``base_bundle`` (the merge base's source) the job is paired: both trees are profiled interleaved on one device,
    and its verdict is the paired comparison's (its run still gets the stored-history comparison too). A job that
    names a ``repo`` its project may not report to is refused (403 ``repo_not_allowed``, nothing stored): the
    service's admin allows a project its repositories (``attnprof admin allow-repo``).
    \f
    The hot path of CI traffic, so written out rather than declared: the form is parsed here on the event loop,
    and everything that blocks runs in one hop to the thread pool (``_submit``) instead of one per dependency.
    """
    async with request.form() as form, session_slot(request.app):
        answer, created, owed = await run_in_threadpool(
            _submit, request.app, form, project=project, authorization=authorization, idempotency_key=idempotency_key
        )
    if owed:
        background.add_task(feedback_sender_of(request.app), owed)
    if not created:
        response.status_code = 200
    return answer


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
        session, project_id=access.project_id, status=status, branch=branch, pr=pr, cursor=cursor, limit=limit
    )
    nxt = paging.encode(last.created_at, last.id) if last else None
    return JobPage(jobs=[service.to_out(session, j, settings.fairness) for j in rows], next=nxt)


@router.get("/jobs/{job_id}", response_model=JobOut)
def get_job(job_id: str, principal: PrincipalDep, session: SessionDep, settings: SettingsDep) -> JobOut:
    """The job; while it is queued for a testbed no live worker serves, ``notice`` says so."""
    return service.to_out(session, service.get_for(session, principal, job_id), settings.fairness)


@router.get("/jobs/{job_id}/comparison", response_model=JobComparison)
def get_comparison(
    job_id: str,
    principal: PrincipalDep,
    session: SessionDep,
    mode: Annotated[
        Literal["history", "paired"] | None,
        Query(
            description="history: the run against stored baseline runs; paired: a paired job's head against its "
            "merge base. Left out: the comparison that gave the job its verdict (a paired job's: paired)"
        ),
    ] = None,
) -> JobComparison:
    """The comparison of the job's run that gave its verdict, or the one of ``mode`` (404 when there is none: a
    job not paired has no paired comparison)."""
    found = service.comparison(session, service.get_for(session, principal, job_id), mode)
    return JobComparison(
        id=found.id,
        mode=found.mode,
        run_id=found.candidate_run_id,
        verdict=found.verdict,
        baseline=[str(b) for b in found.baseline_run_ids],
        noise_floor=found.noise_floor,
        created_at=found.created_at,
        document=found.document,
    )


@router.get("/jobs/{job_id}/matrix", response_model=MatrixOut)
def get_matrix(job_id: str, principal: PrincipalDep, session: SessionDep, settings: SettingsDep) -> MatrixOut:
    """Every job of the submission this job came from, one per testbed, the worst verdict once all have one, and
    the findings that are not portable: a change that went one way on one testbed and the other way on another, or
    by sizes whose intervals are apart (404 for a job alone)."""
    found = matrix.of_job(session, service.get_for(session, principal, job_id))
    return MatrixOut(
        matrix_id=found.matrix_id,
        complete=found.complete,
        verdict=found.verdict,
        jobs=[service.to_out(session, m.job, settings.fairness) for m in found.members],
        not_portable=[
            NotPortableOut(
                case=n.case,
                metric=n.metric,
                kind=n.kind,
                testbeds=list(n.testbeds),
                sides=[SideOut(**{**vars(s), "kernels": list(s.kernels), "way": s.way}) for s in n.sides],
            )
            for n in found.not_portable
        ],
    )


# ``GET /jobs/{job_id}/comment`` (the PR comment's markdown) is GitHub's rendering: ``attnprof.server.github.router``.


@router.post("/jobs/{job_id}/cancel", response_model=JobOut)
def cancel_job(
    job_id: str,
    principal: PrincipalDep,
    session: SessionDep,
    settings: SettingsDep,
    background: BackgroundTasks,
    send_feedback: FeedbackDep,
) -> JobOut:
    """Cancel a job that has not ended; its ``error`` status and PR comment are sent once this has answered."""
    job = service.cancel(session, service.get_for(session, principal, job_id, role="submit"))
    session.commit()
    dispatch.after_commit(session, settings, [job.testbed_id])
    if job.repo:
        background.add_task(send_feedback, [job.id])
    return service.to_out(session, job)


@router.get("/projects/{project}/usage", response_model=UsageOut)
def usage(
    access: ReadProject,
    session: SessionDep,
    days: Annotated[int, Query(ge=1, le=366, description="how many UTC days back, today included")] = 30,
) -> UsageOut:
    """The project's GPU time: device seconds its jobs held per UTC day and testbed (paired jobs' and bisections'
    shares apart), with its daily quota and what it used today."""
    now = utcnow()
    rows = gpu_time.usage(
        session, project_id=access.project_id, since=gpu_time.day_start(now) - timedelta(days=days - 1)
    )
    project = projects.get(session, access.project_id)
    return UsageOut(
        days=[DayUsageOut(**vars(r)) for r in rows],
        total_gpu_seconds=round(sum(r.gpu_seconds for r in rows), 3),
        quota_gpu_seconds_per_day=project.gpu_seconds_per_day if project else None,
        used_today_seconds=round(
            gpu_time.used_since(session, project_id=access.project_id, since=gpu_time.day_start(now), now=now), 3
        ),
    )
