"""What the service tests build their app and tenants with: the settings, the binding of an app to the test's
session, a tenant with its three tokens. The fixtures that use them are in ``tests/conftest.py``."""

from __future__ import annotations

import os
import uuid
from contextlib import nullcontext

from fastapi import FastAPI
from sqlalchemy.orm import Session

from attnprof.server.auth import service as auth
from attnprof.server.config import AlertWebhooks, Analysis, Limits, RateLimit, Settings
from attnprof.server.github.outbox import Sessions
from attnprof.server.projects import repository as project_repository
from attnprof.server.projects import service as projects
from tests.server.tenants import Tenant

REDIS_URL = os.environ.get("ATTNPROF_TEST_REDIS", "redis://127.0.0.1:6379/11")
LOOPBACK = ["127.0.0.0/8", "::1/128"]


def make_settings(url: str, **kw: object) -> Settings:
    base: dict[str, object] = {
        "database_url": url,
        "broker_url": REDIS_URL,
        "public_url": "http://attnprof.test",
        "limits": Limits(),
        "rate_limit": RateLimit(requests_per_minute=60_000, burst=10_000),
        "analysis": Analysis(),
        # The tests' webhook receivers listen on this machine's loopback, which a deployment refuses unless its
        # operator allows it: these settings allow it, as an operator would. A test of the refusal passes its own.
        "alert_webhooks": AlertWebhooks(allow_networks=LOOPBACK),
    }
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


def bind(app: FastAPI, session: Session) -> FastAPI:
    """Every request of ``app`` works in ``session``: its commit releases the test's savepoint, and the outer
    transaction still rolls back."""
    app.state.bound_session = session
    return app


def make_tenant(db: Session, name: str | None = None) -> Tenant:
    project = projects.create(db, name=name or f"p-{uuid.uuid4().hex[:8]}")
    secrets = {r: auth.create_project_token(db, project_id=project.id, role=r)[1] for r in ("admin", "submit", "read")}
    db.commit()
    return Tenant(name=project.name, **secrets)


def allow_repo(db: Session, project: str, repo: str) -> None:
    """Let ``project`` report to ``repo``, as the service's admin does (``attnprof admin allow-repo``); committed."""
    found = project_repository.get_by_name(db, project)
    assert found is not None, project
    projects.allow_repository(db, project_id=found.id, repo=repo, added_by="the tests")
    db.commit()


def bound_sessions(db: Session) -> Sessions:
    """The test's session as a delivery's sessions (``attnprof.server.github.outbox``): its commits release savepoints
    of the transaction the test rolls back, as a bound app's requests do."""
    return lambda: nullcontext(db)
