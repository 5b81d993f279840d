from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from attnprof.contract.provenance import BRANCH_CHARS, COMMIT_CHARS, REPO_CHARS
from attnprof.contract.suite_path import SUITE_PATH_CHARS
from attnprof.server.db import Base, utcnow

STATES = ("queued", "running", "analyzing", "done", "failed", "timed_out", "cancelled")
FINAL = ("done", "failed", "timed_out", "cancelled")

# A queued job either waits in the database for the dispatcher (``offered_at`` null) or has been offered to its
# testbed's workers: a profile.run message was made for it (``offered_at`` set). The predicates are SQL text, the
# same in the partial indexes and in the queries that use them, with literal values: Postgres uses a partial index
# only where it can prove the query's condition implies the index's, which a bound parameter would not let it do.
QUEUED_SQL = "status = 'queued'"
WAITING_SQL = "status = 'queued' AND offered_at IS NULL"
OFFERED_SQL = "status = 'queued' AND offered_at IS NOT NULL"
RUNNING_SQL = "status = 'running'"
OPEN_PR_SQL = "pr IS NOT NULL AND status IN ('queued', 'running')"
EVER_OFFERED_SQL = "offered_at IS NOT NULL"


def _partial(name: str, *columns: str, where: str) -> Index:
    return Index(name, *columns, postgresql_where=text(where), sqlite_where=text(where))


PARTIAL_INDEXES = (
    # the dispatcher: a testbed's waiting jobs, per project, oldest first
    _partial("ix_jobs_waiting", "testbed_id", "project_id", "created_at", where=WAITING_SQL),
    # the dispatcher: what a testbed has offered (a handful of rows)
    _partial("ix_jobs_offered", "testbed_id", "project_id", where=OFFERED_SQL),
    # the dispatcher's round-robin: a project's latest offer on a testbed
    _partial("ix_jobs_offers", "testbed_id", "project_id", "offered_at", where=EVER_OFFERED_SQL),
    # a submission: the project's queued jobs, against its limit
    _partial("ix_jobs_queued_project", "project_id", where=QUEUED_SQL),
    # a submission to a pull request: the open jobs of its earlier commits
    _partial("ix_jobs_open_pr", "project_id", "pr", where=OPEN_PR_SQL),
    # a pull request's jobs, newest first (its page)
    _partial("ix_jobs_pr", "project_id", "pr", "created_at", where="pr IS NOT NULL"),
)


class Job(Base):
    """A profiling job (docs/architecture.md, "Jobs, attempts and leases"). The row is the truth; the queue only
    delivers it."""

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("project_id", "idempotency_key"),
        Index("ix_jobs_listing", "project_id", "created_at"),
        Index("ix_jobs_status", "status", "testbed_id"),
        Index("ix_jobs_feedback_due_at", "feedback_due_at"),
        Index("ix_jobs_lease", "status", "lease_expires_at"),
        *PARTIAL_INDEXES,
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    spec: Mapped[str] = mapped_column(Text, comment="the suite TOML as submitted")
    suite_name: Mapped[str] = mapped_column(String(200))
    suite_path: Mapped[str | None] = mapped_column(
        String(SUITE_PATH_CHARS),
        comment="the suite file's path relative to the repository's root, as submitted (null: not sent)",
    )
    bundle_sha256: Mapped[str | None] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    base_bundle_sha256: Mapped[str | None] = mapped_column(
        ForeignKey("artifacts.sha256"),
        index=True,
        comment="a paired job's second tree, the merge base's source (null: not a paired job)",
    )
    repo: Mapped[str | None] = mapped_column(String(REPO_CHARS))
    branch: Mapped[str] = mapped_column(String(BRANCH_CHARS))
    commit: Mapped[str] = mapped_column(String(COMMIT_CHARS))
    base_commit: Mapped[str | None] = mapped_column(String(COMMIT_CHARS))
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
    offered_at: Mapped[datetime | None] = mapped_column(
        comment="when the job's latest profile message was made; while queued, null: it waits for the dispatcher"
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
    paired: Mapped[bool] = mapped_column(
        default=False,
        server_default=text("false"),
        comment='profiled with its merge base, interleaved (docs/architecture.md, "The paired job")',
    )
    gpu_seconds: Mapped[float] = mapped_column(
        Float,
        default=0.0,
        server_default=text("0"),
        comment="the time profile workers held their device for it, every attempt's claim to its end, summed",
    )
    background: Mapped[bool] = mapped_column(
        default=False,
        server_default=text("false"),
        comment="a bisection's probe: offered only while no other job waits on its testbed (docs/bisection.md)",
    )
    matrix_id: Mapped[str | None] = mapped_column(
        String(36),
        index=True,
        comment="the submission it came from when that named several testbeds, one job each (null: a job alone)",
    )


class PairedResult(Base):
    """What a paired job's attempt gave beside its run: the base tree's result document and the paired document of
    the interleaved rounds. Kept here, not among the runs: the base's samples are evidence for this job's paired
    comparison only, never a run of any branch, a baseline or a point of a trend."""

    __tablename__ = "paired_results"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, comment="the attempt whose result this is (the run's)")
    run_id: Mapped[str] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), index=True, comment="the head's run, stored with it"
    )
    base_document: Mapped[dict[str, Any]] = mapped_column(comment="the base's attnprof.result/v1 document")
    paired_document: Mapped[dict[str, Any]] = mapped_column(comment="the attnprof.paired/v1 document")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
