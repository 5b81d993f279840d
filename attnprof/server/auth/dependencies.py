"""Dependencies that turn a request's bearer token into a principal, a project, a worker's testbed, or a job
token (checked by the jobs service against the job it names)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.applications import Starlette

from attnprof.server.auth import service as auth
from attnprof.server.auth.models import WORKER
from attnprof.server.db import SessionDep
from attnprof.server.errors import Forbidden, RateLimited, Unauthorized
from attnprof.server.openapi import BEARER
from attnprof.server.ratelimit import RateLimiter

# The public routes' bearer scheme, as the OpenAPI document shows it. The header itself is read as it came, so that a
# missing or malformed one gets this API's 401 body (HTTPBearer's own error would be a bare 403).
BEARER_SCHEME = HTTPBearer(
    scheme_name=BEARER,
    description="a project token (`attnprof admin create-token`, or `POST /api/v1/projects/{project}/tokens`): its "
    "role (read, submit, admin) says what it may do in its project",
    auto_error=False,
)


def _authorization(
    request: Request, _scheme: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER_SCHEME)] = None
) -> str | None:
    return request.headers.get("Authorization")


Authorization = Annotated[str | None, Depends(_authorization)]
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


# The worker routes' two bearer schemes, as the internal OpenAPI document (``/internal/openapi.json``) shows them. The
# header is read by the dependencies below, so that a missing or malformed one gets this API's 401 body.
WORKER_SCHEME = HTTPBearer(
    scheme_name="WorkerToken",
    description="a worker token (`attnprof admin create-worker-token`): which testbed a GPU host serves; it opens "
    "the testbed and the claim routes only",
    auto_error=False,
)
JOB_SCHEME = HTTPBearer(
    scheme_name="JobToken",
    description="the job token a claim answered with: it opens that job's attempt only (bundle, heartbeat, result, "
    "failure, traces), until the attempt ends",
    auto_error=False,
)


def get_worker(
    request: Request,
    session: SessionDep,
    _scheme: Annotated[HTTPAuthorizationCredentials | None, Security(WORKER_SCHEME)] = None,
) -> auth.Principal:
    principal = auth.authenticate(session, request.headers.get("Authorization"))
    rate_limit(request.app, principal)
    if principal.role != WORKER:
        raise Forbidden("internal endpoints take a worker token")
    return principal


WorkerDep = Annotated[auth.Principal, Depends(get_worker)]


@dataclass(frozen=True)
class JobToken:
    """A job token as a request presents it: its sha256, which the jobs service checks against the job row that
    the route names (``attnprof.server.jobs.attempts``)."""

    sha256: str


def get_job_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(JOB_SCHEME)] = None,
) -> JobToken:
    if credentials is None or not credentials.credentials.strip():
        raise Unauthorized("missing Authorization: Bearer <job token> (the token a claim answered with)")
    return JobToken(sha256=auth.hash_secret(credentials.credentials.strip()))


JobTokenDep = Annotated[JobToken, Depends(get_job_token)]
