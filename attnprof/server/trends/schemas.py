from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class Point(BaseModel):
    run_id: str
    commit: str
    created_at: datetime
    median: float | None = Field(description="in the metric's unit")
    p25: float | None = Field(description="latency only; equals median for rates")
    p75: float | None
    testbed_id: int
    status: str | None = None
    backend_used: str | None = None
    phase: str | None = None
    launches_per_iter: float | None = None
    bound: str | None = None
    baseline: float | None = Field(
        None,
        description="case trends: the level (median) of the runs this run's comparison was made against, in the "
        "metric's unit; null for a run compared with nothing",
    )


class Trend(BaseModel):
    case: str
    kernel: str | None = None
    metric: str
    unit: str
    branch: str
    min_effect: float | None = Field(
        None, description="case trends: the case's minimum relative effect for the metric, as comparisons use it"
    )
    points: list[Point]
    next: str | None = Field(description="cursor of the next (newer) page, or null")
