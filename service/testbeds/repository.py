from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.testbeds.models import Testbed


def get_by_name(session: Session, name: str) -> Testbed | None:
    return session.scalars(select(Testbed).where(Testbed.name == name)).one_or_none()


def get_by_key(session: Session, key: str) -> Testbed | None:
    return session.scalars(select(Testbed).where(Testbed.key == key).order_by(Testbed.id).limit(1)).one_or_none()


def add(session: Session, *, name: str, key: str | None = None, meaning: dict[str, Any] | None = None) -> Testbed:
    testbed = Testbed(name=name, key=key, meaning=meaning)
    session.add(testbed)
    session.flush()
    return testbed


def get(session: Session, testbed_id: int) -> Testbed | None:
    return session.get(Testbed, testbed_id)
