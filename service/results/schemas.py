from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.db import INT_MAX

Sha = Field(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z._-]+$")


class ResultUpload(BaseModel):
    """A result document from a self-hosted runner, with where its code came from."""

    model_config = ConfigDict(extra="forbid")

    result: dict[str, Any] = Field(description="an attnprof.result/v1 document")
    branch: str = Field(min_length=1, max_length=255)
    commit: str = Sha
    repo: str | None = Field(None, max_length=200, pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    base_commit: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[0-9A-Za-z._-]+$")
    ancestors: list[str] = Field(default_factory=list, max_length=50, description="newest first")
    pr: int | None = Field(None, ge=1, le=INT_MAX)
    testbed: str | None = Field(None, max_length=100)


class UploadAnswer(BaseModel):
    run_id: str
    comparison_id: str
    verdict: str
    baseline: list[str] | None = Field(description="run ids of the baseline (null when there was none)")
    testbed: str
    url: str = Field(description="where the run can be read")
    comparison: dict[str, Any] = Field(description="the attnprof.comparison/v1 document")
