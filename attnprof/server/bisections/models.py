from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from attnprof.contract.provenance import COMMIT_CHARS, REPO_CHARS
from attnprof.contract.suite_path import SUITE_PATH_CHARS
from attnprof.server.db import Base, utcnow

STATUS_WORDS: dict[str, str] = {
    "pending": "its range is being read",
    "running": "probing",
    "single": "the step lies on one commit",
    "confirmed": "one commit made the step, confirmed against its parent",
    "spread": "several commits share the step",
    "not_reproduced": "the code alone does not reproduce the step",
    "environment": "the testbed's software changed across the step; the code alone does not reproduce it",
    "skipped": "the culprit is one of commits that could not be measured",
    "failed": "the range or a tree could not be had",
    "cancelled": "by a person, or its alerts were acknowledged",
}
STATES = tuple(STATUS_WORDS)
OPEN = ("pending", "running")


class Bisection(Base):
    """One bisection: the range ``good``..``bad`` of ``repo`` on a testbed, the suite's stepped ``cases``, and the step
    to explain (``effect`` and its interval; null until the first probe measures it, for a requested one). The
    probes are rows of ``bisection_probes``; the state is rebuilt from them, so a bisection resumes after any
    restart. The alerts it explains point at it (``alerts.bisection_id``)."""

    __tablename__ = "bisections"
    __table_args__ = (
        Index("ix_bisections_project", "project_id", "created_at"),
        Index("ix_bisections_status", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id"))
    before_run_id: Mapped[str | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), comment="the step's last good run (null: requested)"
    )
    run_id: Mapped[str | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), comment="the step's first bad run (null: requested)"
    )
    repo: Mapped[str] = mapped_column(String(REPO_CHARS))
    good: Mapped[str] = mapped_column(String(COMMIT_CHARS), comment="the last commit known good")
    bad: Mapped[str] = mapped_column(String(COMMIT_CHARS), comment="the first commit known bad")
    spec: Mapped[str] = mapped_column(Text, comment="the suite TOML each probe runs")
    suite_name: Mapped[str] = mapped_column(String(200))
    suite_path: Mapped[str | None] = mapped_column(String(SUITE_PATH_CHARS))
    cases: Mapped[list[Any]] = mapped_column(comment="the case ids that stepped")
    effect: Mapped[float | None] = mapped_column(Float, comment="the step: bad / good - 1 of the latency")
    low: Mapped[float | None] = mapped_column(Float, comment="the step's interval, low end")
    high: Mapped[float | None] = mapped_column(Float, comment="the step's interval, high end")
    commits: Mapped[list[Any]] = mapped_column(
        default=list, comment="the range searched now, oldest first: [0] good, [-1] bad (empty: not read yet)"
    )
    merges: Mapped[list[Any]] = mapped_column(
        default=list, comment="merge commits found to hold the step, each searched through its second parent"
    )
    trees: Mapped[dict[str, Any]] = mapped_column(
        default=dict, comment="commit to the sha256 of its source bundle, fetched once"
    )
    status: Mapped[str] = mapped_column(String(16), default="pending")
    culprit: Mapped[str | None] = mapped_column(String(COMMIT_CHARS))
    culprit_pr: Mapped[int | None] = mapped_column(Integer, comment="the pull request the culprit came from")
    summary: Mapped[str | None] = mapped_column(Text, comment="what it found, in words")
    environment: Mapped[dict[str, Any] | None] = mapped_column(
        comment="the software that differs between the step's two runs: {name: [before, after]}"
    )
    requested_by: Mapped[str] = mapped_column(String(300))
    requested_via: Mapped[str] = mapped_column(String(16), comment="alert, api, dashboard or comment")
    pr: Mapped[int | None] = mapped_column(Integer, comment="the pull request a /attnprof bisect comment came from")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None]
    comment_due_at: Mapped[datetime | None] = mapped_column(
        comment="a pull-request comment naming the culprit is owed from this time"
    )
    comment_attempts: Mapped[int] = mapped_column(Integer, default=0)
    comment_note: Mapped[str | None] = mapped_column(String(500), comment="why the last comment delivery failed")


class BisectionProbe(Base):
    """One paired job of a bisection: ``candidate`` against ``good``. A pair is probed once (``uq_probe_pair``)."""

    __tablename__ = "bisection_probes"
    __table_args__ = (UniqueConstraint("bisection_id", "good", "candidate", name="uq_probe_pair"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    bisection_id: Mapped[int] = mapped_column(ForeignKey("bisections.id", ondelete="CASCADE"), index=True)
    good: Mapped[str] = mapped_column(String(COMMIT_CHARS))
    candidate: Mapped[str] = mapped_column(String(COMMIT_CHARS))
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
    outcome: Mapped[str | None] = mapped_column(String(8), comment="bad, good or skip (null: its job runs)")
    effect: Mapped[float | None] = mapped_column(Float)
    low: Mapped[float | None] = mapped_column(Float)
    high: Mapped[float | None] = mapped_column(Float)
    detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
