from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from attnprof.server.db import Base, utcnow


class Comparison(Base):
    """The comparison document of a candidate run against its baseline runs (``mode`` history), or, for a paired
    job, of its run against the merge base profiled beside it (``mode`` paired, ``baseline_run_ids`` empty: the
    base is no run). A paired job's run has both; the paired one, stored after, is the newest and gives the
    verdict."""

    __tablename__ = "comparisons"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    candidate_run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    baseline_run_ids: Mapped[list[Any]] = mapped_column(default=list)
    verdict: Mapped[str] = mapped_column(String(8))
    noise_floor: Mapped[float | None] = mapped_column(Float)
    document: Mapped[dict[str, Any]] = mapped_column()
    mode: Mapped[str] = mapped_column(
        String(8),
        default="history",
        server_default="history",
        comment="history: against stored baseline runs; paired: a paired job's head against its base (the verdict's)",
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Alert(Base):
    """A step on the default branch: the metric of a case moved between run ``before_run_id`` (the last run of the
    old level) and run ``run_id`` (the first of the new one), by at least the case's minimum effect.

    One step is one row (``uq_alerts_step``): detection run again as the history grows updates the row of a step it
    found before (its levels, interval and p), never adds another. The ``notify_*`` columns are the webhook's
    outbox (``attnprof.server.comparisons.alert_outbox``)."""

    __tablename__ = "alerts"
    __table_args__ = (
        Index("ix_alerts_project", "project_id", "created_at"),
        Index("ix_alerts_notify_due", "notify_due_at"),
        UniqueConstraint(
            "project_id", "testbed_id", "case_id", "metric", "before_run_id", "run_id", name="uq_alerts_step"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id"))
    case_id: Mapped[str] = mapped_column(String(500))
    metric: Mapped[str] = mapped_column(String(16))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), comment="first run of the new level")
    before_run_id: Mapped[str] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), comment="last run of the old level"
    )
    unit: Mapped[str] = mapped_column(String(16), default="us", comment="unit of before, after and their spreads")
    before: Mapped[float] = mapped_column(Float, comment="mean before the change, in the metric's unit")
    after: Mapped[float] = mapped_column(Float)
    before_sd: Mapped[float | None] = mapped_column(Float, comment="standard deviation of the runs before, in unit")
    after_sd: Mapped[float | None] = mapped_column(Float, comment="standard deviation of the runs from the step on")
    before_runs: Mapped[int | None] = mapped_column(Integer, comment="runs in the level before the step")
    after_runs: Mapped[int | None] = mapped_column(Integer, comment="runs in the level from the step on")
    change: Mapped[float | None] = mapped_column(Float, comment="after / before - 1")
    ci_low: Mapped[float | None] = mapped_column(Float, comment="95% interval of change, low end")
    ci_high: Mapped[float | None] = mapped_column(Float, comment="95% interval of change, high end")
    min_effect: Mapped[float | None] = mapped_column(Float, comment="the case's minimum effect the change passed")
    p: Mapped[float] = mapped_column(Float)
    regression: Mapped[bool]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime | None] = mapped_column(comment="last time detection saw the step again")
    acknowledged_at: Mapped[datetime | None]
    acknowledged_by: Mapped[str | None] = mapped_column(String(300), comment="who: the token or signed-in person")
    acknowledged_note: Mapped[str | None] = mapped_column(Text)
    notify_due_at: Mapped[datetime | None] = mapped_column(comment="the webhook is owed this alert from this time")
    notify_attempts: Mapped[int] = mapped_column(Integer, default=0)
    notified_at: Mapped[datetime | None]
    notify_error: Mapped[str | None] = mapped_column(String(500))
    bisection_id: Mapped[int | None] = mapped_column(
        ForeignKey("bisections.id", ondelete="SET NULL"),
        index=True,
        comment="the bisection that searches its step's commits (docs/bisection.md)",
    )
    culprit: Mapped[str | None] = mapped_column(
        String(64), comment="the commit its bisection confirmed made the step (the webhook is owed it again)"
    )


class AlertWebhook(Base):
    """Where a project's new alerts are sent: a URL, and the secret that signs each body (never shown again)."""

    __tablename__ = "alert_webhooks"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    url: Mapped[str] = mapped_column(String(2000))
    secret: Mapped[str] = mapped_column(String(200), comment="HMAC-SHA256 key of the signature; write-only in the API")
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_by: Mapped[str | None] = mapped_column(String(300))
