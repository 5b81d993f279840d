from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from attnprof.server.audit.address import ADDRESS_CHARS
from attnprof.server.db import Base, BigId, utcnow

# What an event records: a token made (by creation or by rotation), a token rotated (the old one; its grace ends at
# its revoked_at), a token revoked, a token used from an address other than the last one it was seen from.
KINDS = ("token.created", "token.rotated", "token.revoked", "token.new_address")


class AuditEvent(Base):
    """One event in the life of a token, written in the transaction of the change it records."""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_events_listing", "project_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))
    # The token's id and prefix are copied: the prefix still tells which token it was should the row go.
    token_id: Mapped[int | None] = mapped_column(ForeignKey("tokens.id", ondelete="SET NULL"), index=True)
    token_prefix: Mapped[str | None] = mapped_column(String(16))
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    testbed_id: Mapped[int | None] = mapped_column(ForeignKey("testbeds.id", ondelete="SET NULL"), index=True)
    address: Mapped[str | None] = mapped_column(
        String(ADDRESS_CHARS), comment="the client address of the request; null: the command line"
    )
    detail: Mapped[str] = mapped_column(Text, default="")
