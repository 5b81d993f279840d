"""Opaque keyset cursors: (created_at, id) of the last row of a page, base64url-encoded."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

from service.errors import BadRequest


def encode(created_at: datetime, row_id: str | int) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{row_id}".encode()).decode().rstrip("=")


def decode(cursor: str | None) -> tuple[datetime, str] | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, _, row_id = raw.partition("|")
        when = datetime.fromisoformat(stamp)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadRequest("cursor: not a cursor this API returned") from exc
    if not row_id or when.tzinfo is None:
        raise BadRequest("cursor: not a cursor this API returned")
    return when, row_id
