from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.auth.models import Token


def get_by_hash(session: Session, secret_sha256: str) -> Token | None:
    return session.scalars(select(Token).where(Token.secret_sha256 == secret_sha256)).one_or_none()


def get(session: Session, token_id: int) -> Token | None:
    return session.get(Token, token_id)


def list_for_project(session: Session, project_id: int) -> list[Token]:
    return list(session.scalars(select(Token).where(Token.project_id == project_id).order_by(Token.id)))


def add(session: Session, token: Token) -> Token:
    session.add(token)
    session.flush()
    return token
