"""Fixtures of the GitHub tests: the tests' Postgres (``pgtest``: one database migrated with Alembic, per-test
rollback), the service tests' tenants and settings, and a fake GitHub server. Test modules import the fixtures
they use from here (a ``conftest.py`` in this folder would shadow ``tests/service``'s for ``from conftest import
...``)."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import pytest
from fakegithub import FakeGitHub
from sqlalchemy.orm import Session

_SERVICE_TESTS = Path(__file__).resolve().parents[1] / "service"
sys.path.insert(0, str(_SERVICE_TESTS))
_spec = importlib.util.spec_from_file_location("service_tests_setup", _SERVICE_TESTS / "conftest.py")
assert _spec is not None and _spec.loader is not None
_setup = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _setup
_spec.loader.exec_module(_setup)

import svcdocs as docs  # noqa: E402
from pgtest import db_fixture, engine_fixture, pg_url_fixture  # noqa: E402
from svcconf import Tenant  # noqa: E402

from service.auth import service as auth  # noqa: E402
from service.github.outbox import Sessions  # noqa: E402
from service.testbeds import service as testbeds  # noqa: E402

__all__ = [
    "REDIS_URL",
    "Tenant",
    "bind",
    "bound_sessions",
    "db_fixture",
    "docs",
    "engine_fixture",
    "make_settings",
    "pg_url_fixture",
]

REDIS_URL: str = _setup.REDIS_URL
make_settings = _setup.make_settings
bind = _setup.bind


def bound_sessions(db: Session) -> Sessions:
    """The test's session as a delivery's sessions (``service.github.outbox``): its commits release savepoints of
    the transaction the test rolls back, as a bound app's requests do."""
    return lambda: nullcontext(db)


@pytest.fixture(name="tenant")
def tenant_fixture(db: Session) -> Tenant:
    tenant: Tenant = _setup.make_tenant(db)
    return tenant


@pytest.fixture(name="worker_token")
def worker_token_fixture(db: Session) -> tuple[str, str]:
    name = f"tb-{uuid.uuid4().hex[:8]}"
    secret = auth.create_worker_token(db, testbed_id=testbeds.ensure(db, name).id)[1]
    db.commit()
    return name, secret


@pytest.fixture(name="github")
def github_fixture() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        yield fake
