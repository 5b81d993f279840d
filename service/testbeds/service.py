"""Testbeds exist from their first use (DESIGN 3.5): by a job, a run or a worker token."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.orm import Session

from service.errors import InvalidPayload
from service.testbeds import repository
from service.testbeds.models import Testbed

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_name(name: str) -> str:
    # The name becomes a queue name (profile.<testbed>): keep it to characters every broker accepts.
    if not _NAME.match(name):
        raise InvalidPayload(f"testbed {name!r}: letters, digits, '.', '_' and '-', at most 100 characters")
    return name


def ensure_id(session: Session, name: str) -> tuple[int, bool]:
    """The id of the testbed ``name``, created if new, and whether it existed (its row is committed). Two requests
    that first use one name at once both get its one row."""
    found = repository.id_by_name(session, check_name(name))
    if found is not None:
        return found, True
    inserted = repository.insert_if_new(session, name)
    if inserted is not None:
        return inserted, False
    found = repository.id_by_name(session, name)  # the other one's, committed meanwhile
    assert found is not None
    return found, True


def ensure(session: Session, name: str) -> Testbed:
    testbed = repository.get(session, ensure_id(session, name)[0])
    assert testbed is not None
    return testbed


def for_run(session: Session, *, name: str | None, key: str, meaning: dict[str, Any]) -> Testbed:
    """The testbed a run belongs to: the one named, else the one first seen with its key (named after the key)."""
    testbed = ensure(session, name) if name else repository.get_by_key(session, key) or ensure(session, key)
    testbed.key = key
    testbed.meaning = meaning
    return testbed
