from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from attnprof.server.auth.models import Token
from attnprof.server.projects.models import Project


class TokenRow(NamedTuple):
    """What authenticating a request needs of a token: plain columns, no ORM object (every request pays it)."""

    id: int
    role: str
    project_id: int | None
    testbed_id: int | None
    revoked_at: datetime | None
    expires_at: datetime | None
    last_address: str | None
    prefix: str


_TOKEN_COLUMNS = (
    Token.id,
    Token.role,
    Token.project_id,
    Token.testbed_id,
    Token.revoked_at,
    Token.expires_at,
    Token.last_address,
    Token.prefix,
)
assert len(_TOKEN_COLUMNS) == len(TokenRow._fields) == 8
# Every request runs one of these: built once, their values passed as parameters.
_TOKEN = select(*_TOKEN_COLUMNS).where(Token.secret_sha256 == bindparam("secret"))
_TOKEN_AND_PROJECT = (
    select(*_TOKEN_COLUMNS, Project.id)
    .outerjoin(Project, Project.name == bindparam("project"))
    .where(Token.secret_sha256 == bindparam("secret"))
)
# Only when the address differs from the one the row was read with. The condition is checked again on the row: of
# two requests from one new address at once, the second waits for the first's commit and then changes nothing.
_SET_ADDRESS = (
    update(Token)
    .where(Token.id == bindparam("token_id"), Token.last_address.is_distinct_from(bindparam("address")))
    .values(last_address=bindparam("address"))
    .execution_options(synchronize_session=False)
)


def get_by_hash(session: Session, secret_sha256: str) -> Token | None:
    return session.scalars(select(Token).where(Token.secret_sha256 == secret_sha256)).one_or_none()


def row_by_hash(session: Session, secret_sha256: str) -> TokenRow | None:
    row = session.execute(_TOKEN, {"secret": secret_sha256}).one_or_none()
    return TokenRow(*row) if row is not None else None


def row_by_hash_with_project(session: Session, secret_sha256: str, project: str) -> tuple[TokenRow | None, int | None]:
    """The token and the id of the project named ``project`` (None when there is none), in one statement."""
    row = session.execute(_TOKEN_AND_PROJECT, {"secret": secret_sha256, "project": project}).one_or_none()
    if row is None:
        return None, None
    return TokenRow(*row[:8]), row[8]


def set_last_address(session: Session, token_id: int, address: str) -> bool:
    """Record ``address`` as the token's last; False when it already was (another request recorded it)."""
    result = session.execute(_SET_ADDRESS, {"token_id": token_id, "address": address})
    return bool(result.rowcount)  # type: ignore[attr-defined]


def get(session: Session, token_id: int, *, for_update: bool = False) -> Token | None:
    return session.get(Token, token_id, with_for_update=for_update or None)


def list_tokens(session: Session, *, project_id: int | None = None, testbed_id: int | None = None) -> list[Token]:
    """A project's tokens, or a testbed's worker tokens, oldest first."""
    q = select(Token).order_by(Token.id)
    if project_id is not None:
        q = q.where(Token.project_id == project_id)
    if testbed_id is not None:
        q = q.where(Token.testbed_id == testbed_id)
    return list(session.scalars(q))


def add(session: Session, token: Token) -> Token:
    session.add(token)
    session.flush()
    return token
