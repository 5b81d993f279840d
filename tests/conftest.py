"""Fixtures every folder's tests may use. The CPU profiling ones (their helpers: ``tests.profiling_support``), and
the service's: one real Postgres database per test process, migrated to head with Alembic once, every test inside
a transaction that is rolled back (``tests.pgtest``), the API's requests bound to it, tenants and worker tokens
(``tests.server.stack``). Each folder's ``conftest.py`` adds its own (the dashboard's site and browser, the
worker tests' stack of processes, the GitHub stand-in)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from attnprof.server.app import create_app
from attnprof.server.auth import service as auth
from attnprof.server.config import Settings
from attnprof.server.testbeds import service as testbeds
from tests.pgtest import db_fixture, engine_fixture, pg_template, pg_url_fixture
from tests.profiling_support import suite_text
from tests.server.stack import bind, make_settings, make_tenant
from tests.server.tenants import Tenant

__all__ = ["db_fixture", "engine_fixture", "pg_template", "pg_url_fixture"]  # pgtest's: db, engine, pg_url


@pytest.fixture(scope="session")
def peaks_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One peaks cache for the session: the host calibration (a 256 MiB copy, matmuls) runs once."""
    return tmp_path_factory.mktemp("peaks-cache")


@pytest.fixture
def write_suite(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``suite_text(name, cases)`` to ``tmp_path/<name>.toml`` and return its path."""

    def write(name: str, cases: str) -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(suite_text(name, cases))
        return path

    return write


@pytest.fixture
def settings(pg_url: str) -> Settings:
    return make_settings(pg_url)


@pytest.fixture
def app(settings: Settings, db: Session) -> FastAPI:
    return bind(create_app(settings), db)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture
def tenant(db: Session) -> Tenant:
    return make_tenant(db)


@pytest.fixture
def other(db: Session) -> Tenant:
    return make_tenant(db)


@pytest.fixture
def worker_token(db: Session) -> tuple[str, str]:
    """(testbed name, worker token) for a fresh testbed."""
    name = f"tb-{uuid.uuid4().hex[:8]}"
    tb = testbeds.ensure(db, name)
    secret = auth.create_worker_token(db, testbed_id=tb.id)[1]
    db.commit()
    return name, secret
