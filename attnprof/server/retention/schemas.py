from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DAYS_MAX = 36500


class RetentionIn(BaseModel):
    """The fields to change; a field left out keeps its value, null keeps forever (or sets no quota)."""

    model_config = ConfigDict(extra="forbid")

    trace_days: int | None = Field(
        None, ge=1, le=DAYS_MAX, description="days a run's traces are kept (null: forever); whole days, 1 to 36500"
    )
    bundle_days: int | None = Field(
        None,
        ge=1,
        le=DAYS_MAX,
        description="days a finished job's source bundle is kept after its last change (null: forever)",
    )
    quota_bytes: int | None = Field(
        None, ge=1, le=2**63 - 1, description="stored trace and bundle bytes allowed (null: no quota)"
    )


class RetentionValues(BaseModel):
    trace_days: int | None
    bundle_days: int | None
    quota_bytes: int | None


class RetentionOut(RetentionValues):
    source: Literal["project", "defaults"] = Field(
        description="project: the project's own settings; defaults: the service's (ATTNPROF_RETENTION__*)"
    )
    used_bytes: int = Field(description="bytes of the distinct traces and bundles the project stores now")
    defaults: RetentionValues
