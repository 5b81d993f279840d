"""Tokens: made from 256 random bits, shown once, stored as their sha256.

A slow password hash (bcrypt, argon2) protects secrets that people choose and that can be guessed; these
secrets are random and cannot be, so a fast hash loses nothing, and it lets a request find its token with
one indexed lookup instead of paying ~100 ms of bcrypt on every call.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from attnprof.server.audit import service as audit
from attnprof.server.audit.address import request_address
from attnprof.server.auth import repository
from attnprof.server.auth.models import ROLES, WORKER, Token
from attnprof.server.auth.schemas import DURATION_FORM, MAX_DURATION, Whoami
from attnprof.server.db import utcnow
from attnprof.server.errors import Conflict, Forbidden, InvalidPayload, NotFound, Unauthorized
from attnprof.server.projects import repository as projects
from attnprof.server.testbeds import repository as testbeds

PREFIX = "ap_"
NO_GRACE = timedelta(0)
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


def when(moment: datetime) -> str:
    """A time as the API's details write it: ISO 8601 in UTC, to the second (``2027-03-01T12:00:00Z``)."""
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _check_duration(value: timedelta | None, field: str, *, zero: bool = False) -> None:
    # The API and the CLI parse durations already (attnprof.server.auth.schemas.parse_duration); this keeps any other
    # caller from storing a token that expired before it was made.
    if value is not None and (value < timedelta(0) or (value == timedelta(0) and not zero) or value > MAX_DURATION):
        raise InvalidPayload(f"{field}: {DURATION_FORM}")


def _by(actor: str | None) -> str:
    return f"; by {actor}" if actor else ""


def _issue(
    session: Session,
    *,
    role: str,
    project_id: int | None,
    testbed_id: int | None,
    name: str | None,
    expires_at: datetime | None,
) -> tuple[Token, str]:
    secret = PREFIX + secrets.token_urlsafe(32)
    token = Token(
        secret_sha256=hash_secret(secret),
        prefix=secret[:10],
        name=name,
        role=role,
        project_id=project_id,
        testbed_id=testbed_id,
        expires_at=expires_at,
    )
    repository.add(session, token)
    return token, secret


def _created(session: Session, token: Token, actor: str | None, origin: str = "") -> None:
    what = "worker token" if token.role == WORKER else f"{token.role} token"
    label = f" {token.name!r}" if token.name else ""
    ends = f"expires {when(token.expires_at)}" if token.expires_at else "never expires"
    audit.record(session, kind="token.created", token=token, detail=f"{what}{label}{origin}, {ends}{_by(actor)}")


def create_project_token(
    session: Session,
    *,
    project_id: int,
    role: str,
    name: str | None = None,
    expires_in: timedelta | None = None,
    actor: str | None = None,
) -> tuple[Token, str]:
    """A token of ``role`` for one project, working for ``expires_in`` (None: until revoked); returns the row and
    the secret (shown once). ``actor`` says who made it, in the audit event."""
    if role not in ROLES:
        raise InvalidPayload(f"role {role!r}: one of {', '.join(ROLES)}")
    _check_duration(expires_in, "expires_in")
    expires_at = utcnow() + expires_in if expires_in is not None else None
    token, secret = _issue(session, role=role, project_id=project_id, testbed_id=None, name=name, expires_at=expires_at)
    _created(session, token, actor)
    return token, secret


def create_worker_token(
    session: Session,
    *,
    testbed_id: int,
    name: str | None = None,
    expires_in: timedelta | None = None,
    actor: str | None = None,
) -> tuple[Token, str]:
    """A global worker token bound to one testbed, as ``create_project_token``."""
    _check_duration(expires_in, "expires_in")
    expires_at = utcnow() + expires_in if expires_in is not None else None
    token, secret = _issue(
        session, role=WORKER, project_id=None, testbed_id=testbed_id, name=name, expires_at=expires_at
    )
    _created(session, token, actor)
    return token, secret


def _secret_hash(authorization: str | None) -> str:
    if not authorization:
        raise Unauthorized("missing Authorization: Bearer <token>")
    scheme, _, secret = authorization.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    return hash_secret(secret.strip())


def _working(row: repository.TokenRow | None) -> repository.TokenRow:
    if row is None:
        raise Unauthorized("unknown or revoked token")
    if row.revoked_at is not None or row.expires_at is not None:
        now = utcnow()
        if row.revoked_at is not None and row.revoked_at <= now:
            raise Unauthorized("unknown or revoked token")
        if row.expires_at is not None and row.expires_at <= now:
            raise Unauthorized(f"token expired at {when(row.expires_at)}")
    return row


def _principal(session: Session, found: repository.TokenRow | None) -> Principal:
    row = _working(found)
    # The request's address against the one read with the token: nothing more is asked of the database unless
    # it changed.
    address = request_address()
    if address is not None and address != row.last_address and repository.set_last_address(session, row.id, address):
        since = f"last seen from {row.last_address}" if row.last_address else "its first use from an address"
        audit.record(session, kind="token.new_address", token=row, detail=f"used from {address} ({since})")
    return Principal(token_id=row.id, role=row.role, project_id=row.project_id, testbed_id=row.testbed_id)


def authenticate(session: Session, authorization: str | None) -> Principal:
    """The principal behind an ``Authorization: Bearer <token>`` header, or ``Unauthorized`` (unknown, revoked or
    expired). Its use from an address other than its last is recorded (``token.new_address``)."""
    return _principal(session, repository.row_by_hash(session, _secret_hash(authorization)))


def precheck(session: Session, authorization: str | None) -> None:
    """What ``authenticate`` checks of the token itself (the header's form; a token that is known, not revoked, not
    expired), with no write and no audit event: ``Unauthorized`` as ``authenticate`` raises it. For deciding from a
    request's headers whether its body may be read (``attnprof.server.preauth``)."""
    _working(repository.row_by_hash(session, _secret_hash(authorization)))


def authenticate_with_project(
    session: Session, authorization: str | None, project: str
) -> tuple[Principal, int | None]:
    """``authenticate``, and the id of the project named ``project`` (None: there is none), in one query."""
    row, project_id = repository.row_by_hash_with_project(session, _secret_hash(authorization), project)
    return _principal(session, row), project_id


def require_project(principal: Principal, project_id: int | None, project: str, role: str) -> int:
    """``project_id`` if the principal may act on it with ``role``: ``NotFound`` for a project that does not exist
    or is another's (answered alike), then ``Forbidden``. A worker token opens no project route: ``Forbidden``
    before the project is looked at, so its answer is the same whether the project exists or not."""
    if principal.role == WORKER:
        raise Forbidden("a worker token opens no project route (only the /internal routes of its testbed)")
    if project_id is None or principal.project_id != project_id:
        raise NotFound(f"no project {project!r}")
    principal.require(role)
    return project_id


def _own(session: Session, token_id: int, project_id: int | None) -> Token:
    """The token, locked for this transaction; ``NotFound`` unless it is the project's (``project_id`` None: any
    token, for the command line, which holds the database's credentials)."""
    token = repository.get(session, token_id, for_update=True)
    if token is None or (project_id is not None and token.project_id != project_id):
        raise NotFound(f"no token {token_id} in this project" if project_id is not None else f"no token {token_id}")
    return token


def revoke(session: Session, *, project_id: int | None, token_id: int, actor: str | None = None) -> Token:
    """Revoke a token now (one in a rotation's grace period too); revoking a revoked token changes nothing."""
    token = _own(session, token_id, project_id)
    now = utcnow()
    if token.revoked_at is None or token.revoked_at > now:
        token.revoked_at = now
        audit.record(session, kind="token.revoked", token=token, detail=f"revoked{_by(actor)}")
    return token


def rotate(
    session: Session,
    *,
    project_id: int | None,
    token_id: int,
    grace: timedelta = NO_GRACE,
    expires_in: timedelta | None = None,
    actor: str | None = None,
) -> tuple[Token, str, Token]:
    """A new secret with the old token's role, scope and name, and the old token revoked ``grace`` from now (it
    works until then). The new token lives ``expires_in``, or as long as the old one was made to (None: until
    revoked). Returns the new row, its secret (shown once) and the old row. ``Conflict`` for a token that no
    longer works or was rotated already; ``project_id`` as in ``revoke``."""
    _check_duration(grace, "grace", zero=True)
    _check_duration(expires_in, "expires_in")
    old = _own(session, token_id, project_id)
    now = utcnow()
    if old.revoked_at is not None:
        if old.revoked_at > now:
            raise Conflict(f"token {token_id} was rotated already: it stops working at {when(old.revoked_at)}")
        raise Conflict(f"token {token_id} is revoked: create a new one")
    if old.expires_at is not None and old.expires_at <= now:
        raise Conflict(f"token {token_id} expired at {when(old.expires_at)}: create a new one")
    if expires_in is None and old.expires_at is not None:
        expires_in = old.expires_at - old.created_at
    new, secret = _issue(
        session,
        role=old.role,
        project_id=old.project_id,
        testbed_id=old.testbed_id,
        name=old.name,
        expires_at=now + expires_in if expires_in is not None else None,
    )
    old.revoked_at = now + grace
    stops = f"works until {when(old.revoked_at)}" if grace else "stopped at once"
    audit.record(
        session,
        kind="token.rotated",
        token=old,
        detail=f"replaced by token {new.id} ({new.prefix}); {stops}{_by(actor)}",
    )
    _created(session, new, actor, origin=f", rotated from token {old.id} ({old.prefix})")
    return new, secret, old


def list_tokens(session: Session, *, project_id: int | None = None, testbed_id: int | None = None) -> list[Token]:
    """A project's tokens, or a testbed's worker tokens, oldest first."""
    return repository.list_tokens(session, project_id=project_id, testbed_id=testbed_id)


def describe(session: Session, principal: Principal) -> Whoami:
    project = projects.get(session, principal.project_id) if principal.project_id is not None else None
    testbed = testbeds.get(session, principal.testbed_id) if principal.testbed_id is not None else None
    return Whoami(
        role=principal.role, project=project.name if project else None, testbed=testbed.name if testbed else None
    )
