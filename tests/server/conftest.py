"""The service tests' own fixture: ``database_url``, an empty database of each backend the service runs on (a
Postgres database of its own, a SQLite file), for the migration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pgtest import create_database, drop_database


@pytest.fixture(params=["postgres", "sqlite"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
        return
    name, url = create_database()
    try:
        yield url
    finally:
        drop_database(name)
