from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from attnprof.contract.provenance import BRANCH_CHARS, COMMIT_CHARS, REPO_CHARS
from attnprof.server.db import Base, BigId, utcnow

# float8[] on Postgres (readable in SQL with unnest), a JSON list on SQLite.
FloatList = JSON().with_variant(ARRAY(Float()), "postgresql")


class Run(Base):
    """One profiling run: the result document kept whole, plus where it came from."""

    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("project_id", "document_run_id"),
        Index("ix_runs_baseline", "project_id", "testbed_key", "commit", "created_at"),
        Index("ix_runs_history", "project_id", "testbed_id", "branch", "created_at"),
        # The default-branch history of a testbed key: baseline fallback, noise floor, change points.
        Index("ix_runs_key_history", "project_id", "testbed_key", "branch", "created_at"),
        Index("ix_runs_feedback_due_at", "feedback_due_at"),
        # the project's runs, newest first (the runs page; the latest pull requests' uploads)
        Index("ix_runs_listing", "project_id", "created_at"),
        # a pull request's runs, newest first (its page)
        Index(
            "ix_runs_pr",
            "project_id",
            "pr",
            "created_at",
            postgresql_where=text("pr IS NOT NULL"),
            sqlite_where=text("pr IS NOT NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id"))
    testbed_key: Mapped[str] = mapped_column(String(64))
    document_run_id: Mapped[str] = mapped_column(String(100), comment="run.id inside the result document")
    branch: Mapped[str] = mapped_column(String(BRANCH_CHARS))
    commit: Mapped[str] = mapped_column(String(COMMIT_CHARS))
    repo: Mapped[str | None] = mapped_column(String(REPO_CHARS))
    pr: Mapped[int | None] = mapped_column(Integer)
    base_commit: Mapped[str | None] = mapped_column(String(COMMIT_CHARS))
    ancestors: Mapped[list[Any]] = mapped_column(default=list, comment="first-parent ancestors of base_commit")
    mode: Mapped[str] = mapped_column(String(8))
    suspect: Mapped[bool] = mapped_column(Boolean, default=False)
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
    attempt: Mapped[int | None] = mapped_column(Integer, comment="the job attempt that produced it")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    document: Mapped[dict[str, Any]] = mapped_column()
    # The GitHub feedback of an upload (a run no job made) that names its repository: its commit status and
    # pull-request comment, owed from ``feedback_due_at`` (``attnprof.server.github.outbox``), as a job's are.
    feedback_due_at: Mapped[datetime | None] = mapped_column(
        comment="an upload's GitHub feedback is owed from this time (null: nothing owed)"
    )
    feedback_attempts: Mapped[int] = mapped_column(
        Integer, default=0, server_default="0", comment="failed deliveries of the feedback now owed"
    )
    feedback_note: Mapped[str | None] = mapped_column(Text, comment="why the last delivery of its feedback failed")
    host: Mapped[str | None] = mapped_column(
        String(200), comment="the host whose worker measured it (a job's; null: an upload)"
    )
    host_note: Mapped[str | None] = mapped_column(
        Text,
        comment="why its host is in doubt: it failed a canary after this run and before passing another; such a run "
        'serves no baseline (docs/service.md, "Host health")',
    )


class RunCase(Base):
    """One case of a run, normalised for queries. Latency in microseconds; rates per the document's units.

    ``project_id``, ``testbed_id``, ``branch`` and ``created_at`` repeat the run's, so the trend query is one
    index range scan.
    """

    __tablename__ = "run_cases"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id"),
        Index("ix_run_cases_trend", "project_id", "testbed_id", "branch", "case_id", "created_at"),
        # The trend of a case over every testbed (no testbed asked for).
        Index("ix_run_cases_trend_all_testbeds", "project_id", "branch", "case_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    project_id: Mapped[int] = mapped_column(Integer)
    testbed_id: Mapped[int] = mapped_column(Integer)
    branch: Mapped[str] = mapped_column(String(BRANCH_CHARS))
    created_at: Mapped[datetime]
    case_id: Mapped[str] = mapped_column(String(500))
    status: Mapped[str] = mapped_column(String(16))
    backend_used: Mapped[str | None] = mapped_column(String(32))
    latency_median_us: Mapped[float | None] = mapped_column(Float)
    latency_p25_us: Mapped[float | None] = mapped_column(Float)
    latency_p75_us: Mapped[float | None] = mapped_column(Float)
    latency_min_us: Mapped[float | None] = mapped_column(Float)
    latency_max_us: Mapped[float | None] = mapped_column(Float)
    latency_cv: Mapped[float | None] = mapped_column(Float)
    tflops: Mapped[float | None] = mapped_column(Float)
    gbps: Mapped[float | None] = mapped_column(Float)
    compute_util: Mapped[float | None] = mapped_column(Float)
    bandwidth_util: Mapped[float | None] = mapped_column(Float)
    bound: Mapped[str | None] = mapped_column(String(16))
    samples_count: Mapped[int] = mapped_column(Integer, default=0)
    trace: Mapped[str | None] = mapped_column(String(500), comment="trace file name in the document")


class RunKernel(Base):
    """One kernel of a case of a run. Durations per iteration, microseconds."""

    __tablename__ = "run_kernels"
    __table_args__ = (Index("ix_run_kernels_case_key", "run_case_id", "key"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_case_id: Mapped[int] = mapped_column(ForeignKey("run_cases.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(500))
    phase: Mapped[str] = mapped_column(String(32))
    duration_median_us: Mapped[float] = mapped_column(Float)
    duration_p25_us: Mapped[float] = mapped_column(Float)
    duration_p75_us: Mapped[float] = mapped_column(Float)
    launches_per_iter: Mapped[float] = mapped_column(Float)
    tflops: Mapped[float | None] = mapped_column(Float)
    gbps: Mapped[float | None] = mapped_column(Float)
    compute_util: Mapped[float | None] = mapped_column(Float)
    bandwidth_util: Mapped[float | None] = mapped_column(Float)
    theoretical_occupancy: Mapped[float | None] = mapped_column(Float)
    bound: Mapped[str | None] = mapped_column(String(16))


class CaseSamples(Base):
    """The timed iterations of one case of a run, microseconds, in the order they ran.

    One row per case, not per sample: a 100-case upload writes 100 rows instead of some 22,000, each checked
    against ``run_cases`` (migration 0003 says what that cost).
    """

    __tablename__ = "case_samples"

    run_case_id: Mapped[int] = mapped_column(ForeignKey("run_cases.id", ondelete="CASCADE"), primary_key=True)
    values_us: Mapped[list[float]] = mapped_column(FloatList)


class RunTrace(Base):
    """A trace file of a run, stored as an artifact. Readable by the run's project only."""

    __tablename__ = "run_traces"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(500), primary_key=True)
    artifact_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
