"""Dependencies that turn a request's bearer token into a principal, a project, or a worker's testbed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path, Request

from service.auth import service as auth
from service.auth.models import WORKER
from service.db import SessionDep
from service.errors import Forbidden, NotFound, RateLimited
from service.projects import repository as projects
from service.projects.models import Project
from service.ratelimit import RateLimiter


def get_principal(
    request: Request,
    session: SessionDep,
    authorization: Annotated[str | None, Header(description="Bearer <token>")] = None,
) -> auth.Principal:
    principal = auth.authenticate(session, authorization)
    limiter: RateLimiter = request.app.state.rate_limiter
    wait_s = limiter.hit(principal.token_id)
    if wait_s > 0:
        raise RateLimited(wait_s)
    return principal


PrincipalDep = Annotated[auth.Principal, Depends(get_principal)]


@dataclass(frozen=True)
class ProjectAccess:
    project: Project
    principal: auth.Principal


def _project_access(role: str) -> Callable[..., ProjectAccess]:
    def dependency(
        session: SessionDep, principal: PrincipalDep, project: Annotated[str, Path(max_length=100)]
    ) -> ProjectAccess:
        found = projects.get_by_name(session, project)
        # Another project's name answers exactly like a name that does not exist.
        if found is None or (principal.role != WORKER and principal.project_id != found.id):
            raise NotFound(f"no project {project!r}")
        principal.require(role)
        return ProjectAccess(project=found, principal=principal)

    return dependency


ReadProject = Annotated[ProjectAccess, Depends(_project_access("read"))]
SubmitProject = Annotated[ProjectAccess, Depends(_project_access("submit"))]
AdminProject = Annotated[ProjectAccess, Depends(_project_access("admin"))]


def get_worker(principal: PrincipalDep) -> auth.Principal:
    if principal.role != WORKER:
        raise Forbidden("internal endpoints take a worker token")
    return principal


WorkerDep = Annotated[auth.Principal, Depends(get_worker)]
