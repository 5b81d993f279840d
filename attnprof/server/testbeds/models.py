from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
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


# --- a testbed's hosts and their health (docs/service.md, "Host health"; attnprof.server.hosts) ---------------

HOST_STATES = ("learning", "healthy", "quarantined")


class Host(Base):
    """A GPU (or CPU) of a testbed, as its workers name it: the worker's name without its process, so a worker that
    restarts is the same host. Its state is its latest canary's judgement: a quarantined host claims no jobs."""

    __tablename__ = "hosts"
    __table_args__ = (UniqueConstraint("testbed_id", "name"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200), comment="host and GPU, as the workers on it name them")
    state: Mapped[str] = mapped_column(String(16), default="learning", comment="learning, healthy or quarantined")
    reason: Mapped[str | None] = mapped_column(Text, comment="why it is quarantined: the figures outside the band")
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_canary_at: Mapped[datetime | None]
    last_good_at: Mapped[datetime | None] = mapped_column(comment="its last canary inside the band")
    quarantined_at: Mapped[datetime | None] = mapped_column(comment="when its current quarantine began")


class Canary(Base):
    """One canary a host ran, as its worker sent it, with the judgement and the band it was judged against."""

    __tablename__ = "canaries"
    __table_args__ = (Index("ix_canaries_testbed", "testbed_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(200))
    worker: Mapped[str] = mapped_column(String(200), comment="the worker process that ran it")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    device: Mapped[str] = mapped_column(String(200))
    mode: Mapped[str] = mapped_column(String(8))
    figures: Mapped[dict[str, Any]] = mapped_column(comment="figure name to value (attnprof.core.measure.canary)")
    clocks: Mapped[dict[str, Any]] = mapped_column(comment="NVML's readings while it ran")
    method: Mapped[dict[str, Any]] = mapped_column(comment="how each figure was measured")
    seconds: Mapped[float] = mapped_column(Float, comment="its wall time: what it cost the device")
    state: Mapped[str] = mapped_column(String(16), comment="learning, healthy or quarantined")
    reasons: Mapped[list[Any]] = mapped_column(default=list, comment="why it failed")
    band: Mapped[dict[str, Any]] = mapped_column(comment="the band it was judged against: per figure, bound and rule")


class HostNotice(Base):
    """A host's quarantine (or release) owed to one project's alert webhook: each project with a recent job on the
    host's testbed is told (docs/alerts.md, "Host notices")."""

    __tablename__ = "host_notices"
    __table_args__ = (Index("ix_host_notices_due", "notify_due_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16), comment="quarantined or released")
    reason: Mapped[str] = mapped_column(Text)
    runs_marked: Mapped[int] = mapped_column(Integer, default=0, comment="this project's runs marked by it")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    notify_due_at: Mapped[datetime | None] = mapped_column(comment="the webhook is owed it from this time")
    notify_attempts: Mapped[int] = mapped_column(Integer, default=0)
    notified_at: Mapped[datetime | None]
    notify_error: Mapped[str | None] = mapped_column(String(500))
