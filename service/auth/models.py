from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, utcnow

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
    revoked_at: Mapped[datetime | None]
