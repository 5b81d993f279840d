"""A project's retention of stored artifacts and its quota (``project_retention``), and the quota check every
upload of a trace or bundle makes before it stores anything.

A project without a row follows the service's defaults (``ATTNPROF_RETENTION__*``); a row replaces all three
values (null: keep forever, or no quota). Artifacts are content-addressed and may be shared between projects: a
project's use is the size of the distinct artifacts its runs' traces and its jobs' bundles link to, so bytes it
already stores cost nothing again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, select, text
from sqlalchemy.orm import Mapped, Session, mapped_column

from attnprof.server.config import Retention
from attnprof.server.db import Base, utcnow
from attnprof.server.errors import PayloadTooLarge
from attnprof.server.projects.models import Project


class ProjectRetention(Base):
    """A project's own retention and quota, replacing the service's defaults while the row exists."""

    __tablename__ = "project_retention"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    trace_days: Mapped[int | None] = mapped_column(Integer, comment="traces of older runs are deleted (null: kept)")
    bundle_days: Mapped[int | None] = mapped_column(
        Integer, comment="bundles of finished jobs last changed longer ago are deleted (null: kept)"
    )
    quota_bytes: Mapped[int | None] = mapped_column(BigInteger, comment="stored artifact bytes allowed (null: none)")
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


@dataclass(frozen=True)
class Policy:
    trace_days: int | None
    bundle_days: int | None
    quota_bytes: int | None
    own: bool  # False: the service's defaults


class QuotaExceeded(PayloadTooLarge):
    error = "quota_exceeded"


# The distinct artifacts a project links to: its runs' traces and its jobs' bundles. Plain SQL over the tables of
# the runs and jobs domains, which sit above this one.
_LINKED = (
    "SELECT t.artifact_sha256 AS sha256 FROM run_traces t JOIN runs r ON r.id = t.run_id WHERE r.project_id = :p "
    "UNION SELECT j.bundle_sha256 FROM jobs j WHERE j.project_id = :p AND j.bundle_sha256 IS NOT NULL "
    "UNION SELECT j.base_bundle_sha256 FROM jobs j WHERE j.project_id = :p AND j.base_bundle_sha256 IS NOT NULL"
)
_USED = text(f"SELECT COALESCE(SUM(a.size_bytes), 0) FROM artifacts a WHERE a.sha256 IN ({_LINKED})")
_HAS = text(f"SELECT 1 FROM ({_LINKED}) linked WHERE linked.sha256 = :sha")


def policy(session: Session, project_id: int, defaults: Retention) -> Policy:
    row = session.get(ProjectRetention, project_id)
    if row is None:
        return Policy(defaults.trace_days, defaults.bundle_days, defaults.quota_bytes, own=False)
    return Policy(row.trace_days, row.bundle_days, row.quota_bytes, own=True)


def used_bytes(session: Session, project_id: int) -> int:
    """Bytes of the distinct artifacts the project's traces and bundles link to."""
    return int(session.execute(_USED, {"p": project_id}).scalar_one())


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n} bytes)"
    return f"{n} bytes"


def check_quota(
    session: Session, *, project_id: int, kind: str, data: bytes | list[bytes], defaults: Retention
) -> None:
    """Refuse (413, naming the quota and the use) an upload of ``data`` (one file, or the files of one request,
    counted together: a paired job's two bundles) that would take the project past its quota; bytes it already
    links to (the same trace again, a retried submission) cost nothing, and two files alike count once. With a
    quota the project's row is locked until the upload commits, so two uploads at once cannot both slip under it."""
    quota = policy(session, project_id, defaults).quota_bytes
    if quota is None:
        return
    name = session.scalars(select(Project.name).where(Project.id == project_id).with_for_update()).one()
    files = {hashlib.sha256(d).hexdigest(): len(d) for d in ([data] if isinstance(data, bytes) else data)}
    size = sum(n for sha, n in files.items() if session.execute(_HAS, {"p": project_id, "sha": sha}).first() is None)
    if not size:
        return
    used = used_bytes(session, project_id)
    if used + size > quota:
        raise QuotaExceeded(
            f"project {name!r} stores {human_bytes(used)} of traces and bundles; this {human_bytes(size)} {kind} "
            f"would take it past its quota of {human_bytes(quota)}. Nothing was stored. Shorten its retention, "
            f"delete old artifacts, or raise quota_bytes (PATCH /api/v1/projects/{name}/retention)."
        )
