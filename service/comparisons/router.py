from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from service.auth.dependencies import ReadProject
from service.comparisons import repository
from service.db import INT_MAX, SessionDep
from service.errors import NotFound

router = APIRouter(prefix="/api/v1/projects/{project}", tags=["alerts"])


class AlertOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    testbed_id: int
    case_id: str
    metric: str
    run_id: str = Field(description="first run of the new segment")
    before: float = Field(description="mean before the change, microseconds for latency")
    after: float
    change: float | None = Field(description="after / before - 1")
    p: float
    regression: bool
    created_at: datetime


class Alerts(BaseModel):
    alerts: list[AlertOut]
    next: int | None = Field(description="pass as `after` for the next page")


class ComparisonOut(BaseModel):
    id: str
    run_id: str
    verdict: str
    baseline: list[str]
    document: dict[str, object]


@router.get("/alerts", response_model=Alerts)
def list_alerts(
    access: ReadProject,
    session: SessionDep,
    regressions_only: bool = True,
    after: Annotated[int | None, Query(ge=1, le=INT_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Alerts:
    """Change points found on the default branch, newest first."""
    rows = repository.list_alerts(
        session, project_id=access.project_id, regressions_only=regressions_only, after_id=after, limit=limit + 1
    )
    nxt = rows[limit - 1].id if len(rows) > limit else None
    return Alerts(alerts=[AlertOut.model_validate(a) for a in rows[:limit]], next=nxt)


@router.get("/comparisons/{comparison_id}", response_model=ComparisonOut)
def get_comparison(comparison_id: str, access: ReadProject, session: SessionDep) -> ComparisonOut:
    found = repository.get_comparison(session, comparison_id)
    if found is None or found.project_id != access.project_id:
        raise NotFound(f"no comparison {comparison_id}")
    return ComparisonOut(
        id=found.id,
        run_id=found.candidate_run_id,
        verdict=found.verdict,
        baseline=[str(b) for b in found.baseline_run_ids],
        document=found.document,
    )
