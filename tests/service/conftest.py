"""Service tests: one real Postgres database per test process, migrated to head with Alembic once; every test
runs inside a transaction that is rolled back, with the API's session dependency overridden to it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from svcconf import Tenant

from service import migrate
from service.app import create_app
from service.auth import service as auth
from service.config import Analysis, Limits, RateLimit, Settings
from service.db import make_engine
from service.projects import service as projects
from service.testbeds import service as testbeds

PG_ADMIN = os.environ.get("ATTNPROF_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("ATTNPROF_TEST_REDIS", "redis://127.0.0.1:6379/11")


def _pg_url(name: str) -> str:
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    return f"{base}/{name}"


def create_database() -> tuple[str, str]:
    name = f"attnprof_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, _pg_url(name)


def drop_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    name, url = create_database()
    try:
        migrate.upgrade(url)
        yield url
    finally:
        drop_database(name)


@pytest.fixture(scope="session")
def engine(pg_url: str) -> Iterator[Engine]:
    eng = make_engine(pg_url)
    yield eng
    eng.dispose()


@pytest.fixture
def db(engine: Engine) -> Iterator[Session]:
    connection = engine.connect()
    transaction = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()
        transaction.rollback()
        connection.close()


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
