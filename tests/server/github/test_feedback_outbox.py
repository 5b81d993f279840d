"""A GitHub that takes 20 s to answer holds nothing else up: the feedback is sent after the commit, from the stored
rows, with no transaction open and no lock on the job row, and once GitHub answers it arrives exactly once.

A real server (uvicorn on a free port, with its own sessions: every commit is a real one) over a Postgres database
of this module's own, migrated with Alembic; the analysis task's body (``attnprof.worker.analysis.verdict.run``) on a
thread of its own, as the Celery worker runs it; the sweep's body (``attnprof.worker.analysis.sweeper.run``); and the
stand-in GitHub (``fakegithub``: commit statuses and issue comments as GitHub's REST API answers them), told to hold
every request while the test looks around.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis
import uvicorn
from sqlalchemy import Engine, text

from attnprof.server import migrate
from attnprof.server.app import create_app
from attnprof.server.auth import service as auth
from attnprof.server.config import Settings
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.github.comment import marker
from attnprof.server.projects import service as projects
from attnprof.server.testbeds import service as testbeds
from attnprof.worker.analysis import sweeper, verdict
from tests.claiming import bearer, claim, claim_secret
from tests.pgtest import create_database, drop_database
from tests.server import documents as docs
from tests.server.github.fakegithub import FakeGitHub
from tests.server.github.feedstack import CASE, REPO, SPEC
from tests.server.stack import REDIS_URL, make_settings

pytestmark = pytest.mark.slow

HOLD_S = 20.0
"""How long the stand-in GitHub holds every request before it answers."""
PROMPT_S = 5.0
"""What answering promptly means here: well within the hold."""
PR = 7


@dataclass
class Stack:
    url: str
    settings: Settings
    engine: Engine
    github: FakeGitHub
    project: str
    tokens: dict[str, str]
    testbed: str
    worker: str

    def api(self, role: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=bearer(self.tokens[role]), timeout=PROMPT_S)

    def submit(self, commit: str, *, pr: int) -> str:
        files = {"spec": ("attnprof.toml", SPEC.encode())}
        data = {"testbed": self.testbed, "branch": "feature", "commit": commit, "base_commit": "a1", "repo": REPO}
        with self.api("submit") as client:
            r = client.post(f"/api/v1/projects/{self.project}/jobs", files=files, data={**data, "pr": str(pr)})
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def play_worker(self, job_id: str) -> None:
        """Claim the job's attempt and post its result (slower than the baseline: the verdict is fail), as a GPU
        worker would; the analysis message it queues is dropped, the test runs the task itself."""
        secret = claim_secret(REDIS_URL, self.testbed, job_id)
        with httpx.Client(base_url=self.url, timeout=PROMPT_S) as client:
            token = str(claim(client, self.worker, job_id, secret)["token"])
            doc = docs.variant(docs.h200(), slower=1.10, cases=[CASE])
            r = client.post(
                f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": doc}, headers=bearer(token)
            )
        assert r.status_code == 200, r.text
        _drain(f"profile.{self.testbed}", "analysis")

    def states(self, commit: str) -> list[str]:
        return [st["state"] for st in self.github.statuses(REPO, commit)]

    def row(self, job_id: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            found = conn.execute(
                text("SELECT status, verdict, reason, feedback_due_at FROM jobs WHERE id = :id"), {"id": job_id}
            )
            return dict(found.one()._mapping)


def _drain(*queues: str) -> None:
    r = redis.Redis.from_url(REDIS_URL)
    try:
        r.delete(*queues)
    finally:
        r.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.05)


def _seed(url: str) -> tuple[str, dict[str, str], str, str]:
    """A project with its tokens and a testbed with a worker token, committed (the server reads them)."""
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine)() as session:
            project = projects.create(session, name=f"outbox-{uuid.uuid4().hex[:8]}")
            projects.allow_repository(session, project_id=project.id, repo=REPO, added_by="the tests")
            tokens = {
                r: auth.create_project_token(session, project_id=project.id, role=r)[1] for r in ("read", "submit")
            }
            testbed = f"tb-{uuid.uuid4().hex[:8]}"
            worker = auth.create_worker_token(session, testbed_id=testbeds.ensure(session, testbed).id)[1]
            session.commit()
            return project.name, tokens, testbed, worker
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    name, url = create_database()
    engine = make_engine(url)
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None
    try:
        migrate.upgrade(url)
        project, tokens, testbed, worker = _seed(url)
        with FakeGitHub() as github:
            port = _free_port()
            settings = make_settings(
                url, public_url=f"http://127.0.0.1:{port}", github_api_url=github.url, github_token="test-token-1"
            )
            server = uvicorn.Server(
                uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
            )
            thread = threading.Thread(target=server.run, daemon=True)
            thread.start()
            _wait_for("the server's start", lambda: server is not None and server.started)
            yield Stack(f"http://127.0.0.1:{port}", settings, engine, github, project, tokens, testbed, worker)
    finally:
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(timeout=10)
        engine.dispose()
        drop_database(name)


def _dashboard(s: Stack, job_id: str) -> None:
    """The project's dashboard pages, signed in through the form as a browser would be, each answered promptly."""
    with httpx.Client(base_url=s.url, timeout=PROMPT_S) as client:
        form = client.get("/ui/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        signed_in = client.post("/ui/login", data={"token": s.tokens["read"], "csrf": csrf.group(1), "next": ""})
        assert signed_in.status_code == 303, signed_in.text
        for path in (f"/ui/p/{s.project}", f"/ui/p/{s.project}/jobs", f"/ui/p/{s.project}/jobs/{job_id}"):
            page = client.get(path)
            assert page.status_code == 200, (path, page.text[:500])
        assert job_id in page.text


def test_a_slow_github_holds_up_no_submission_verdict_page_or_row_and_gets_each_feedback_once(stack: Stack) -> None:
    s, github = stack, stack.github
    with s.api("submit") as client:
        r = client.post(f"/api/v1/projects/{s.project}/results", json=docs.upload_body(docs.h200(), commit="a1"))
    assert r.status_code == 201, r.text
    job_id = s.submit("h1", pr=PR)
    _wait_for("the pending status", lambda: s.states("h1") == ["pending"])
    s.play_worker(job_id)

    github.hold()
    held_at = time.monotonic()
    outcome: dict[str, str | None] = {}
    task = threading.Thread(target=lambda: outcome.update(verdict=verdict.run(job_id, s.settings)))
    task.start()
    _wait_for("the analysis task's status request", lambda: github.waiting() >= 1, timeout_s=HOLD_S / 2)

    # While GitHub holds the task's request: the verdict is committed (another connection reads it) ...
    row = s.row(job_id)
    assert (row["status"], row["verdict"]) == ("done", "fail")
    assert row["feedback_due_at"] is not None  # claimed by the task's delivery: owed until it records
    with s.engine.connect() as conn:
        # ... no lock is held on the job's row: another transaction takes it at once ...
        with conn.begin():
            locked = conn.execute(text("SELECT id FROM jobs WHERE id = :id FOR UPDATE NOWAIT"), {"id": job_id})
            assert locked.scalar_one() == job_id
        # ... and no transaction is open on this database but this connection's.
        open_elsewhere = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
            )
        ).scalar_one()
        assert open_elsewhere == 0
    # A second sender (the sweep) finds the delivery claimed and skips it at once, sending nothing.
    started = time.monotonic()
    swept = sweeper.run(s.settings)
    assert swept["delivered"] == 0 and swept["undelivered"] == 0
    assert time.monotonic() - started < PROMPT_S
    # A submission answers promptly (its pending status waits for GitHub once it has answered) ...
    started = time.monotonic()
    other = s.submit("h2", pr=PR + 1)
    assert time.monotonic() - started < PROMPT_S
    # ... and so do the API and the dashboard.
    with s.api("read") as client:
        r = client.get(f"/api/v1/jobs/{job_id}")
    assert r.status_code == 200 and (r.json()["status"], r.json()["verdict"]) == ("done", "fail")
    _dashboard(s, job_id)
    assert task.is_alive() and s.states("h1") == ["pending"] and github.comments(REPO, PR) == []

    time.sleep(max(0.0, HOLD_S - (time.monotonic() - held_at)))
    github.answer()
    task.join(timeout=60)
    assert not task.is_alive() and outcome == {"verdict": "fail"}
    _wait_for("the second job's pending status", lambda: s.states("h2") == ["pending"])

    # Each status and the comment were posted once, whatever the sweep and the held requests did.
    assert s.states("h1") == ["pending", "failure"]
    ours = github.comments(REPO, PR)
    assert len(ours) == 1 and ours[0]["body"].startswith(marker(s.project)) and f"`{CASE}`" in ours[0]["body"]
    posted = [r.path for r in github.requests("POST")]
    assert posted.count(f"/repos/{REPO}/issues/{PR}/comments") == 1 and github.requests("PATCH") == []
    assert posted.count(f"/repos/{REPO}/statuses/h1") == 2 and posted.count(f"/repos/{REPO}/statuses/h2") == 1
    for done in (job_id, other):
        row = s.row(done)
        assert row["feedback_due_at"] is None and row["reason"] is None
    # Nothing is owed any more: a sweep sends nothing again.
    assert sweeper.run(s.settings)["delivered"] == 0
    assert len(github.requests("POST")) == len(posted)


def test_an_uploads_feedback_that_github_refused_is_delivered_by_the_sweep(stack: Stack) -> None:
    """An upload that names its repository and pull request owes a job's feedback; the sender's delivery fails
    (GitHub answers 500 to both tries), the upload's answer is unchanged, and once the backoff is over the sweep's
    body (``attnprof.worker.analysis.sweeper.run``) delivers the status and the comment, once."""
    s, github = stack, stack.github
    pr = PR + 5
    base = docs.upload_body(docs.variant(docs.h200()), commit="b0")
    candidate = docs.variant(docs.h200(), slower=1.10, cases=[CASE])
    body = docs.upload_body(candidate, branch="up", commit="u9", base_commit="b0", repo=REPO, pr=pr)
    with s.api("submit") as client:
        assert client.post(f"/api/v1/projects/{s.project}/results", json=base).status_code == 201
        github.fail_next("500", "500")
        r = client.post(f"/api/v1/projects/{s.project}/results", json=body)
    assert r.status_code == 201 and r.json()["verdict"] == "fail", r.text
    run_id = r.json()["run_id"]

    def outbox_of() -> dict[str, Any]:
        with s.engine.connect() as conn:
            found = conn.execute(
                text("SELECT feedback_due_at, feedback_attempts, feedback_note FROM runs WHERE id = :id"),
                {"id": run_id},
            )
            return dict(found.one()._mapping)

    _wait_for("the failed delivery recorded", lambda: outbox_of()["feedback_attempts"] == 1)
    assert "HTTP 500" in outbox_of()["feedback_note"] and s.states("u9") == []
    assert sweeper.run(s.settings)["delivered"] == 0  # its backoff is not over: nothing sent
    with s.engine.begin() as conn:  # the backoff over
        due = text("UPDATE runs SET feedback_due_at = now() - interval '1 second' WHERE id = :id")
        conn.execute(due, {"id": run_id})
    assert sweeper.run(s.settings)["delivered"] == 1
    assert s.states("u9") == ["failure"]
    (comment,) = github.comments(REPO, pr)
    assert comment["body"].startswith(marker(s.project)) and f"`{CASE}`" in comment["body"]
    assert outbox_of() == {"feedback_due_at": None, "feedback_attempts": 0, "feedback_note": None}
    assert sweeper.run(s.settings)["delivered"] == 0  # nothing owed any more
