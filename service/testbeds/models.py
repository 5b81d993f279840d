from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, utcnow


class Testbed(Base):
    """A pool of identical GPU hosts, global to all projects; created on first use by a job, run or worker token."""

    __tablename__ = "testbeds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    key: Mapped[str | None] = mapped_column(String(64), index=True, comment="testbed key last seen in a run")
    meaning: Mapped[dict[str, Any] | None] = mapped_column(comment="what the key hashes, in words")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
