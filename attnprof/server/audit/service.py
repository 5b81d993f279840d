"""The audit log: events in the life of tokens, written by the code that makes the change, in its transaction
(this module never commits), with the address of the request being served (null on the command line)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from sqlalchemy.orm import Session

from attnprof.server import paging
from attnprof.server.audit import repository
from attnprof.server.audit.address import request_address
from attnprof.server.audit.repository import EventRow
from attnprof.server.errors import BadRequest


class Subject(Protocol):
    """What an event is about: a token (its model, or the row a request authenticated with)."""

    @property
    def id(self) -> int: ...
    @property
    def prefix(self) -> str: ...
    @property
    def project_id(self) -> int | None: ...
    @property
    def testbed_id(self) -> int | None: ...


# Ids are a BIGINT: a larger one in a cursor is not one this API wrote.
_ID_MAX = 2**63 - 1


def record(session: Session, *, kind: str, token: Subject, detail: str) -> None:
    """An event about ``token`` (the model, or the row a request authenticated with)."""
    repository.add(
        session,
        kind=kind,
        token_id=token.id,
        token_prefix=token.prefix,
        project_id=token.project_id,
        testbed_id=token.testbed_id,
        address=request_address(),
        detail=detail,
    )


def _before(cursor: str | None) -> tuple[datetime, int] | None:
    found = paging.decode(cursor)
    if found is None:
        return None
    stamp, row_id = found
    if not row_id.isdigit() or not 0 < int(row_id) <= _ID_MAX:
        raise BadRequest("cursor: not a cursor this API returned")
    return stamp, int(row_id)


def page(
    session: Session, *, project_id: int | None = None, testbed_id: int | None = None, cursor: str | None, limit: int
) -> tuple[list[EventRow], str | None]:
    """One page of a project's events (or a testbed's), newest first, and the cursor of the next (None: last)."""
    rows = repository.page(
        session, project_id=project_id, testbed_id=testbed_id, before=_before(cursor), limit=limit + 1
    )
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1].event
    return rows[:limit], paging.encode(last.created_at, last.id)
