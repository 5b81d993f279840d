from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from attnprof.server.audit import service
from attnprof.server.audit.schemas import AuditEventOut, AuditPage
from attnprof.server.auth.dependencies import AdminProject
from attnprof.server.db import SessionDep

router = APIRouter(prefix="/api/v1/projects/{project}/audit", tags=["tokens"])


@router.get("", response_model=AuditPage)
def list_events(
    access: AdminProject,
    session: SessionDep,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> AuditPage:
    """The project's audit log, newest first: its tokens made, rotated, revoked, and used from a new address.
    ``next`` is the cursor of the following page."""
    rows, nxt = service.page(session, project_id=access.project_id, cursor=cursor, limit=limit)
    return AuditPage(events=[AuditEventOut.of(r) for r in rows], next=nxt)
