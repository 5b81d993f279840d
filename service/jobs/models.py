from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, utcnow

STATES = ("queued", "running", "analyzing", "done", "failed", "timed_out", "cancelled")
FINAL = ("done", "failed", "timed_out", "cancelled")


class Job(Base):
    """A profiling job (DESIGN 3.5). The row is the truth; the queue only delivers it."""

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("project_id", "idempotency_key"),
        Index("ix_jobs_listing", "project_id", "created_at"),
        Index("ix_jobs_status", "status", "testbed_id"),
        Index("ix_jobs_feedback_due_at", "feedback_due_at"),
        Index("ix_jobs_lease", "status", "lease_expires_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    spec: Mapped[str] = mapped_column(Text, comment="the suite TOML as submitted")
    suite_name: Mapped[str] = mapped_column(String(200))
    bundle_sha256: Mapped[str | None] = mapped_column(ForeignKey("artifacts.sha256"))
    repo: Mapped[str | None] = mapped_column(String(200))
    branch: Mapped[str] = mapped_column(String(255))
    commit: Mapped[str] = mapped_column(String(64))
    base_commit: Mapped[str | None] = mapped_column(String(64))
    ancestors: Mapped[list[Any]] = mapped_column(default=list)
    pr: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    verdict: Mapped[str | None] = mapped_column(String(8))
    reason: Mapped[str | None] = mapped_column(Text, comment="why it failed, in words a person can act on")
    attempts: Mapped[int] = mapped_column(Integer, default=0, comment="claims so far")
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    claimed_by: Mapped[str | None] = mapped_column(String(200))
    heartbeat_at: Mapped[datetime | None]
    lease_expires_at: Mapped[datetime | None] = mapped_column(
        comment="running or analyzing: the worker holding the job holds it until then (renewed while it works)"
    )
    claim_secret_sha256: Mapped[str | None] = mapped_column(
        String(64), comment="sha256 of the secret in the job's latest profile message (what a claim must show)"
    )
    job_token_sha256: Mapped[str | None] = mapped_column(
        String(64), comment="sha256 of the token of the attempt that claimed the job (null: revoked)"
    )
    job_token_expires_at: Mapped[datetime | None] = mapped_column(
        comment="the job token works until then (null: for as long as its attempt runs)"
    )
    run_id: Mapped[str | None] = mapped_column(String(36), comment="the run its result became")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    feedback_due_at: Mapped[datetime | None] = mapped_column(
        comment="GitHub feedback is owed from this time (null: nothing owed)"
    )
    feedback_attempts: Mapped[int] = mapped_column(
        Integer, default=0, server_default="0", comment="failed deliveries of the feedback now owed"
    )
