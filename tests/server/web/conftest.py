"""The dashboard tests' fixtures: the site (a real server over a migrated Postgres database, filled through the
API) and Debian's chromium driven by Playwright, each made once per test process, and a fresh page per test."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from attnprof.server import migrate
from attnprof.server.app import create_app
from tests.pgtest import create_database, drop_database
from tests.server.stack import make_settings
from tests.server.web.stack import CHROMIUM, Site, _free_port, _project, _seed


@pytest.fixture(scope="session")
def site() -> Iterator[Site]:
    name, db_url = create_database()
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
        app = create_app(make_settings(db_url, public_url=f"http://127.0.0.1:{port}"))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the test server did not start in 30 s"
            time.sleep(0.05)
        site.url = f"http://127.0.0.1:{port}"
        _seed(site)
        yield site
    finally:
        if server is not None:
            server.should_exit = True
            time.sleep(0.3)
        drop_database(name)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    yield tab
    context.close()
