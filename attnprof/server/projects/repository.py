from __future__ import annotations

from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session

from attnprof.server.projects.models import Project, ProjectRepository


def get_by_name(session: Session, name: str) -> Project | None:
    return session.scalars(select(Project).where(Project.name == name)).one_or_none()


def get(session: Session, project_id: int) -> Project | None:
    return session.get(Project, project_id)


def add(session: Session, *, name: str, default_branch: str) -> Project:
    project = Project(name=name, default_branch=default_branch)
    session.add(project)
    session.flush()
    return project


def repositories(session: Session, project_id: int) -> list[str]:
    """The repositories the project may report to (``owner/name``, lower case), sorted."""
    q = (
        select(ProjectRepository.repo)
        .where(ProjectRepository.project_id == project_id)
        .order_by(ProjectRepository.repo)
    )
    return list(session.scalars(q))


def may_report(session: Session, *, project_id: int, repo: str) -> bool:
    """Whether the project may report to ``repo`` (``owner/name``, lower case)."""
    q = select(ProjectRepository.repo).where(ProjectRepository.project_id == project_id, ProjectRepository.repo == repo)
    return session.scalars(q).first() is not None


def projects_of_repository(session: Session, repo: str) -> set[int]:
    """The ids of the projects that may report to ``repo`` (``owner/name``, lower case)."""
    return set(session.scalars(select(ProjectRepository.project_id).where(ProjectRepository.repo == repo)))


def add_repository(session: Session, *, project_id: int, repo: str, added_by: str) -> bool:
    """Allow ``repo`` (lower case) to the project; False when it was allowed already. Not committed."""
    if may_report(session, project_id=project_id, repo=repo):
        return False
    session.add(ProjectRepository(project_id=project_id, repo=repo, added_by=added_by))
    session.flush()
    return True


def remove_repository(session: Session, *, project_id: int, repo: str) -> bool:
    """Take ``repo`` (lower case) from the project; False when it was not allowed. Not committed."""
    q = delete(ProjectRepository).where(ProjectRepository.project_id == project_id, ProjectRepository.repo == repo)
    return bool(session.execute(q).rowcount)  # type: ignore[attr-defined]


# The repositories a project's jobs and uploaded runs named, lower case, with how many named each. Plain
# SQL over the tables of the jobs and runs domains, which sit above this one.
_NAMED = text(
    "SELECT lower(named.repo) AS repo, COUNT(*) AS times FROM ("
    "SELECT j.repo FROM jobs j WHERE j.project_id = :p AND j.repo IS NOT NULL "
    "UNION ALL SELECT r.repo FROM runs r WHERE r.project_id = :p AND r.repo IS NOT NULL"
    ") named GROUP BY lower(named.repo) ORDER BY lower(named.repo)"
)


def named_repositories(session: Session, project_id: int) -> list[tuple[str, int]]:
    """Each repository the project's jobs and uploads named (lower case), with how many named it."""
    return [(str(row.repo), int(row.times)) for row in session.execute(_NAMED, {"p": project_id})]
