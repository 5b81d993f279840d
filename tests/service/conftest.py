"""Service tests: one real Postgres database per test process, migrated to head with Alembic once; every test
runs inside a transaction that is rolled back, with the API's requests bound to it (``pgtest``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pgtest import create_database, db_fixture, drop_database, engine_fixture, pg_url_fixture
from sqlalchemy.orm import Session
from svcconf import Tenant

from service.app import create_app
from service.auth import service as auth
from service.config import Analysis, Limits, RateLimit, Settings
from service.projects import service as projects
from service.testbeds import service as testbeds

# pgtest's fixtures (db, engine, pg_url) serve this folder; its tests import create_database from here.
__all__ = [
    "REDIS_URL",
    "create_database",
    "db_fixture",
    "drop_database",
    "engine_fixture",
    "make_settings",
    "pg_url_fixture",
]

REDIS_URL = os.environ.get("ATTNPROF_TEST_REDIS", "redis://127.0.0.1:6379/11")


def make_settings(url: str, **kw: object) -> Settings:
    base: dict[str, object] = {
        "database_url": url,
        "broker_url": REDIS_URL,
        "public_url": "http://attnprof.test",
        "limits": Limits(),
        "rate_limit": RateLimit(requests_per_minute=60_000, burst=10_000),
        "analysis": Analysis(),
    }
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


@pytest.fixture
def settings(pg_url: str) -> Settings:
    return make_settings(pg_url)


def bind(app: FastAPI, session: Session) -> FastAPI:
    """Every request of ``app`` works in ``session``: its commit releases the test's savepoint, and the outer
    transaction still rolls back."""
    app.state.bound_session = session
    return app


@pytest.fixture
def app(settings: Settings, db: Session) -> FastAPI:
    return bind(create_app(settings), db)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


def make_tenant(db: Session, name: str | None = None) -> Tenant:
    project = projects.create(db, name=name or f"p-{uuid.uuid4().hex[:8]}")
    secrets = {r: auth.create_project_token(db, project_id=project.id, role=r)[1] for r in ("admin", "submit", "read")}
    db.commit()
    return Tenant(name=project.name, **secrets)


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
