from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from attnprof.server.db import Base, BigId, utcnow


class Testbed(Base):
    """A pool of identical GPU hosts, global to all projects; created on first use by a job, run or worker token."""

    __tablename__ = "testbeds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    key: Mapped[str | None] = mapped_column(String(64), index=True, comment="testbed key last seen in a run")
    meaning: Mapped[dict[str, Any] | None] = mapped_column(comment="what the key hashes, in words")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    dispatched_at: Mapped[datetime | None] = mapped_column(
        comment="when the dispatcher last ran for it (its update is the lock that serialises the dispatchers)"
    )


class Worker(Base):
    """A profile worker that said it is alive (``POST /internal/alive``, every few seconds, busy or idle): the
    dispatcher offers a testbed as many jobs as it has live workers free."""

    __tablename__ = "workers"
    __table_args__ = (
        UniqueConstraint("testbed_id", "name"),
        Index("ix_workers_seen", "testbed_id", "last_seen_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200), comment="host, process and GPU, as it claims jobs")
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    host: Mapped[str | None] = mapped_column(
        String(200), comment="its host (the name without the process): a quarantined host's workers are not live"
    )
