"""The dashboard's test site: a real server (uvicorn on a free port) over a Postgres database migrated with
Alembic and filled through the API, and Debian's chromium driven by Playwright.

Test modules import the fixtures they use from here (a ``conftest.py`` in this folder would shadow
``tests/service``'s for ``from conftest import ...``). The site is made once per test process: tests that
change it (baseline actions) work on objects of their own.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

_SERVICE_TESTS = Path(__file__).resolve().parents[1] / "service"
sys.path.insert(0, str(_SERVICE_TESTS))
_spec = importlib.util.spec_from_file_location("service_tests_setup", _SERVICE_TESTS / "conftest.py")
assert _spec is not None and _spec.loader is not None
_setup = importlib.util.module_from_spec(_spec)
sys.modules.setdefault(_spec.name, _setup)
_spec.loader.exec_module(_setup)

import svcdocs as docs  # noqa: E402

from service import migrate  # noqa: E402
from service.app import create_app  # noqa: E402
from service.auth import service as auth  # noqa: E402
from service.db import make_engine, make_sessionmaker  # noqa: E402
from service.projects import service as projects  # noqa: E402

__all__ = ["CHROMIUM", "Site", "docs", "sign_in"]

CHROMIUM = os.environ.get("ATTNPROF_TEST_CHROMIUM", "/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
CPU_SUITE = ROOT / "examples" / "cpu.toml"


@dataclass
class Tokens:
    admin: str
    submit: str
    read: str


@dataclass
class Site:
    """What the test site holds: its URL, two projects with their tokens, and the ids of what was uploaded."""

    url: str
    db_url: str
    project: str
    tokens: Tokens
    other_project: str
    other_tokens: Tokens
    main_runs: list[str] = field(default_factory=list)
    pr_run: str = ""
    pr_comparison: str = ""
    job_id: str = ""
    other_run: str = ""

    def api(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _project(db_url: str, name: str) -> Tokens:
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as session:
            project = projects.create(session, name=name)
            made = {
                r: auth.create_project_token(session, project_id=project.id, role=r)[1]
                for r in ("admin", "submit", "read")
            }
            session.commit()
    finally:
        engine.dispose()
    return Tokens(**made)


def _upload(client: httpx.Client, project: str, doc: dict[str, Any], **kw: Any) -> dict[str, Any]:
    response = client.post(f"/api/v1/projects/{project}/results", json=docs.upload_body(doc, **kw))
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _seed(site: Site) -> None:
    with site.api(site.tokens.submit) as client:
        commits = [f"{i:040x}" for i in range(1, 6)]
        for i, commit in enumerate(commits):
            ancestors = list(reversed(commits[:i]))
            doc = docs.h200(jitter=0.002 * ((i % 3) - 1))
            body = _upload(client, site.project, doc, commit=commit, ancestors=ancestors)
            site.main_runs.append(body["run_id"])
        slow_case = docs.h200()["cases"][0]["id"]
        body = _upload(
            client,
            site.project,
            docs.h200(slower=1.25, cases=[slow_case]),
            branch="feature",
            commit="f" * 40,
            base_commit=commits[-1],
            ancestors=list(reversed(commits)),
            pr=7,
        )
        site.pr_run = body["run_id"]
        site.pr_comparison = body.get("comparison_id") or ""
        response = client.post(
            f"/api/v1/projects/{site.project}/jobs",
            files={"spec": ("cpu.toml", CPU_SUITE.read_bytes(), "application/toml")},
            data={"branch": "feature", "commit": "e" * 40, "pr": "7", "testbed": body["testbed"]},
        )
        assert response.status_code == 202, response.text
        site.job_id = response.json()["id"]
    with site.api(site.other_tokens.submit) as client:
        site.other_run = _upload(client, site.other_project, docs.h200(), commit="9" * 40)["run_id"]


# Test modules import these fixtures, and pytest keeps a definition (and a cache) per module that imports one:
# the site and the browser are made once per process, by the first module that asks, and shared from here.
_SHARED: dict[str, Any] = {}


@pytest.fixture(scope="session")
def site() -> Iterator[Site]:
    if "site" in _SHARED:
        yield _SHARED["site"]
        return
    name, db_url = _setup.create_database()
    server: uvicorn.Server | None = None
    try:
        migrate.upgrade(db_url)
        suffix = name[-8:]
        site = Site(
            url="",
            db_url=db_url,
            project=f"web-{suffix}",
            tokens=_project(db_url, f"web-{suffix}"),
            other_project=f"other-{suffix}",
            other_tokens=_project(db_url, f"other-{suffix}"),
        )
        port = _free_port()
        app = create_app(_setup.make_settings(db_url, public_url=f"http://127.0.0.1:{port}"))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the test server did not start in 30 s"
            time.sleep(0.05)
        site.url = f"http://127.0.0.1:{port}"
        _seed(site)
        _SHARED["site"] = site
        yield site
    finally:
        _SHARED.pop("site", None)
        if server is not None:
            server.should_exit = True
            time.sleep(0.3)
        _setup.drop_database(name)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if "browser" in _SHARED:
        yield _SHARED["browser"]
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        _SHARED["browser"] = launched
        try:
            yield launched
        finally:
            _SHARED.pop("browser", None)
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    yield tab
    context.close()


def sign_in(tab: Any, site: Site, token: str, next_path: str = "") -> None:
    """Sign in through the form, as a person would (keyboard only)."""
    tab.goto(site.url + "/ui/login" + (f"?next={next_path}" if next_path else ""))
    tab.fill("#token", token)
    with tab.expect_navigation():
        tab.keyboard.press("Enter")
