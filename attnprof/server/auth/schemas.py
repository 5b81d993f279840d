from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

DURATION_FORM = "a whole number and a unit, s, m, h, d or w (90d, 12h, 30m), of at most 3650d"
MAX_DURATION = timedelta(days=3650)
_DURATION = re.compile(r"([0-9]{1,12})([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, *, zero: bool = False) -> timedelta:
    """``90d``, ``12h``, ``30m``, ``45s``, ``2w`` as a ``timedelta``; ``ValueError`` saying the allowed form for
    anything else, a negative or zero duration (``zero``: 0 is allowed) or one over ``MAX_DURATION``."""
    found = _DURATION.fullmatch(text)
    if found is None:
        if text.startswith("-"):
            raise ValueError(f"{text!r} is negative: a duration is {DURATION_FORM}")
        raise ValueError(f"{text!r} is not a duration: {DURATION_FORM}")
    seconds = int(found.group(1)) * _UNIT_S[found.group(2)]
    if seconds == 0 and not zero:
        raise ValueError(f"{text!r} is no time at all: a duration is {DURATION_FORM}")
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"{text!r} is too long: a duration is {DURATION_FORM}")
    return timedelta(seconds=seconds)


def _positive(text: str) -> str:
    parse_duration(text)
    return text


def _zero_or_more(text: str) -> str:
    parse_duration(text, zero=True)
    return text


_PATTERN = r"^[0-9]{1,12}[smhdw]$"
# A duration as the CLI takes it (``--expires-in 90d``), checked here so that a bad one is a 422 naming the field.
Lifetime = Annotated[
    str,
    Field(
        json_schema_extra={"pattern": _PATTERN, "examples": ["90d"]}, description=f"how long it works: {DURATION_FORM}"
    ),
    AfterValidator(_positive),
]
Grace = Annotated[
    str,
    Field(
        json_schema_extra={"pattern": _PATTERN, "examples": ["1h"]},
        description=f"how long the old token keeps working: {DURATION_FORM}; 0s: it stops at once",
    ),
    AfterValidator(_zero_or_more),
]


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["admin", "submit", "read"]
    name: str | None = Field(None, max_length=200)
    expires_in: Lifetime | None = Field(None, description=f"the token stops working after this: {DURATION_FORM}")


class RotateIn(BaseModel):
    """A rotation: a new secret of the same role and name; the old one is revoked, at once or after ``grace``."""

    model_config = ConfigDict(extra="forbid")

    grace: Grace | None = None
    expires_in: Lifetime | None = Field(
        None, description="the new token's lifetime; left out: the old one's (none if it had none)"
    )


class TokenOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    role: str
    name: str | None
    prefix: str
    created_at: datetime
    revoked_at: datetime | None = Field(
        description="when it stopped working; later than now for a rotated token still in its grace period"
    )
    expires_at: datetime | None = Field(description="when it stops working by itself; null: never")
    last_address: str | None = Field(description="the client address it was last used from")


class TokenCreated(TokenOut):
    token: str = Field(description="the secret: shown once, stored only as its hash")


class TokenRotated(TokenCreated):
    replaced: TokenOut = Field(description="the token rotated: revoked, at once or at the end of the grace period")


class Tokens(BaseModel):
    tokens: list[TokenOut]


class Whoami(BaseModel):
    role: str
    project: str | None = None
    testbed: str | None = None
