from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, utcnow


class Comparison(Base):
    """The comparison document of a candidate run against its baseline runs."""

    __tablename__ = "comparisons"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    candidate_run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    baseline_run_ids: Mapped[list[Any]] = mapped_column(default=list)
    verdict: Mapped[str] = mapped_column(String(8))
    noise_floor: Mapped[float | None] = mapped_column(Float)
    document: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Alert(Base):
    """A change point on the default branch: the metric of a case moved at ``run_id``."""

    __tablename__ = "alerts"
    __table_args__ = (
        Index("ix_alerts_project", "project_id", "created_at"),
        UniqueConstraint("project_id", "testbed_id", "case_id", "metric", "run_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id"))
    case_id: Mapped[str] = mapped_column(String(500))
    metric: Mapped[str] = mapped_column(String(16))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    before: Mapped[float] = mapped_column(Float, comment="mean before the change, in the metric's unit")
    after: Mapped[float] = mapped_column(Float)
    change: Mapped[float | None] = mapped_column(Float, comment="after / before - 1")
    p: Mapped[float] = mapped_column(Float)
    regression: Mapped[bool]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
