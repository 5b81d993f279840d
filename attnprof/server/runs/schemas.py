from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class RunOut(BaseModel):
    id: str
    document_run_id: str
    testbed_id: int
    testbed_key: str
    branch: str
    commit: str
    repo: str | None
    pr: int | None
    base_commit: str | None
    mode: str
    suspect: bool
    job_id: str | None
    created_at: datetime
    traces: list[str] = Field(default_factory=list, description="trace files stored for this run")
    document: dict[str, Any] | None = Field(None, description="the result document (in single-run answers)")


class RunPage(BaseModel):
    runs: list[RunOut]
    next: str | None
