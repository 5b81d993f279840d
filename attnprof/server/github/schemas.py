from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class WebhookAnswer(BaseModel):
    action: str = Field(description="rerun, bisect, or ignored")
    detail: str
    jobs: list[str] = Field(default_factory=list, description="ids of the jobs queued by a rerun")
    bisections: list[int] = Field(default_factory=list, description="ids of the bisections a bisect comment started")


class ResendAnswer(BaseModel):
    delivered: bool = Field(description="whether GitHub took the status (and the comment)")
    state: str = Field(description="the commit status sent: pending, success, failure or error")
    description: str = Field(description="the status's one-line description")
    owed_at: datetime | None = Field(description="when the sweep tries again (null: nothing is owed)")
    reason: str | None = Field(description="the job's reason, with GitHub's error when the delivery failed")
