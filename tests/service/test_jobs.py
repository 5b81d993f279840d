from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from datetime import timedelta

import pytest
import redis
import svcdocs as docs
from claiming import bearer, claim, claim_secret
from conftest import REDIS_URL, create_database, drop_database
from fastapi.testclient import TestClient
from sqlalchemy import inspect
from sqlalchemy.orm import Session
from svcconf import Tenant

from service import migrate
from service.db import make_engine, utcnow
from service.jobs import attempts
from service.jobs import service as jobs
from service.jobs.models import Job

SPEC = """
[suite]
name = "s"

[[cases]]
name = "prefill"
target = "sdpa"
q_heads = 4
seq_q = 128
head_dim = 64
"""


def _bundle(members: dict[str, bytes] | None = None, *, link: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (members or {"pkg/mod.py": b"x = 1\n"}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("pkg/evil")
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return buf.getvalue()


def _post(
    client: TestClient,
    tenant: Tenant,
    testbed: str,
    *,
    spec: str = SPEC,
    bundle: bytes | None = None,
    headers: dict[str, str] | None = None,
    **fields: str,
):
    files = {"spec": ("attnprof.toml", spec.encode())}
    if bundle is not None:
        files["bundle"] = ("src.tar.gz", bundle)
    data = {"testbed": testbed, "branch": "feature", "commit": "abc123", "repo": "o/r", **fields}
    return client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files=files,
        data=data,
        headers={**tenant.h("submit"), **(headers or {})},
    )


def _messages(queue: str) -> list[dict]:
    r = redis.Redis.from_url(REDIS_URL)
    try:
        return [json.loads(m) for m in r.lrange(queue, 0, -1)]
    finally:
        r.delete(queue)
        r.close()


def test_job_is_committed_then_enqueued_on_its_testbed_queue(client, tenant, worker_token, db: Session) -> None:
    testbed, _ = worker_token
    r = _post(client, tenant, testbed, bundle=_bundle())
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert r.json()["status"] == "queued"
    msgs = _messages(f"profile.{testbed}")
    assert len(msgs) == 1
    assert msgs[0]["headers"]["task"] == "profile.run"
    job_arg, attempt, secret = json.loads(base64.b64decode(msgs[0]["body"]))[0]
    assert (job_arg, attempt) == (job_id, 1) and secret.startswith("apc_") and len(secret) > 40
    assert secret not in msgs[0]["headers"]["argsrepr"]  # what Celery shows of the task's arguments
    job = db.get(Job, job_id)
    assert job.status == "queued"
    # The row keeps the secret's sha256 only: the plain secret is in the message alone.
    assert job.claim_secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in {str(v) for v in vars(job).values()}


def test_idempotency_key_returns_the_existing_job(client, tenant, worker_token) -> None:
    testbed, _ = worker_token
    first = _post(client, tenant, testbed, headers={"Idempotency-Key": "k1"})
    again = _post(client, tenant, testbed, headers={"Idempotency-Key": "k1"})
    assert first.status_code == 202 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    assert len(_messages(f"profile.{testbed}")) == 1


def test_bad_spec_names_the_key(client, tenant, worker_token) -> None:
    r = _post(client, tenant, worker_token[0], spec=SPEC.replace("head_dim", "hed_dim"))
    assert r.status_code == 422
    assert r.json()["error"] == "invalid_payload"
    assert "cases[0].hed_dim" in r.json()["detail"]


def test_bad_bundles_are_refused(client, tenant, worker_token) -> None:
    tb = worker_token[0]
    for bundle, word in [
        (b"not gzip at all", "gzip"),
        (_bundle({"../x.py": b"1"}), ".."),
        (_bundle({"/abs.py": b"1"}), "absolute"),
        (_bundle(link=True), "link"),
    ]:
        r = _post(client, tenant, tb, bundle=bundle)
        assert r.status_code == 422, (word, r.text)
        assert word in r.json()["detail"]


def test_bundle_bomb_and_size_limits(client, tenant, worker_token, settings, app) -> None:
    settings.limits.bundle_unpacked_bytes = 100_000
    settings.limits.bundle_bytes = 50_000
    bomb = _bundle({"zeros.bin": b"\0" * 10_000_000})
    assert len(bomb) < 50_000
    r = _post(client, tenant, worker_token[0], bundle=bomb)
    assert r.status_code == 413, r.text
    big = _bundle({"rand.bin": __import__("os").urandom(60_000)})
    assert _post(client, tenant, worker_token[0], bundle=big).status_code == 413


def _claimed(client, tenant, worker_token, **post) -> tuple[str, str]:
    """A job of ``tenant`` on the worker token's testbed, claimed (attempt 1): (job id, its job token)."""
    testbed, wtok = worker_token
    job_id = _post(client, tenant, testbed, **post).json()["id"]
    secret = claim_secret(REDIS_URL, testbed, job_id)
    _messages(f"profile.{testbed}")
    return job_id, claim(client, wtok, job_id, secret)["token"]


def _routes(job_id: str, attempt: int = 1) -> list[tuple[str, str, dict]]:
    """Every route a job token opens, with a body that would be taken."""
    return [
        ("POST", f"/internal/jobs/{job_id}/heartbeat", {"json": {"attempt": attempt}}),
        ("GET", f"/internal/jobs/{job_id}/bundle", {}),
        ("POST", f"/internal/jobs/{job_id}/result", {"json": {"attempt": attempt, "result": docs.h200()}}),
        ("POST", f"/internal/jobs/{job_id}/failure", {"json": {"attempt": attempt, "reason": "x", "retry": True}}),
        (
            "PUT",
            f"/internal/jobs/{job_id}/traces/t.json.gz?attempt={attempt}",
            {"content": b"\x1f\x8b", "headers": {"Content-Type": "application/gzip"}},
        ),
    ]


def _call(client, token: str, method: str, url: str, kw: dict):
    headers = {**kw.get("headers", {}), **bearer(token)}
    return client.request(method, url, **{k: v for k, v in kw.items() if k != "headers"}, headers=headers)


def test_worker_lifecycle_result_is_idempotent(client, tenant, worker_token, other, settings, db) -> None:
    testbed, wtok = worker_token
    sent = _bundle()
    job_id = _post(client, tenant, testbed, bundle=sent).json()["id"]
    secret = claim_secret(REDIS_URL, testbed, job_id)
    _messages(f"profile.{testbed}")
    w = bearer(wtok)
    stale = {"attempt": 2, "worker": "h0", "secret": secret}
    assert client.post(f"/internal/jobs/{job_id}/claim", json=stale, headers=w).status_code == 409
    r = client.post(f"/internal/jobs/{job_id}/claim", json={"attempt": 1, "worker": "h0", "secret": secret}, headers=w)
    assert r.status_code == 200 and r.json()["spec"] == SPEC
    token = r.json()["token"]
    assert token.startswith("apj_") and r.json()["lease_s"] == settings.sweep.heartbeat_stale_s
    row = db.get(Job, job_id)
    db.refresh(row)
    assert row.job_token_sha256 == hashlib.sha256(token.encode()).hexdigest() and row.lease_expires_at is not None
    # The same message again (a duplicate delivery) is stale: 409, and the worker drops it. No second token.
    again = {"attempt": 1, "worker": "h1", "secret": secret}
    assert client.post(f"/internal/jobs/{job_id}/claim", json=again, headers=w).status_code == 409
    t = bearer(token)
    assert client.get(f"/internal/jobs/{job_id}/bundle", headers=t).content == sent
    hb = client.post(f"/internal/jobs/{job_id}/heartbeat", json={"attempt": 1}, headers=t)
    assert hb.json() == {"status": "running", "cancelled": False}
    doc = docs.h200()
    r1 = client.post(f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": doc}, headers=t)
    r2 = client.post(f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": doc}, headers=t)
    assert r1.status_code == 200 and r2.status_code == 200, r2.text
    assert r1.json()["run_id"] == r2.json()["run_id"] and r2.json()["duplicate"] is True
    assert len(_messages("analysis")) == 1
    # what the analysis task does, as plain code
    jobs.analyze_job(db, job_id=job_id, cfg=settings.analysis)
    db.commit()
    got = client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()
    assert got["status"] == "done" and got["verdict"] == "pass"
    cmp = client.get(f"/api/v1/jobs/{job_id}/comparison", headers=tenant.h("read"))
    assert cmp.status_code == 200 and cmp.json()["document"]["baseline"] is None
    # tenancy: another project's token sees nothing
    assert client.get(f"/api/v1/jobs/{job_id}", headers=other.h("admin")).status_code == 404


def test_a_worker_token_and_a_job_id_open_nothing_without_the_message(client, tenant, other, worker_token) -> None:
    """A worker token that a hostile job read, and another project's job id read from the broker: no claim, no
    bundle, no route of the job; a wrong or missing secret is answered as an unknown job is."""
    testbed, wtok = worker_token
    victim = _post(client, other, testbed, bundle=_bundle({"secret/model.py": b"weights = 1\n"})).json()["id"]
    _messages(f"profile.{testbed}")
    w = bearer(wtok)

    def claiming(job_id: str, **extra: str):
        return client.post(f"/internal/jobs/{job_id}/claim", json={"attempt": 1, "worker": "x", **extra}, headers=w)

    unknown = "00000000-0000-4000-8000-000000000000"
    for answer in (claiming(victim), claiming(victim, secret="apc_guessed"), claiming(victim, secret="")):
        assert answer.status_code == 404, answer.text
        assert answer.json() == {
            **claiming(unknown, secret="apc_guessed").json(),
            "detail": f"no job {victim} for this worker's testbed",
        }
    for method, url, kw in _routes(victim):
        r = _call(client, wtok, method, url, kw)
        assert r.status_code == 401, (url, r.text)
        assert r.headers["WWW-Authenticate"] == "Bearer"
        assert client.request(method, url, **{k: v for k, v in kw.items() if k != "headers"}).status_code == 401
    assert client.get(f"/api/v1/jobs/{victim}", headers=other.h("read")).json()["status"] == "queued"


def test_a_job_token_opens_only_its_own_job_and_attempt(client, tenant, worker_token, db) -> None:
    testbed, wtok = worker_token
    mine, token = _claimed(client, tenant, worker_token)
    theirs, their_token = _claimed(client, tenant, worker_token)
    for method, url, kw in _routes(theirs):
        assert _call(client, token, method, url, kw).status_code == 401, url
    assert _call(client, their_token, *_routes(theirs)[0]).status_code == 200
    # The attempt fails and is retried: its token is revoked, and the next attempt's message has a new secret.
    failed = _call(client, token, *_routes(mine)[3])
    assert failed.status_code == 200 and failed.json()["status"] == "queued"
    second = claim_secret(REDIS_URL, testbed, mine, attempt=2)
    _messages(f"profile.{testbed}")
    for method, url, kw in _routes(mine) + _routes(mine, attempt=2):
        assert _call(client, token, method, url, kw).status_code == 401, url
    row = db.get(Job, mine)
    db.refresh(row)
    assert row.job_token_sha256 is None and row.lease_expires_at is None
    token2 = claim(client, wtok, mine, second, attempt=2)["token"]
    assert _call(client, token2, *_routes(mine, attempt=2)[0]).json() == {"status": "running", "cancelled": False}
    assert _call(client, token2, *_routes(mine, attempt=1)[0]).status_code == 409  # attempt 1 is over
    assert _call(client, token, *_routes(mine, attempt=2)[0]).status_code == 401


def test_after_the_result_the_token_uploads_traces_for_a_while_then_nothing(client, tenant, worker_token, db) -> None:
    job_id, token = _claimed(client, tenant, worker_token, bundle=_bundle())
    doc = docs.h200()
    name = doc["cases"][0]["trace"]
    result = _call(client, token, *_routes(job_id)[2])
    assert result.status_code == 200, result.text
    _messages("analysis")
    put = ("PUT", f"/internal/jobs/{job_id}/traces/{name}?attempt=1", _routes(job_id)[4][2])
    assert _call(client, token, *put).status_code == 204
    heartbeat, bundle, _, failure, _ = _routes(job_id)
    for route in (heartbeat, bundle, failure):
        assert _call(client, token, *route).status_code == 409, route[1]  # the attempt is no longer running
    row = db.get(Job, job_id)
    db.refresh(row)
    assert row.job_token_expires_at is not None
    window_s = (row.job_token_expires_at - row.updated_at).total_seconds()
    assert abs(window_s - attempts.TRACE_UPLOAD_S) < 60
    row.job_token_expires_at = utcnow() - timedelta(seconds=1)
    db.commit()
    assert _call(client, token, *put).status_code == 401


def test_worker_of_another_testbed_gets_404(client, tenant, worker_token, db) -> None:
    from service.auth import service as auth
    from service.testbeds import service as testbeds

    job_id = _post(client, tenant, worker_token[0]).json()["id"]
    secret = claim_secret(REDIS_URL, worker_token[0], job_id)
    _messages(f"profile.{worker_token[0]}")
    tb = testbeds.ensure(db, "elsewhere-tb")
    wtok = auth.create_worker_token(db, testbed_id=tb.id)[1]
    db.commit()
    body = {"attempt": 1, "worker": "x", "secret": secret}
    assert client.post(f"/internal/jobs/{job_id}/claim", json=body, headers=bearer(wtok)).status_code == 404
    assert client.post(f"/internal/jobs/{job_id}/claim", json=body, headers=tenant.h("admin")).status_code == 403


def test_cancel_list_and_heartbeat_says_cancelled(client, tenant, worker_token) -> None:
    testbed, wtok = worker_token
    ids = [_post(client, tenant, testbed, pr="7").json()["id"] for _ in range(3)]
    token = claim(client, wtok, ids[0], claim_secret(REDIS_URL, testbed, ids[0]))["token"]
    _messages(f"profile.{testbed}")
    assert client.post(f"/api/v1/jobs/{ids[0]}/cancel", headers=tenant.h("read")).status_code == 403
    assert client.post(f"/api/v1/jobs/{ids[0]}/cancel", headers=tenant.h("submit")).status_code == 200
    assert client.post(f"/api/v1/jobs/{ids[0]}/cancel", headers=tenant.h("submit")).status_code == 409
    hb = client.post(f"/internal/jobs/{ids[0]}/heartbeat", json={"attempt": 1}, headers=bearer(token)).json()
    assert hb["cancelled"] is True
    # The cancelled attempt's token tells its heartbeat so, and opens nothing else.
    for method, url, kw in _routes(ids[0])[1:]:
        assert _call(client, token, method, url, kw).status_code == 401, url
    page = client.get(f"/api/v1/projects/{tenant.name}/jobs?limit=2&pr=7", headers=tenant.h("read")).json()
    assert len(page["jobs"]) == 2 and page["next"]
    rest = client.get(
        f"/api/v1/projects/{tenant.name}/jobs?limit=2&pr=7&cursor={page['next']}", headers=tenant.h("read")
    ).json()
    assert {j["id"] for j in page["jobs"] + rest["jobs"]} == set(ids) and rest["next"] is None
    q = client.get(f"/api/v1/projects/{tenant.name}/jobs?status=cancelled", headers=tenant.h("read")).json()
    assert [j["id"] for j in q["jobs"]] == [ids[0]]
    assert client.get(f"/api/v1/projects/{tenant.name}/jobs?cursor=zz", headers=tenant.h("read")).status_code == 400


def test_failure_retries_then_fails(client, tenant, worker_token) -> None:
    testbed, wtok = worker_token
    job_id = _post(client, tenant, testbed).json()["id"]
    secrets = []
    for attempt in (1, 2, 3):
        secrets.append(claim_secret(REDIS_URL, testbed, job_id, attempt=attempt))
        token = claim(client, wtok, job_id, secrets[-1], attempt=attempt, worker="h")["token"]
        r = client.post(
            f"/internal/jobs/{job_id}/failure",
            json={"attempt": attempt, "reason": "GPU lost", "retry": True},
            headers=bearer(token),
        )
        assert r.status_code == 200
    assert r.json()["status"] == "failed" and r.json()["reason"] == "GPU lost"
    assert len(_messages(f"profile.{testbed}")) == 3
    assert len(set(secrets)) == 3  # each message its own secret


LEASE_COLUMNS = {"lease_expires_at", "claim_secret_sha256", "job_token_sha256", "job_token_expires_at"}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_migration_0005_adds_the_lease_and_claim_columns_and_its_downgrade_drops_them(tmp_path, backend) -> None:
    name, url = create_database() if backend == "postgresql" else ("", f"sqlite:///{tmp_path / 'jobs.db'}")
    engine = make_engine(url)
    try:
        migrate.upgrade(url, "0004")
        assert not LEASE_COLUMNS & {c["name"] for c in inspect(engine).get_columns("jobs")}
        migrate.upgrade(url, "0005")
        inspected = inspect(engine)
        assert {c["name"] for c in inspected.get_columns("jobs")} >= LEASE_COLUMNS
        assert "ix_jobs_lease" in {i["name"] for i in inspected.get_indexes("jobs")}
        migrate.downgrade(url, "0004")
        inspected = inspect(engine)
        assert not LEASE_COLUMNS & {c["name"] for c in inspected.get_columns("jobs")}
        assert "ix_jobs_lease" not in {i["name"] for i in inspected.get_indexes("jobs")}
    finally:
        engine.dispose()
        if name:
            drop_database(name)
