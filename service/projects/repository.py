from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.projects.models import Project


def get_by_name(session: Session, name: str) -> Project | None:
    return session.scalars(select(Project).where(Project.name == name)).one_or_none()


def get(session: Session, project_id: int) -> Project | None:
    return session.get(Project, project_id)


def add(session: Session, *, name: str, default_branch: str) -> Project:
    project = Project(name=name, default_branch=default_branch)
    session.add(project)
    session.flush()
    return project
