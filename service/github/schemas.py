from __future__ import annotations

from pydantic import BaseModel, Field


class WebhookAnswer(BaseModel):
    action: str = Field(description="rerun, or ignored")
    detail: str
    jobs: list[str] = Field(default_factory=list, description="ids of the jobs queued by a rerun")
