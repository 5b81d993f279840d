from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from service.db import insert_for
from service.testbeds.models import Testbed


def get_by_name(session: Session, name: str) -> Testbed | None:
    return session.scalars(select(Testbed).where(Testbed.name == name)).one_or_none()


_ID_BY_NAME = select(Testbed.id).where(Testbed.name == bindparam("name"))


def id_by_name(session: Session, name: str) -> int | None:
    found: int | None = session.scalar(_ID_BY_NAME, {"name": name})
    return found


def insert_if_new(session: Session, name: str) -> int | None:
    """The id of a testbed inserted as ``name``, or None when that name is taken (by a row committed meanwhile or
    by one another transaction is inserting: this waits for that one to end)."""
    stmt = insert_for(session)(Testbed).values(name=name).on_conflict_do_nothing(index_elements=["name"])
    found: int | None = session.scalar(stmt.returning(Testbed.id))
    return found


def get_by_key(session: Session, key: str) -> Testbed | None:
    return session.scalars(select(Testbed).where(Testbed.key == key).order_by(Testbed.id).limit(1)).one_or_none()


def get(session: Session, testbed_id: int) -> Testbed | None:
    return session.get(Testbed, testbed_id)
