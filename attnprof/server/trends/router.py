from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from sqlalchemy.orm import Session

from attnprof.server import paging
from attnprof.server.auth.dependencies import ReadProject
from attnprof.server.db import SessionDep
from attnprof.server.errors import BadRequest, NotFound
from attnprof.server.openapi import errors
from attnprof.server.projects import repository as projects
from attnprof.server.testbeds import repository as testbeds
from attnprof.server.trends import baselines, repository
from attnprof.server.trends.schemas import Point, Trend

router = APIRouter(prefix="/api/v1/projects/{project}/trends", tags=["trends"])
CaseMetric = Literal["latency", "bandwidth", "throughput", "compute_util", "bandwidth_util"]
KernelMetric = Literal["latency", "bandwidth", "throughput", "compute_util", "bandwidth_util", "occupancy"]
UNITS = {
    "latency": "us",
    "bandwidth": "GB/s",
    "throughput": "TFLOP/s",
    "compute_util": "fraction",
    "bandwidth_util": "fraction",
    "occupancy": "fraction",
}
Text = Annotated[str, Query(min_length=1, max_length=500)]


def _default_branch(session: Session, project_id: int) -> str:
    project = projects.get(session, project_id)
    return project.default_branch if project is not None else "main"


def _query(
    session: SessionDep,
    access: ReadProject,
    case: str,
    branch: str | None,
    testbed: str | None,
    since: datetime | None,
    until: datetime | None,
    cursor: str | None,
    limit: int,
) -> repository.TrendQuery:
    testbed_id = None
    if testbed is not None:
        tb = testbeds.get_by_name(session, testbed)
        if tb is None:
            raise NotFound(f"no testbed {testbed!r}")
        testbed_id = tb.id
    if since is not None and until is not None and since >= until:
        raise BadRequest("since must be before until")
    return repository.TrendQuery(
        project_id=access.project_id,
        testbed_id=testbed_id,
        branch=branch or _default_branch(session, access.project_id),
        case_id=case,
        since=since,
        until=until,
        after=paging.decode(cursor),
        limit=limit + 1,
    )


def _points(rows: Sequence[Any], limit: int, extra: tuple[str, ...]) -> tuple[list[Point], str | None]:
    points = []
    for r in rows[:limit]:
        more: dict[str, Any] = dict(zip(extra, r[6:9], strict=True))
        points.append(
            Point(run_id=r[0], commit=r[1], created_at=r[2], median=r[3], p25=r[4], p75=r[5], testbed_id=r[9], **more)
        )
    nxt = paging.encode(points[-1].created_at, points[-1].run_id) if len(rows) > limit else None
    return points, nxt


@router.get("", response_model=Trend, responses=errors(400))
def case_trend(
    access: ReadProject,
    session: SessionDep,
    case: Text,
    metric: CaseMetric = "latency",
    branch: Annotated[str | None, Query(max_length=255)] = None,
    testbed: Annotated[str | None, Query(max_length=100)] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> Trend:
    """A case's metric over the runs of a branch (the default branch unless given), oldest first, each run with the
    baseline level its comparison used; the case's minimum effect beside them."""
    tq = _query(session, access, case, branch, testbed, since, until, cursor, limit)
    points, nxt = _points(repository.case_points(session, tq, metric), limit, ("status", "backend_used", "bound"))
    levels = baselines.levels_of(session, case, metric, [p.run_id for p in points])
    for p in points:
        p.baseline = levels.get(p.run_id)
    least = baselines.minimum_effect(session, points[-1].run_id, case, metric) if points else None
    return Trend(
        case=case, metric=metric, unit=UNITS[metric], branch=tq.branch, min_effect=least, points=points, next=nxt
    )


@router.get("/kernels", response_model=Trend, responses=errors(400))
def kernel_trend(
    access: ReadProject,
    session: SessionDep,
    case: Text,
    kernel: Text,
    metric: KernelMetric = "latency",
    branch: Annotated[str | None, Query(max_length=255)] = None,
    testbed: Annotated[str | None, Query(max_length=100)] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> Trend:
    """One kernel (by its stable ``key``) of a case over the runs of a branch, oldest first."""
    tq = _query(session, access, case, branch, testbed, since, until, cursor, limit)
    rows = repository.kernel_points(session, tq, kernel, metric)
    points, nxt = _points(rows, limit, ("phase", "launches_per_iter", "bound"))
    return Trend(case=case, kernel=kernel, metric=metric, unit=UNITS[metric], branch=tq.branch, points=points, next=nxt)
