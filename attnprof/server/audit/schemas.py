from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from attnprof.server.audit.repository import EventRow


class AuditEventOut(BaseModel):
    id: int
    created_at: datetime
    kind: str = Field(
        description="token.created, token.rotated, token.revoked or token.new_address; retention.changed (a "
        "project's retention or quota, by the token named) or artifacts.swept (by the sweep: no token)"
    )
    token_id: int | None
    token_prefix: str | None
    project: str | None
    testbed: str | None = Field(description="a worker token's testbed")
    address: str | None = Field(description="the client address of the request; null: the command line")
    detail: str

    @classmethod
    def of(cls, row: EventRow) -> AuditEventOut:
        e = row.event
        return cls(
            id=e.id,
            created_at=e.created_at,
            kind=e.kind,
            token_id=e.token_id,
            token_prefix=e.token_prefix,
            project=row.project,
            testbed=row.testbed,
            address=e.address,
            detail=e.detail,
        )


class AuditPage(BaseModel):
    events: list[AuditEventOut]
    next: str | None = Field(description="cursor of the next page, or null")
