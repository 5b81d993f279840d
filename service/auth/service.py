"""Tokens: made from 256 random bits, shown once, stored as their sha256.

A slow password hash (bcrypt, argon2) protects secrets that people choose and that can be guessed; these
secrets are random and cannot be, so a fast hash loses nothing, and it lets a request find its token with
one indexed lookup instead of paying ~100 ms of bcrypt on every call.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy.orm import Session

from service.auth import repository
from service.auth.models import ROLES, WORKER, Token
from service.auth.schemas import Whoami
from service.db import utcnow
from service.errors import Forbidden, InvalidPayload, NotFound, Unauthorized
from service.projects import repository as projects
from service.testbeds import repository as testbeds

PREFIX = "ap_"
_RANK = {"read": 0, "submit": 1, "admin": 2}


@dataclass(frozen=True)
class Principal:
    token_id: int
    role: str
    project_id: int | None
    testbed_id: int | None

    def require(self, role: str) -> None:
        """Raise ``Forbidden`` unless this project token's role is at least ``role``."""
        if self.role == WORKER or _RANK[self.role] < _RANK[role]:
            raise Forbidden(f"this token's role ({self.role}) does not allow this; it needs {role}")


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _issue(session: Session, *, role: str, project_id: int | None, testbed_id: int | None, name: str | None) -> str:
    secret = PREFIX + secrets.token_urlsafe(32)
    token = Token(
        secret_sha256=hash_secret(secret),
        prefix=secret[:10],
        name=name,
        role=role,
        project_id=project_id,
        testbed_id=testbed_id,
    )
    repository.add(session, token)
    return secret


def create_project_token(session: Session, *, project_id: int, role: str, name: str | None = None) -> tuple[Token, str]:
    """A token of ``role`` for one project; returns the row and the secret (shown once)."""
    if role not in ROLES:
        raise InvalidPayload(f"role {role!r}: one of {', '.join(ROLES)}")
    secret = _issue(session, role=role, project_id=project_id, testbed_id=None, name=name)
    token = repository.get_by_hash(session, hash_secret(secret))
    assert token is not None
    return token, secret


def create_worker_token(session: Session, *, testbed_id: int, name: str | None = None) -> tuple[Token, str]:
    secret = _issue(session, role=WORKER, project_id=None, testbed_id=testbed_id, name=name)
    token = repository.get_by_hash(session, hash_secret(secret))
    assert token is not None
    return token, secret


def _secret_hash(authorization: str | None) -> str:
    if not authorization:
        raise Unauthorized("missing Authorization: Bearer <token>")
    scheme, _, secret = authorization.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    return hash_secret(secret.strip())


def _principal(row: repository.TokenRow | None) -> Principal:
    if row is None or row.revoked_at is not None:
        raise Unauthorized("unknown or revoked token")
    return Principal(token_id=row.id, role=row.role, project_id=row.project_id, testbed_id=row.testbed_id)


def authenticate(session: Session, authorization: str | None) -> Principal:
    """The principal behind an ``Authorization: Bearer <token>`` header, or ``Unauthorized``."""
    return _principal(repository.row_by_hash(session, _secret_hash(authorization)))


def authenticate_with_project(
    session: Session, authorization: str | None, project: str
) -> tuple[Principal, int | None]:
    """``authenticate``, and the id of the project named ``project`` (None: there is none), in one query."""
    row, project_id = repository.row_by_hash_with_project(session, _secret_hash(authorization), project)
    return _principal(row), project_id


def require_project(principal: Principal, project_id: int | None, project: str, role: str) -> int:
    """``project_id`` if the principal may act on it with ``role``: ``NotFound`` for a project that does not exist
    or is another's (answered alike), then ``Forbidden``. Worker tokens reach every project (their internal
    endpoints check the job's testbed)."""
    if project_id is None or (principal.role != WORKER and principal.project_id != project_id):
        raise NotFound(f"no project {project!r}")
    principal.require(role)
    return project_id


def revoke(session: Session, *, project_id: int, token_id: int) -> Token:
    token = repository.get(session, token_id)
    if token is None or token.project_id != project_id:
        raise NotFound(f"no token {token_id} in this project")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
    return token


def list_tokens(session: Session, *, project_id: int) -> list[Token]:
    return repository.list_for_project(session, project_id)


def describe(session: Session, principal: Principal) -> Whoami:
    project = projects.get(session, principal.project_id) if principal.project_id is not None else None
    testbed = testbeds.get(session, principal.testbed_id) if principal.testbed_id is not None else None
    return Whoami(
        role=principal.role, project=project.name if project else None, testbed=testbed.name if testbed else None
    )
