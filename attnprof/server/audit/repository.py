from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from attnprof.server.audit.models import AuditEvent
from attnprof.server.projects.models import Project
from attnprof.server.testbeds.models import Testbed


class EventRow(NamedTuple):
    """An event with the names of its project and testbed."""

    event: AuditEvent
    project: str | None
    testbed: str | None


_INSERT = insert(AuditEvent)


def add(
    session: Session,
    *,
    kind: str,
    token_id: int | None,
    token_prefix: str | None,
    project_id: int | None,
    testbed_id: int | None,
    address: str | None,
    detail: str,
) -> None:
    """One event, inserted at once (a plain INSERT: no object kept in the session)."""
    session.execute(
        _INSERT,
        {
            "kind": kind,
            "token_id": token_id,
            "token_prefix": token_prefix,
            "project_id": project_id,
            "testbed_id": testbed_id,
            "address": address,
            "detail": detail,
        },
    )


def page(
    session: Session,
    *,
    project_id: int | None,
    testbed_id: int | None,
    before: tuple[datetime, int] | None,
    limit: int,
) -> list[EventRow]:
    """Events of one project (or of one testbed's worker tokens), newest first (``ix_audit_events_listing``);
    ``before`` is the keyset cursor (created_at, id) of the page's start."""
    q = (
        select(AuditEvent, Project.name, Testbed.name)
        .outerjoin(Project, Project.id == AuditEvent.project_id)
        .outerjoin(Testbed, Testbed.id == AuditEvent.testbed_id)
    )
    if project_id is not None:
        q = q.where(AuditEvent.project_id == project_id)
    if testbed_id is not None:
        q = q.where(AuditEvent.testbed_id == testbed_id)
    if before is not None:
        q = q.where(
            (AuditEvent.created_at < before[0]) | ((AuditEvent.created_at == before[0]) & (AuditEvent.id < before[1]))
        )
    q = q.order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc()).limit(limit)
    return [EventRow(*row) for row in session.execute(q)]
