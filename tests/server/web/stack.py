"""The dashboard's test site: a real server (uvicorn on a free port) over a Postgres database migrated with
Alembic and filled through the API, and Debian's chromium driven by Playwright.

The fixtures that make them (``site``, ``browser``, ``page``) are in this folder's ``conftest.py``. The site is
made once per test process: tests that change it (baseline actions) work on objects of their own.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from attnprof.server.auth import service as auth
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.projects import service as projects
from tests.server import documents as docs

__all__ = ["CHROMIUM", "Site", "docs", "sign_in"]

CHROMIUM = os.environ.get("ATTNPROF_TEST_CHROMIUM", "/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[3]
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


def sign_in(tab: Any, site: Site, token: str, next_path: str = "") -> None:
    """Sign in through the form, as a person would (keyboard only)."""
    tab.goto(site.url + "/ui/login" + (f"?next={next_path}" if next_path else ""))
    tab.fill("#token", token)
    with tab.expect_navigation():
        tab.keyboard.press("Enter")
