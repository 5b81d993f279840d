"""Projects: their creation, and the GitHub repositories each may report to.

A job or an uploaded run that names a repository gets commit statuses and a pull-request comment there, sent with
the service's own GitHub token. Which repositories a project may name is the service admin's to say (``attnprof
admin allow-repo``), never a project token's: checked when a job is submitted (``check_may_report``, 403 naming
``repo``) and again by every delivery, right before it posts (``attnprof.server.github.service``).
"""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from attnprof.contract.provenance import REPO_CHARS, REPO_PATTERN
from attnprof.server.errors import Conflict, Forbidden, InvalidPayload
from attnprof.server.projects import repository
from attnprof.server.projects.models import Project

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_REPO = re.compile(REPO_PATTERN)


class RepoNotAllowed(Forbidden):
    """The project may not report to the repository its job or upload names (the field ``repo``)."""

    error = "repo_not_allowed"


def create(session: Session, *, name: str, default_branch: str = "main") -> Project:
    if not _NAME.fullmatch(name):
        raise InvalidPayload(f"project name {name!r}: lowercase letters, digits, '.', '_' and '-', at most 100")
    if repository.get_by_name(session, name) is not None:
        raise Conflict(f"project {name!r} exists")
    return repository.add(session, name=name, default_branch=default_branch)


def repo_key(repo: str) -> str:
    """``repo`` as the allow-list keeps it: ``owner/name`` in lower case, since GitHub's names ignore case.
    ``InvalidPayload`` when it is no repository name."""
    if len(repo) > REPO_CHARS or not _REPO.fullmatch(repo):
        raise InvalidPayload(f"repository {repo[:80]!r}: owner/name (letters, digits, '_', '.', '-')")
    return repo.lower()


def allow_repository(session: Session, *, project_id: int, repo: str, added_by: str) -> bool:
    """Let the project report to ``repo``; False when it could already. Not committed."""
    return repository.add_repository(session, project_id=project_id, repo=repo_key(repo), added_by=added_by)


def disallow_repository(session: Session, *, project_id: int, repo: str) -> bool:
    """Stop the project reporting to ``repo``; False when it could not. Not committed."""
    return repository.remove_repository(session, project_id=project_id, repo=repo_key(repo))


def may_report(session: Session, *, project_id: int, repo: str) -> bool:
    """Whether the project may report to ``repo`` (any case); False for a name that is no repository's."""
    try:
        key = repo_key(repo)
    except InvalidPayload:
        return False
    return repository.may_report(session, project_id=project_id, repo=key)


def projects_of_repository(session: Session, repo: str) -> set[int]:
    """The ids of the projects that may report to ``repo`` (any case); none for a name that is no repository's."""
    try:
        key = repo_key(repo)
    except InvalidPayload:
        return set()
    return repository.projects_of_repository(session, key)


def refusal(session: Session, *, project_id: int, repo: str) -> str:
    """Why the project may not report to ``repo``, with the repositories it may report to and how one is added."""
    project = repository.get(session, project_id)
    name = project.name if project is not None else str(project_id)
    allowed = repository.repositories(session, project_id)
    may = f"it may report to {', '.join(allowed)}" if allowed else "it may report to no repository yet"
    return (
        f"repo: project {name!r} may not report to {repo[:REPO_CHARS]!r} ({may}). The service's admin allows it "
        f"with `attnprof admin allow-repo {name} {_shown(repo)}`"
    )


def _shown(repo: str) -> str:
    try:
        return repo_key(repo)
    except InvalidPayload:
        return repo[:REPO_CHARS]


def check_may_report(session: Session, *, project_id: int, repo: str | None) -> None:
    """Refuse (``RepoNotAllowed``, 403 naming ``repo``) a job or an upload whose repository the project may not
    report to; one that names none may always be stored."""
    if repo is not None and not may_report(session, project_id=project_id, repo=repo):
        raise RepoNotAllowed(refusal(session, project_id=project_id, repo=repo) + "; nothing was stored.")
