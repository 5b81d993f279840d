"""The GitHub webhook: signatures, and ``/attnprof rerun`` from a user with write access."""

from __future__ import annotations

import hashlib
import hmac
import json

import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from attnprof.server.app import create_app
from attnprof.server.jobs.models import Job
from tests.server.stack import REDIS_URL, allow_repo, bind, make_settings

SECRET = "webhook-secret-for-tests"
REPO = "acme/attn"
SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "prefill"\ntarget = "sdpa"\nq_heads = 4\nseq_q = 128\nhead_dim = 64\n'


def _sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _payload(body: str = "/attnprof rerun", user: str = "maintainer", pr: int = 7) -> bytes:
    return json.dumps(
        {
            "action": "created",
            "issue": {"number": pr, "pull_request": {"url": f"https://api.github.com/repos/{REPO}/pulls/{pr}"}},
            "comment": {"body": body, "user": {"login": user}},
            "repository": {"full_name": REPO},
        }
    ).encode()


def _messages(queue: str) -> list[dict]:
    r = redis.Redis.from_url(REDIS_URL)
    try:
        return [json.loads(m) for m in r.lrange(queue, 0, -1)]
    finally:
        r.delete(queue)
        r.close()


def _setup(db, pg_url, github, tenant, worker_token):
    settings = make_settings(
        pg_url, github_api_url=github.url, github_token="test-token-1", github_webhook_secret=SECRET
    )
    allow_repo(db, tenant.name, REPO)
    client = TestClient(bind(create_app(settings), db))
    testbed = worker_token[0]
    ids = []
    for commit in ("c1", "c2"):
        r = client.post(
            f"/api/v1/projects/{tenant.name}/jobs",
            files={"spec": ("attnprof.toml", SPEC.encode())},
            data={"testbed": testbed, "branch": "feature", "commit": commit, "repo": REPO, "pr": "7"},
            headers=tenant.h("submit"),
        )
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    _messages(f"profile.{testbed}")
    github.state.permissions[f"{REPO}:maintainer"] = "write"
    github.state.permissions[f"{REPO}:reader"] = "read"
    return client, testbed, ids


def _post(client: TestClient, body: bytes, signature: str | None, event: str = "issue_comment"):
    headers = {"X-GitHub-Event": event, "Content-Type": "application/json"}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    return client.post("/api/v1/github/webhook", content=body, headers=headers)


def _jobs(db) -> int:
    return db.scalar(select(func.count()).select_from(Job).where(Job.repo == REPO))


def test_bad_or_missing_signature_is_401_and_nothing_is_done(db, pg_url, github, tenant, worker_token) -> None:
    client, testbed, _ = _setup(db, pg_url, github, tenant, worker_token)
    before, calls = _jobs(db), len(github.requests())
    body = _payload()
    for signature in (None, _sign(body, "another-secret"), "sha256=00", _sign(body + b" ")):
        r = _post(client, body, signature)
        assert r.status_code == 401, r.text
    assert _jobs(db) == before and len(github.requests()) == calls
    assert _messages(f"profile.{testbed}") == []


def test_rerun_by_a_writer_queues_a_copy_of_the_pr_last_job(db, pg_url, github, tenant, worker_token) -> None:
    client, testbed, ids = _setup(db, pg_url, github, tenant, worker_token)
    # Two live workers serve the testbed: the copy is offered beside the pull request's job already offered.
    for name in ("w1", "w2"):
        alive = {"worker": name, "testbed": testbed}
        r = client.post("/internal/alive", json=alive, headers={"Authorization": f"Bearer {worker_token[1]}"})
        assert r.status_code == 200, r.text
    body = _payload()
    r = _post(client, body, _sign(body))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["action"] == "rerun" and len(answer["jobs"]) == 1
    copy = db.get(Job, answer["jobs"][0])
    last = db.get(Job, ids[1])
    assert copy is not None and last is not None and copy.id not in ids
    assert (copy.commit, copy.pr, copy.status, copy.spec, copy.testbed_id) == (
        "c2",
        7,
        "queued",
        last.spec,
        last.testbed_id,
    )
    sent = _messages(f"profile.{testbed}")
    assert len(sent) == 1 and copy.id in json.dumps(sent[0])
    assert [s["state"] for s in github.statuses(REPO, "c2")] == ["pending", "pending"]


def test_rerun_is_ignored_for_readers_other_comments_and_other_events(db, pg_url, github, tenant, worker_token) -> None:
    client, testbed, _ = _setup(db, pg_url, github, tenant, worker_token)
    before = _jobs(db)
    for body, event in [
        (_payload(user="reader"), "issue_comment"),
        (_payload(user="stranger"), "issue_comment"),  # 404 from the collaborators API
        (_payload(body="looks good"), "issue_comment"),
        (_payload(), "push"),
    ]:
        r = _post(client, body, _sign(body), event)
        assert r.status_code == 200 and r.json()["action"] == "ignored", r.text
    assert _jobs(db) == before and _messages(f"profile.{testbed}") == []


def test_webhook_without_a_configured_secret_is_404(db, pg_url, tenant) -> None:
    client = TestClient(bind(create_app(make_settings(pg_url)), db))
    body = _payload()
    assert _post(client, body, _sign(body)).status_code == 404


def test_bisect_by_a_writer_starts_a_bisection_of_the_pull_requests_commits(
    db, pg_url, github, tenant, worker_token
) -> None:
    from attnprof.server.bisections.models import Bisection

    client, testbed, _ = _setup(db, pg_url, github, tenant, worker_token)
    base = "a" * 40
    r = client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode())},
        data={"testbed": testbed, "branch": "feature", "commit": "c3", "repo": REPO, "pr": "7", "base_commit": base},
        headers=tenant.h("submit"),
    )
    assert r.status_code == 202, r.text
    for body, event in [
        (_payload(body="/attnprof bisect", user="reader"), "issue_comment"),
        (_payload(body="/attnprof bisection please"), "issue_comment"),  # not the command
        (_payload(body="/attnprof bisect"), "push"),
    ]:
        r = _post(client, body, _sign(body), event)
        assert r.status_code == 200 and r.json()["action"] == "ignored", r.text
    assert db.scalars(select(Bisection).where(Bisection.repo == REPO)).all() == []
    body = _payload(body="/attnprof bisect")
    r = _post(client, body, _sign(body))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["action"] == "bisect" and len(answer["bisections"]) == 1, answer
    made = db.get(Bisection, answer["bisections"][0])
    assert made is not None
    assert (made.good, made.bad, made.pr, made.requested_via, made.status) == (base, "c3", 7, "comment", "pending")
    assert made.requested_by.startswith("maintainer (GitHub")
    # The same comment again: that range is searched already, and the answer says so.
    r = _post(client, body, _sign(body))
    assert r.json()["bisections"] == [] and "already searches" in r.json()["detail"]
