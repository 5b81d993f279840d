from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RuleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(min_length=1, max_length=36)
    reason: str | None = Field(None, max_length=2000)


class RuleOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    kind: Literal["pin", "exclude", "accept"]
    run_id: str
    testbed_key: str
    reason: str | None
    created_at: datetime


class Rules(BaseModel):
    rules: list[RuleOut]
