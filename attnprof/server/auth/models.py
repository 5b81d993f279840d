from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from attnprof.server.audit.address import ADDRESS_CHARS  # the last address kept on a token is cut like the log's
from attnprof.server.db import Base, utcnow

ROLES = ("admin", "submit", "read")
WORKER = "worker"


class Token(Base):
    """An API token, stored as the sha256 of its secret. Project tokens have a role; worker tokens a testbed."""

    __tablename__ = "tokens"
    __table_args__ = (
        CheckConstraint(
            "(role = 'worker' AND testbed_id IS NOT NULL AND project_id IS NULL)"
            " OR (role IN ('admin', 'submit', 'read') AND project_id IS NOT NULL AND testbed_id IS NULL)",
            name="scope",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16), comment="first characters of the secret, to tell tokens apart")
    name: Mapped[str | None] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    testbed_id: Mapped[int | None] = mapped_column(ForeignKey("testbeds.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Later than now for a rotated token in its grace period: it works until then.
    revoked_at: Mapped[datetime | None]
    expires_at: Mapped[datetime | None] = mapped_column(comment="stops working from this time; null: never")
    last_address: Mapped[str | None] = mapped_column(
        String(ADDRESS_CHARS), comment="the client address it was last used from (an audit event when it changes)"
    )

    def works_at(self, now: datetime) -> bool:
        """Whether the token opens anything at ``now``: neither revoked nor expired by then."""
        revoked = self.revoked_at is not None and self.revoked_at <= now
        return not revoked and (self.expires_at is None or self.expires_at > now)
