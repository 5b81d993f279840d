from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["admin", "submit", "read"]
    name: str | None = Field(None, max_length=200)


class TokenOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    role: str
    name: str | None
    prefix: str
    created_at: datetime
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="the secret: shown once, stored only as its hash")


class Tokens(BaseModel):
    tokens: list[TokenOut]


class Whoami(BaseModel):
    role: str
    project: str | None = None
    testbed: str | None = None
