from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from service.auth.models import Token
from service.projects.models import Project


class TokenRow(NamedTuple):
    """What authenticating a request needs of a token: plain columns, no ORM object (every request pays it)."""

    id: int
    role: str
    project_id: int | None
    testbed_id: int | None
    revoked_at: datetime | None


_TOKEN_COLUMNS = (Token.id, Token.role, Token.project_id, Token.testbed_id, Token.revoked_at)
# Every request runs one of these: built once, their values passed as parameters.
_TOKEN = select(*_TOKEN_COLUMNS).where(Token.secret_sha256 == bindparam("secret"))
_TOKEN_AND_PROJECT = (
    select(*_TOKEN_COLUMNS, Project.id)
    .outerjoin(Project, Project.name == bindparam("project"))
    .where(Token.secret_sha256 == bindparam("secret"))
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
    return TokenRow(*row[:5]), row[5]


def get(session: Session, token_id: int) -> Token | None:
    return session.get(Token, token_id)


def list_for_project(session: Session, project_id: int) -> list[Token]:
    return list(session.scalars(select(Token).where(Token.project_id == project_id).order_by(Token.id)))


def add(session: Session, token: Token) -> Token:
    session.add(token)
    session.flush()
    return token
