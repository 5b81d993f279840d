"""Postgres for the tests that need it: a database of their own, migrated with Alembic, dropped afterwards; and
the per-test session inside a transaction that is rolled back.

``tests/conftest.py`` registers the fixtures (``pg_url``, ``engine``, ``db``) for every folder; each is named
apart from its function, so that a test's ``db`` argument does not shadow an import."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from attnprof.server import migrate
from attnprof.server.db import make_engine

PG_ADMIN = os.environ.get("ATTNPROF_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def create_database() -> tuple[str, str]:
    """A new empty database: (its name, its SQLAlchemy URL)."""
    name = f"attnprof_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    return name, f"{base}/{name}"


def drop_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def clone_database(template: str) -> tuple[str, str]:
    """A new database copied from ``template`` (Postgres copies its files: no migration is run again)."""
    name = f"attnprof_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    return name, f"{base}/{name}"


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """One database per test process, migrated to head once: the template every test module's database copies."""
    name, url = create_database()
    try:
        migrate.upgrade(url)
        yield name
    finally:
        drop_database(name)


@pytest.fixture(scope="module", name="pg_url")
def pg_url_fixture(pg_template: str) -> Iterator[str]:
    """A database per test module, copied from the migrated template: what one module's servers and workers commit
    outside the per-test rollback never reaches another module."""
    name, url = clone_database(pg_template)
    try:
        yield url
    finally:
        drop_database(name)


@pytest.fixture(scope="module", name="engine")
def engine_fixture(pg_url: str) -> Iterator[Engine]:
    eng = make_engine(pg_url)
    yield eng
    eng.dispose()


@pytest.fixture(name="db")
def db_fixture(engine: Engine) -> Iterator[Session]:
    """A session whose commits release savepoints of a transaction rolled back after the test."""
    connection = engine.connect()
    transaction = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()
        transaction.rollback()
        connection.close()
