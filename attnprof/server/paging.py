"""Opaque keyset cursors: (created_at, id) of the last row of a page, base64url-encoded."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from attnprof.server.errors import BadRequest


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


def page_of(
    rows: Sequence[Any], limit: int, query: dict[str, str]
) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
    """A dashboard page of ``rows`` (fetched as ``limit + 1``, each with ``created_at`` and ``id``): the first ``limit``
    as dicts, and the query of the next older page (``query`` and the cursor after the last row shown), or None when
    there is no older row."""
    shown = [r._asdict() for r in rows[:limit]]
    if len(rows) <= limit:
        return shown, None
    last = shown[-1]
    return shown, query | {"before": encode(last["created_at"], last["id"])}
