"""Whether a request may send its body, decided from its headers before any of it is read
(``attnprof.server.limits.BodyGateMiddleware`` asks ``check``).

Each part of the service checks here the credentials its routes take, as far as they can be checked without the
body, with the code the routes' own checks use, and never more strictly than they do: a request refused here would
have been refused by its route, only after its body was read.

- ``/internal/jobs/{job_id}/...`` other than the claim (heartbeat, result, failure, traces): the job token of that
  job's current attempt (the job row keeps its sha256; ``attnprof.server.jobs.attempts`` also checks its lease);
- the rest of ``/internal`` (the claim, liveness, the testbed): a worker token, known, not revoked, not expired;
- ``/api/v1/github/webhook``: GitHub signs the body, so the signature is checked against it by the route; a service
  with no webhook secret, or a signature header that is no HMAC-SHA256 at all, is refused whatever the body says,
  and the route answers as it does to those (404, 401) without the body;
- the rest of ``/api``: a project token, known, not revoked, not expired (``attnprof.server.auth.service.precheck``);
its
  project and role are the route's to check;
- ``/ui``: a session cookie whose signature and expiry hold, or, on the sign-in form, its CSRF cookie. Without
  them the page's answer does not depend on the form (a redirect to sign in, an expired form), and it is given
  without the body;
- anything else: no route there takes a body, so the app answers without it.
"""

from __future__ import annotations

import hmac
import logging
import re

from sqlalchemy.orm import Session
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import Scope

from attnprof.contract import routes
from attnprof.server.auth import service as auth
from attnprof.server.config import Settings
from attnprof.server.db import request_session, session_slot
from attnprof.server.errors import RETRY_AFTER_S, ServiceError, Unauthorized, Unavailable, database_unavailable
from attnprof.server.jobs import repository as jobs
from attnprof.server.limits import ADMIT, WITHOUT_BODY, Verdict
from attnprof.server.web.session import COOKIE, LOGIN_CSRF_COOKIE, SessionSigner

log = logging.getLogger(__name__)
# A job's routes (``attnprof.contract.routes``): every one under ``JOBS`` but the claim takes the job token.
_JOB_ROUTE = re.compile(re.escape(routes.JOBS) + r"/(?P<job_id>[^/]+)/(?P<rest>.+)")
_CLAIM = routes.CLAIM.removeprefix(routes.JOB + "/")
_GITHUB_WEBHOOK = "/api/v1/github/webhook"
_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}")
_LOGIN = "/ui/login"
JOB_ID_CHARS = 36


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def _blocking(app: Starlette, scope: Scope) -> ServiceError | None:
    """The checks that read the database, on a thread of the pool, holding one of the app's session slots as a
    route does (``attnprof.server.db.session_slot``)."""
    path: str = scope["path"]
    authorization = _header(scope, b"authorization")
    job = _JOB_ROUTE.fullmatch(path)
    job_id = job["job_id"] if job is not None and job["rest"] != _CLAIM else None

    def check() -> ServiceError | None:
        with request_session(app) as session:
            try:
                if job_id is None:
                    auth.precheck(session, authorization)
                    return None
                return _job_token(session, job_id, authorization)
            except Unauthorized as exc:
                return exc

    try:
        async with session_slot(app):
            return await run_in_threadpool(check)
    except Exception as exc:
        # As a route's dependency meets it (``attnprof.server.errors``): a 503 to retry, logged in a line, not a
        # traceback.
        cause = database_unavailable(exc)
        if cause is None:
            raise
        log.warning("%s %s: the database is unavailable: %s", scope.get("method"), path, type(cause).__name__)
        return Unavailable(f"the database is unavailable ({type(cause).__name__}); retry in {RETRY_AFTER_S} s")


def _job_token(session: Session, job_id: str, authorization: str | None) -> ServiceError | None:
    # The dependency's and the attempt's own words (``attnprof.server.auth.dependencies.get_job_token``,
    # ``attnprof.server.jobs.attempts``): a refusal here reads as the route's would.
    scheme, _, secret = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return Unauthorized("missing Authorization: Bearer <job token> (the token a claim answered with)")
    row = jobs.get(session, job_id) if len(job_id) <= JOB_ID_CHARS else None
    held = row.job_token_sha256 if row is not None else None
    if held is None or not hmac.compare_digest(held.encode(), auth.hash_secret(secret.strip()).encode()):
        return Unauthorized(f"this token opens nothing of job {job_id}: a job token opens its own job's attempt only")
    return None


def _github_webhook(settings: Settings, scope: Scope) -> Verdict:
    signature = _header(scope, b"x-hub-signature-256")
    if settings.github_webhook_secret is None or signature is None or not _SIGNATURE.fullmatch(signature):
        return WITHOUT_BODY
    return ADMIT


def _dashboard(app: Starlette, scope: Scope) -> Verdict:
    cookies = Request(scope).cookies
    if scope["path"] == _LOGIN:
        return ADMIT if cookies.get(LOGIN_CSRF_COOKIE) else WITHOUT_BODY
    signer: SessionSigner = app.state.session_signer
    return ADMIT if signer.read(cookies.get(COOKIE)) is not None else WITHOUT_BODY


async def check(scope: Scope) -> Verdict:
    """May this request's body be read (``ADMIT``), does the app answer it without the body (``WITHOUT_BODY``), or
    is it refused with an error (401)?"""
    app: Starlette = scope["app"]
    path: str = scope["path"]
    if path == _GITHUB_WEBHOOK:
        settings: Settings = app.state.settings
        return _github_webhook(settings, scope)
    if path.startswith(("/api/", routes.PREFIX + "/")):
        refused = await _blocking(app, scope)
        return refused if refused is not None else ADMIT
    if path == "/ui" or path.startswith("/ui/"):
        return _dashboard(app, scope)
    return WITHOUT_BODY
