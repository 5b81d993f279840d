"""The ``error`` status and the no-verdict comment of jobs that end without a verdict (a worker's failure report,
a timeout, a cancel, the sweep giving up on a dead worker), each sent once; and feedback that GitHub refused,
owed on the job and delivered later from what is stored: by the sweep with backoff, or by an admin's resend.
Real service (TestClient on the migrated Postgres), a fake GitHub server."""

from __future__ import annotations

from datetime import timedelta

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import MetaData, insert, inspect, text
from sqlalchemy.orm import Session

from attnprof.server import migrate, queue
from attnprof.server.app import create_app
from attnprof.server.config import Sweep
from attnprof.server.db import make_engine, utcnow
from attnprof.server.github import outbox
from attnprof.server.github import service as github_service
from attnprof.server.github.client import GitHubClient
from attnprof.server.github.comment import marker
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs import sweep
from attnprof.server.jobs.models import Job
from tests.server.github.fakegithub import FakeGitHub
from tests.server.github.feedstack import CASE, REPO, SPEC, Stack, _drain, _stack
from tests.server.stack import bind, make_settings

SWEEP = Sweep(feedback_retry_s=30, feedback_attempts=3)


def _create(s: Stack, commit: str, *, pr: int | None = 7) -> str:
    files = {"spec": ("attnprof.toml", SPEC.encode())}
    data = {"testbed": s.testbed, "branch": "feature", "commit": commit, "base_commit": "a1", "repo": REPO}
    if pr is not None:
        data["pr"] = str(pr)
    r = s.client.post(f"/api/v1/projects/{s.tenant.name}/jobs", files=files, data=data, headers=s.tenant.h("submit"))
    assert r.status_code == 202, r.text
    s.offered(str(r.json()["id"]))
    return str(r.json()["id"])


def _claim(s: Stack, job_id: str, attempt: int = 1) -> None:
    s.claim(job_id, attempt)


def _fail(s: Stack, job_id: str, reason: str, *, attempt: int = 1, **flags: bool) -> dict:
    w = {"Authorization": f"Bearer {s.tokens[job_id]}"}
    body = {"attempt": attempt, "reason": reason, **flags}
    r = s.client.post(f"/internal/jobs/{job_id}/failure", json=body, headers=w)
    assert r.status_code == 200, r.text
    if r.json()["status"] == "queued":
        s.offered(job_id)  # the next attempt's message
    _drain(f"profile.{s.testbed}")
    return dict(r.json())


def _states(github: FakeGitHub, sha: str) -> list[str]:
    return [st["state"] for st in github.statuses(REPO, sha)]


def _ours(github: FakeGitHub, tenant_name: str) -> list[dict]:
    return [c for c in github.comments(REPO, 7) if c["body"].startswith(marker(tenant_name))]


def _job(db: Session, job_id: str) -> Job:
    db.expire_all()
    job = db.get(Job, job_id)
    assert job is not None
    return job


def test_a_failed_job_gets_one_error_status_and_a_comment_that_says_there_is_no_verdict(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    job_id = _create(s, "f1")
    _claim(s, job_id)
    out = _fail(s, job_id, "every case failed (1): boom: RuntimeError\nRuntimeError: boom from the factory")
    assert out["status"] == "failed" and out["verdict"] is None
    assert _states(github, "f1") == ["pending", "error"]
    error = github.statuses(REPO, "f1")[1]
    assert error["description"] == "no verdict: job failed: every case failed (1): boom: RuntimeError"
    assert error["target_url"] == f"http://attnprof.test/ui/p/{tenant.name}/jobs/{job_id}"
    assert error["context"] == f"attnprof/{tenant.name}"
    ours = _ours(github, tenant.name)
    assert len(ours) == 1
    assert "**no verdict** (job failed)" in ours[0]["body"] and "boom from the factory" in ours[0]["body"]
    job = _job(db, job_id)
    assert job.status == "failed" and job.feedback_due_at is None and job.feedback_attempts == 0
    assert job.reason == "every case failed (1): boom: RuntimeError\nRuntimeError: boom from the factory"
    # nothing is owed, so the sweep sends nothing more
    assert job_id not in sweep.sweep(db, cfg=SWEEP, now=utcnow(), pending=lambda _: queue.Pending()).feedback
    assert _states(github, "f1") == ["pending", "error"]


def test_a_retried_failure_sends_nothing_and_a_timeout_sends_error(db, pg_url, github, tenant, worker_token) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    job_id = _create(s, "t1", pr=None)
    _claim(s, job_id)
    assert _fail(s, job_id, "the host lost its GPU", retry=True)["status"] == "queued"
    assert _states(github, "t1") == ["pending"]  # not an end: the job is queued for attempt 2
    _claim(s, job_id, attempt=2)
    assert _fail(s, job_id, "ran past the wall-clock limit of 12 s", attempt=2, timed_out=True)["status"] == "timed_out"
    assert _states(github, "t1") == ["pending", "error"]
    assert (
        github.statuses(REPO, "t1")[1]["description"]
        == "no verdict: job timed out: ran past the wall-clock limit of 12 s"
    )
    assert github.comments(REPO, 7) == []  # no pull request, no comment


def test_a_cancel_sends_error_once(db, pg_url, github, tenant, worker_token) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    job_id = _create(s, "c1")
    r = s.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=tenant.h("submit"))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert _states(github, "c1") == ["pending", "error"]
    assert github.statuses(REPO, "c1")[1]["description"] == "no verdict: job cancelled: cancelled by a user"
    assert "(job was cancelled)" in _ours(github, tenant.name)[0]["body"]
    assert s.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=tenant.h("submit")).status_code == 409
    assert _states(github, "c1") == ["pending", "error"]


def test_the_sweep_failing_a_dead_workers_last_attempt_owes_and_delivers_error(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    job_id = _create(s, "d1")
    _claim(s, job_id)
    job = _job(db, job_id)
    now = utcnow()
    job.attempts = job.max_attempts
    job.heartbeat_at = now - timedelta(seconds=600)
    job.lease_expires_at = now - timedelta(seconds=540)  # no heartbeat renewed it
    db.flush()
    report = sweep.sweep(db, cfg=SWEEP, now=now, pending=lambda _: queue.Pending())
    assert report.failed == [job_id] and job_id in report.feedback
    assert job.status == "failed" and job.feedback_due_at == now
    db.commit()
    gh = GitHubClient(github.url, "test-token-1", backoff_s=0.0)
    assert outbox.deliver(s.sessions, s.settings, job_id, client=gh, now=now) is True
    assert outbox.deliver(s.sessions, s.settings, job_id, client=gh, now=now) is None  # paid: never twice
    assert _states(github, "d1") == ["pending", "error"]
    assert "lost its worker" in github.statuses(REPO, "d1")[1]["description"]
    assert len(_ours(github, tenant.name)) == 1


def test_refused_feedback_is_owed_and_delivered_by_the_sweep_from_what_is_stored(
    db, pg_url, github, tenant, worker_token, monkeypatch
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.settings = make_settings(pg_url, github_api_url=github.url, github_token="test-token-1", sweep=SWEEP)
    s.baseline()
    job_id = s.job("r1")
    github.fail_next(*["500"] * 3)
    fast = GitHubClient(github.url, "test-token-1", attempts=3, backoff_s=0.0)
    monkeypatch.setattr(github_service, "make_client", lambda settings, **kw: fast)
    before = utcnow()
    job = s.analyse(job_id)
    assert job.status == "done" and job.verdict == "fail"  # GitHub's failure changes neither
    assert job.feedback_attempts == 1 and job.feedback_due_at is not None
    assert timedelta(seconds=29) < job.feedback_due_at - before < timedelta(seconds=40)
    assert "GitHub feedback failed: " in (job.reason or "") and "delivery 1 of 3, retried in 30 s" in (job.reason or "")
    assert _states(github, "r1") == ["pending"] and _ours(github, tenant.name) == []

    # Not due yet: the sweep leaves it. Due: the sweep lists it, and a fresh client delivers it from the database.
    early = sweep.sweep(db, cfg=SWEEP, now=before + timedelta(seconds=10), pending=lambda _: queue.Pending())
    assert job_id not in early.feedback
    due = job.feedback_due_at + timedelta(seconds=1)
    assert job_id in sweep.sweep(db, cfg=SWEEP, now=due, pending=lambda _: queue.Pending()).feedback
    db.commit()
    db.expunge_all()
    gh = GitHubClient(github.url, "test-token-1", backoff_s=0.0)
    assert outbox.deliver(s.sessions, s.settings, job_id, client=gh, now=due) is True
    db.commit()
    job = _job(db, job_id)
    assert job.feedback_due_at is None and job.feedback_attempts == 0 and job.reason is None
    assert job.status == "done" and job.verdict == "fail"
    assert _states(github, "r1") == ["pending", "failure"]
    ours = _ours(github, tenant.name)
    assert len(ours) == 1 and f"`{CASE}`" in ours[0]["body"] and "| Kernel |" in ours[0]["body"]


def test_backoff_doubles_and_gives_up_after_the_maximum(db, pg_url, github, tenant, worker_token) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.settings = make_settings(pg_url, github_api_url=github.url, github_token="test-token-1", sweep=SWEEP)
    job_id = _create(s, "b1", pr=None)
    job = _job(db, job_id)
    now = utcnow()
    jobs.owe_feedback(job, now)
    db.commit()
    waits = []
    for _ in range(SWEEP.feedback_attempts):
        github.fail_next("500")  # a server error, with one try per delivery: owed again after the backoff
        gh = GitHubClient(github.url, "test-token-1", attempts=1, backoff_s=0.0)
        assert outbox.deliver(s.sessions, s.settings, job_id, client=gh, now=now) is False
        if job.feedback_due_at is not None:
            waits.append((job.feedback_due_at - now).total_seconds())
            now = job.feedback_due_at
    assert waits == [30.0, 60.0]
    assert job.feedback_due_at is None and job.feedback_attempts == 3
    assert "given up after 3 deliveries" in (job.reason or "") and f"/github/jobs/{job_id}/resend" in (job.reason or "")
    assert job.reason is not None and job.reason.count("GitHub feedback failed: ") == 1  # replaced, not appended
    assert job.status == "queued"
    assert github_service.retry_after_s(Sweep(feedback_retry_s=30), 20) == 3600.0


def test_an_admin_resends_the_feedback(db, pg_url, github, tenant, worker_token) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    job_id = _create(s, "a1x")
    _claim(s, job_id)
    github.fail_next(*["500"] * 4)  # both tries of the failure report's delivery
    _fail(s, job_id, "the target raised")
    job = _job(db, job_id)
    assert job.status == "failed" and job.feedback_due_at is not None and job.reason is not None
    assert job.reason.startswith("the target raised; GitHub feedback failed: ")
    assert _states(github, "a1x") == ["pending"]
    url = f"/api/v1/github/jobs/{job_id}/resend"
    assert s.client.post(url, headers=tenant.h("submit")).status_code == 403
    assert s.client.post(url, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert s.client.post("/api/v1/github/jobs/no-such-job/resend", headers=tenant.h("admin")).status_code == 404
    github.fail_next(*["500"] * 3)
    r = s.client.post(url, headers=tenant.h("admin"))
    assert r.status_code == 200 and r.json()["delivered"] is False and r.json()["owed_at"] is not None
    r = s.client.post(url, headers=tenant.h("admin"))
    assert r.status_code == 200, r.text
    assert r.json() == {
        "delivered": True,
        "state": "error",
        "description": "no verdict: job failed: the target raised",
        "owed_at": None,
        "reason": "the target raised",
    }
    assert _states(github, "a1x") == ["pending", "error"] and len(_ours(github, tenant.name)) == 1
    no_repo = s.client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode())},
        data={"testbed": s.testbed, "branch": "b", "commit": "n1"},
        headers=tenant.h("submit"),
    )
    _drain(f"profile.{s.testbed}")
    r = s.client.post(f"/api/v1/github/jobs/{no_repo.json()['id']}/resend", headers=tenant.h("admin"))
    assert r.status_code == 409 and "names no repository" in r.json()["detail"]
    off = TestClient(bind(create_app(make_settings(pg_url)), db))  # a service with no GitHub token
    r = off.post(url, headers=tenant.h("admin"))
    assert r.status_code == 409 and "ATTNPROF_GITHUB_TOKEN" in r.json()["detail"]


class _Meanwhile(httpx.HTTPTransport):
    """Runs ``then`` while GitHub holds the first request (before it goes on), as another request would."""

    def __init__(self, then) -> None:
        super().__init__()
        self.then = then

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        then, self.then = self.then, None
        if then is not None:
            then()
        return super().handle_request(request)


def test_a_job_that_ends_while_its_pending_status_is_sent_gets_its_end_after_it(
    db, pg_url, github, tenant, worker_token
) -> None:
    """The pending status, refused at creation, is being sent again when the job is cancelled: the cancel owes the
    end but keeps the delivery's claim (its own send after the commit skips the job), and the delivery, finding the
    job cancelled when it records the pending status, sends the end next. Never the pending status after the end."""
    s = _stack(db, pg_url, github, tenant, worker_token)
    github.fail_next("500", "500")  # both tries of the creation's pending status (a plain 403 is never sent again)
    job_id = _create(s, "p1", pr=None)
    owed = _job(db, job_id).feedback_due_at
    assert owed is not None and _states(github, "p1") == []
    later = owed + timedelta(seconds=1)

    def cancel() -> None:
        r = s.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=tenant.h("submit"))
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        # Its send found the job claimed and skipped it: nothing more was sent, and the claim is kept.
        assert _job(db, job_id).feedback_due_at == later + timedelta(seconds=outbox.CLAIM_S)

    gh = GitHubClient(github.url, "test-token-1", backoff_s=0.0, transport=_Meanwhile(cancel))
    assert outbox.deliver(s.sessions, s.settings, job_id, client=gh, now=later) is True
    assert _states(github, "p1") == ["pending", "error"]
    assert github.statuses(REPO, "p1")[1]["description"] == "no verdict: job cancelled: cancelled by a user"
    job = _job(db, job_id)
    assert job.feedback_due_at is None and job.reason == "cancelled by a user"
    assert outbox.deliver(s.sessions, s.settings, job_id, client=gh, now=later) is None  # nothing owed


def test_a_job_that_ended_before_its_refused_pending_status_was_sent_again_gets_only_its_end(
    db, pg_url, github, tenant, worker_token
) -> None:
    """What is sent is the job's state when it is sent: a pending status still owed (GitHub refused it) is never sent
    once the job has ended. The end waits out the backoff GitHub's refusal started, then goes alone."""
    s = _stack(db, pg_url, github, tenant, worker_token)
    github.fail_next("500", "500")  # both tries of the creation's pending status
    job_id = _create(s, "p2", pr=None)
    owed = _job(db, job_id).feedback_due_at
    assert owed is not None
    assert s.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=tenant.h("submit")).status_code == 200
    job = _job(db, job_id)
    assert job.feedback_due_at == owed and job.feedback_attempts == 0 and _states(github, "p2") == []
    gh = GitHubClient(github.url, "test-token-1", backoff_s=0.0)
    assert outbox.deliver(s.sessions, s.settings, job_id, client=gh, now=owed) is True
    assert _states(github, "p2") == ["error"]


def test_the_migration_adds_the_owed_feedback_columns_and_removes_them(tmp_path) -> None:
    """0004 on a database with jobs in it: existing jobs owe nothing; downgrading drops the columns and index."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    migrate.upgrade(url, "0003")
    engine = make_engine(url)
    try:
        tables = MetaData()
        tables.reflect(engine, only=["projects", "testbeds", "jobs"])
        with engine.begin() as conn:
            conn.execute(
                insert(tables.tables["projects"]).values(id=1, name="p", default_branch="main", created_at=utcnow())
            )
            conn.execute(insert(tables.tables["testbeds"]).values(id=1, name="t", created_at=utcnow()))
            conn.execute(
                insert(tables.tables["jobs"]).values(
                    id="j1",
                    project_id=1,
                    testbed_id=1,
                    spec="",
                    suite_name="s",
                    branch="main",
                    commit="c",
                    ancestors=[],
                    status="done",
                    attempts=1,
                    max_attempts=3,
                    created_at=utcnow(),
                    updated_at=utcnow(),
                )
            )
        migrate.upgrade(url, "0004")
        columns = {c["name"] for c in inspect(engine).get_columns("jobs")}
        assert {"feedback_due_at", "feedback_attempts"} <= columns
        assert "ix_jobs_feedback_due_at" in {i["name"] for i in inspect(engine).get_indexes("jobs")}
        with engine.connect() as conn:
            row = conn.execute(text("SELECT feedback_due_at, feedback_attempts FROM jobs WHERE id = 'j1'")).one()
        assert tuple(row) == (None, 0)
        migrate.downgrade(url, "0003")
        assert not {"feedback_due_at", "feedback_attempts"} & {c["name"] for c in inspect(engine).get_columns("jobs")}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT status FROM jobs WHERE id = 'j1'")).scalar_one() == "done"
    finally:
        engine.dispose()


def test_without_a_github_token_nothing_is_sent_and_nothing_stays_owed(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.client = TestClient(bind(create_app(make_settings(pg_url)), db))
    job_id = _create(s, "n1")
    _claim(s, job_id)
    _fail(s, job_id, "the target raised")
    other = _create(s, "n2")
    assert s.client.post(f"/api/v1/jobs/{other}/cancel", headers=tenant.h("submit")).status_code == 200
    for done in (_job(db, job_id), _job(db, other)):
        assert done.feedback_due_at is None and done.feedback_attempts == 0 and "GitHub" not in (done.reason or "")
    assert github.requests() == []
    assert sweep.sweep(db, cfg=SWEEP, now=utcnow(), pending=lambda _: queue.Pending()).feedback == []
