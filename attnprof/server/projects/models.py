from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from attnprof.contract.provenance import REPO_CHARS
from attnprof.server.db import Base, utcnow


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    default_branch: Mapped[str] = mapped_column(String(255), default="main", server_default="main")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    gpu_seconds_per_day: Mapped[float | None] = mapped_column(
        Float,
        comment="device seconds its jobs may hold per UTC day; past it they wait for the next day (null: no quota)",
    )


class ProjectRepository(Base):
    """A GitHub repository the project may report to: its jobs and uploads that name it get commit statuses and the
    pull-request comment there, sent with the service's own GitHub token. Set by the service's admin only (``attnprof
    admin allow-repo``): a project's own tokens cannot add one, since the token that posts is the service's, not
    theirs."""

    __tablename__ = "project_repositories"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    repo: Mapped[str] = mapped_column(
        String(REPO_CHARS),
        primary_key=True,
        index=True,
        comment="owner/name in lower case (GitHub's names ignore case)",
    )
    added_by: Mapped[str] = mapped_column(String(200), comment="who allowed it (the admin command's user)")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
