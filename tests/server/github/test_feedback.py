"""Commit statuses and the PR comment, sent to a fake GitHub server by the real service on Postgres/Redis."""

from __future__ import annotations

from attnprof.server.github import outbox
from attnprof.server.github import service as github_service
from attnprof.server.github.client import GitHubClient
from attnprof.server.github.comment import marker
from attnprof.server.jobs.models import Job
from tests.server.github.feedstack import CASE, REPO, SPEC, _drain, _stack


def test_pr_job_goes_pending_then_failure_with_one_comment_naming_case_and_kernels(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    job_id = s.job("b1")
    assert [st["state"] for st in github.statuses(REPO, "b1")] == ["pending"]
    job = s.analyse(job_id)
    assert job.verdict == "fail" and job.status == "done" and job.reason is None
    statuses = github.statuses(REPO, "b1")
    assert [st["state"] for st in statuses] == ["pending", "failure"]
    assert {st["context"] for st in statuses} == {f"attnprof/{tenant.name}"}
    assert statuses[1]["description"] == "verdict fail"
    assert statuses[1]["target_url"] == f"http://attnprof.test/ui/p/{tenant.name}/runs/{job.run_id}"
    comments = github.comments(REPO, 7)
    assert len(comments) == 1
    body = comments[0]["body"]
    assert body.startswith(marker(tenant.name)) and f"`{CASE}`" in body and "| Kernel |" in body
    # the endpoint shows what the PR shows
    r = s.client.get(f"/api/v1/jobs/{job_id}/comment", headers=tenant.h("read"))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/markdown")
    assert r.text == body


def test_second_push_updates_the_comment_found_on_page_two(db, pg_url, github, tenant, worker_token) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    for i in range(120):  # more than one page of 100
        github.add_comment(REPO, 7, f"review comment {i}")
    s.analyse(s.job("b1"))
    ours = [c for c in github.comments(REPO, 7) if c["body"].startswith(marker(tenant.name))]
    assert len(ours) == 1 and github.comments(REPO, 7).index(ours[0]) == 120
    assert any(r.query.get("page") == "2" for r in github.requests("GET"))
    job = s.analyse(s.job("b2", slower=1.0))
    assert job.verdict == "pass"
    ours = [c for c in github.comments(REPO, 7) if c["body"].startswith(marker(tenant.name))]
    assert len(ours) == 1 and "**pass**" in ours[0]["body"]
    assert len(github.requests("PATCH")) == 1 and len(github.comments(REPO, 7)) == 121
    assert [st["state"] for st in github.statuses(REPO, "b2")] == ["pending", "success"]


def test_rate_limits_and_server_errors_are_retried(db, pg_url, github, tenant, worker_token) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    job_id = s.job("b1", pr=None)
    github.fail_next("rate403", "rate429", "500")
    sleeps: list[float] = []
    gh = GitHubClient(github.url, "test-token-1", attempts=4, backoff_s=0.01, sleep=sleeps.append)
    s.owe(job_id)
    assert outbox.deliver(s.sessions, s.settings, job_id, client=gh) is True
    assert gh.retries == 3 and len(sleeps) == 3 and all(w <= 1.0 for w in sleeps)
    assert [st["state"] for st in github.statuses(REPO, "b1")] == ["pending", "pending"]


def test_a_github_failure_is_recorded_and_the_verdict_kept(
    db, pg_url, github, tenant, worker_token, monkeypatch
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    job_id = s.job("b1")
    github.fail_next(*["500"] * 10)
    fast = GitHubClient(github.url, "test-token-1", attempts=3, backoff_s=0.0)
    monkeypatch.setattr(github_service, "make_client", lambda settings, **kw: fast)
    job = s.analyse(job_id)
    assert job.status == "done" and job.verdict == "fail" and job.run_id is not None
    assert job.reason is not None and job.reason.startswith("GitHub feedback failed: ")
    assert "HTTP 500" in job.reason and "after 3 attempts" in job.reason
    assert github.comments(REPO, 7) == []
    r = s.client.get(f"/api/v1/jobs/{job_id}/comparison", headers=tenant.h("read"))
    assert r.status_code == 200 and r.json()["verdict"] == "fail"


def test_a_plain_403_is_not_retried(db, pg_url, github, tenant, worker_token) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    job_id = s.job("b1", pr=None)
    github.fail_next("403")
    gh = GitHubClient(github.url, "test-token-1", backoff_s=0.0)
    s.owe(job_id)
    assert outbox.deliver(s.sessions, s.settings, job_id, client=gh) is False
    assert gh.retries == 0
    db.expire_all()
    job = db.get(Job, job_id)
    assert job is not None and job.reason is not None and "HTTP 403" in job.reason
    # Refused for good (no access): owed no more, never sent again by the sweep.
    assert job.feedback_due_at is None and "refused for good, not sent again" in job.reason


def test_job_creation_succeeds_with_github_unreachable(db, pg_url, github, tenant, worker_token, monkeypatch) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    nowhere = GitHubClient("http://127.0.0.1:9", "test-token-1", attempts=2, backoff_s=0.0)
    monkeypatch.setattr(github_service, "make_client", lambda settings, **kw: nowhere)
    files = {"spec": ("attnprof.toml", SPEC.encode())}
    data = {"testbed": s.testbed, "branch": "f", "commit": "c9", "repo": REPO}
    r = s.client.post(f"/api/v1/projects/{tenant.name}/jobs", files=files, data=data, headers=tenant.h("submit"))
    _drain(f"profile.{s.testbed}")
    assert r.status_code == 202, r.text
    job = db.get(Job, r.json()["id"])
    assert job is not None and job.status == "queued"
    assert job.reason is not None and job.reason.startswith("GitHub feedback failed: ")


def test_a_job_superseded_by_a_newer_push_gets_its_error_status_after_the_commit(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    files = {"spec": ("attnprof.toml", SPEC.encode())}

    def submit(commit: str) -> str:
        data = {"testbed": s.testbed, "branch": "feature", "commit": commit, "repo": REPO, "pr": "7"}
        r = s.client.post(f"/api/v1/projects/{tenant.name}/jobs", files=files, data=data, headers=tenant.h("submit"))
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    old = submit("e1")
    newer = submit("e2")
    _drain(f"profile.{s.testbed}")
    job = db.get(Job, old)
    assert job is not None and job.status == "cancelled" and job.feedback_due_at is None  # delivered, nothing owed
    assert [st["state"] for st in github.statuses(REPO, "e1")] == ["pending", "error"]
    assert github.statuses(REPO, "e1")[-1]["description"].startswith(
        "no verdict: job cancelled: superseded by commit e2"
    )
    assert [st["state"] for st in github.statuses(REPO, "e2")] == ["pending"]
    assert newer in {j.id for j in db.query(Job).filter(Job.status == "queued")}
