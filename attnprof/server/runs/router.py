from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from attnprof.server import paging
from attnprof.server.auth.dependencies import ReadProject, SubmitProject
from attnprof.server.db import SessionDep
from attnprof.server.dependencies import SettingsDep
from attnprof.server.errors import Conflict, NotFound
from attnprof.server.runs import documents, repository, service
from attnprof.server.runs.models import Run
from attnprof.server.runs.schemas import RunOut, RunPage
from attnprof.server.testbeds import repository as testbeds

router = APIRouter(prefix="/api/v1/projects/{project}/runs", tags=["runs"])
TraceName = Annotated[str, Path(min_length=1, max_length=500)]
RunRef = Annotated[
    str,
    Path(
        min_length=1,
        max_length=100,
        description="the service's run id or the result document's run id, whole or a unique prefix of at least "
        f"{repository.RUN_ID_PREFIX_MIN} characters",
    ),
]


def _run(session: SessionDep, project_id: int, ref: str) -> Run:
    """The project's run that ``ref`` names (either of its ids, or a unique prefix of one)."""
    try:
        run_id = repository.resolve_run_id(session, project_id, ref)
    except repository.AmbiguousRunId as exc:
        raise Conflict(str(exc)) from None
    return service.get(session, project_id=project_id, run_id=run_id if run_id is not None else ref)


def _out(session: SessionDep, run: Run, *, document: bool = False) -> RunOut:
    return RunOut(
        id=run.id,
        document_run_id=run.document_run_id,
        testbed_id=run.testbed_id,
        testbed_key=run.testbed_key,
        branch=run.branch,
        commit=run.commit,
        repo=run.repo,
        pr=run.pr,
        base_commit=run.base_commit,
        mode=run.mode,
        suspect=run.suspect,
        job_id=run.job_id,
        created_at=run.created_at,
        traces=repository.list_traces(session, run.id),
        document=documents.result_of(session, run).model_dump(mode="json", by_alias=True) if document else None,
    )


@router.get("", response_model=RunPage)
def list_runs(
    access: ReadProject,
    session: SessionDep,
    branch: Annotated[str | None, Query(max_length=255)] = None,
    testbed: Annotated[str | None, Query(max_length=100)] = None,
    commit: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> RunPage:
    """Runs of the project, newest first."""
    testbed_id = None
    if testbed is not None:
        tb = testbeds.get_by_name(session, testbed)
        if tb is None:
            raise NotFound(f"no testbed {testbed!r}")
        testbed_id = tb.id
    rows = repository.list_runs(
        session,
        project_id=access.project_id,
        branch=branch,
        testbed_id=testbed_id,
        commit=commit,
        before=paging.decode(cursor),
        limit=limit + 1,
    )
    nxt = paging.encode(rows[limit - 1].created_at, rows[limit - 1].id) if len(rows) > limit else None
    return RunPage(runs=[_out(session, r) for r in rows[:limit]], next=nxt)


@router.get("/{run_id}", response_model=RunOut)
def get_run(run_id: RunRef, access: ReadProject, session: SessionDep) -> RunOut:
    """A run with its result document; ``run_id`` is either of its ids (the service's or the document's)."""
    return _out(session, _run(session, access.project_id, run_id), document=True)


# The body is read raw (a gzip file, not JSON), so FastAPI cannot describe it: say what it is.
_TRACE_BODY = {"required": True, "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}}


@router.put(
    "/{run_id}/traces/{name}",
    status_code=204,
    response_class=Response,
    openapi_extra={"requestBody": _TRACE_BODY},
)
async def put_trace(
    run_id: RunRef,
    name: TraceName,
    request: Request,
    access: SubmitProject,
    session: SessionDep,
    settings: SettingsDep,
) -> Response:
    """Attach a trace file (gzip Chrome trace) that the run's document names."""
    data = await request.body()
    run = _run(session, access.project_id, run_id)
    service.put_trace(
        session, run=run, name=name, data=data, limit_bytes=settings.limits.trace_bytes, retention=settings.retention
    )
    return Response(status_code=204)


@router.get("/{run_id}/traces/{name}", response_class=Response, responses={200: {"content": {"application/gzip": {}}}})
def get_trace(run_id: RunRef, name: TraceName, access: ReadProject, session: SessionDep) -> Response:
    """Download a trace. Traces reveal model architecture: only the run's project can read them."""
    run = _run(session, access.project_id, run_id)
    data = service.get_trace(session, run=run, name=name)
    return Response(
        data,
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{name.replace(chr(34), "")}"'},
    )
