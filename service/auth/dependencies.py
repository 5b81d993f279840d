"""Dependencies that turn a request's bearer token into a principal, a project, or a worker's testbed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path, Request
from sqlalchemy.orm import Session
from starlette.applications import Starlette

from service.auth import service as auth
from service.auth.models import WORKER
from service.db import SessionDep
from service.errors import Forbidden, RateLimited
from service.ratelimit import RateLimiter

Authorization = Annotated[str | None, Header(description="Bearer <token>")]
# A project's name in a path. Its length (at most 100) is not a 422 before the token is checked: a longer name
# names no project, which is a 404 after it.
ProjectName = Annotated[str, Path(json_schema_extra={"maxLength": 100})]


def rate_limit(app: Starlette, principal: auth.Principal) -> None:
    """Take one request from the token's bucket, or raise ``RateLimited``."""
    limiter: RateLimiter = app.state.rate_limiter
    wait_s = limiter.hit(principal.token_id)
    if wait_s > 0:
        raise RateLimited(wait_s)


def get_principal(request: Request, session: SessionDep, authorization: Authorization = None) -> auth.Principal:
    principal = auth.authenticate(session, authorization)
    rate_limit(request.app, principal)
    return principal


PrincipalDep = Annotated[auth.Principal, Depends(get_principal)]


@dataclass(frozen=True)
class ProjectAccess:
    project_id: int
    principal: auth.Principal


def project_access(
    app: Starlette, session: Session, authorization: str | None, project: str, role: str
) -> ProjectAccess:
    """The token's access to ``project`` with ``role``, from one query: 401, 429, then 404 for a missing or
    another's project, then 403."""
    principal, project_id = auth.authenticate_with_project(session, authorization, project)
    rate_limit(app, principal)
    return ProjectAccess(project_id=auth.require_project(principal, project_id, project, role), principal=principal)


def _project_access(role: str) -> Callable[..., ProjectAccess]:
    def dependency(
        request: Request,
        session: SessionDep,
        project: ProjectName,
        authorization: Authorization = None,
    ) -> ProjectAccess:
        return project_access(request.app, session, authorization, project, role)

    return dependency


ReadProject = Annotated[ProjectAccess, Depends(_project_access("read"))]
SubmitProject = Annotated[ProjectAccess, Depends(_project_access("submit"))]
AdminProject = Annotated[ProjectAccess, Depends(_project_access("admin"))]


def get_worker(principal: PrincipalDep) -> auth.Principal:
    if principal.role != WORKER:
        raise Forbidden("internal endpoints take a worker token")
    return principal


WorkerDep = Annotated[auth.Principal, Depends(get_worker)]
