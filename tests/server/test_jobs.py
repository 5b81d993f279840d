from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import uuid
from datetime import timedelta

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import inspect
from sqlalchemy.orm import Session

from attnprof.contract.provenance import Provenance
from attnprof.server import migrate
from attnprof.server.config import Fairness, Limits
from attnprof.server.db import make_engine, utcnow
from attnprof.server.jobs import attempts, dispatch
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import OFFERED_SQL, Job
from tests.claiming import bearer, claim, claim_secret
from tests.pgtest import create_database, drop_database
from tests.server import documents as docs
from tests.server.documents import SPEC
from tests.server.stack import REDIS_URL
from tests.server.tenants import Tenant


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


def _args(message: dict) -> list:
    """The task arguments of a Celery protocol-2 message as kombu stores it in Redis."""
    return json.loads(base64.b64decode(message["body"]))[0]


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
    # One analysis message for this job; the queue is shared by the tests' Redis database, so others are not counted.
    assert sum(_args(m) == [job_id] for m in _messages("analysis")) == 1
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
    from attnprof.server.auth import service as auth
    from attnprof.server.testbeds import service as testbeds

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


# --- fair dispatch: the database is the queue ---------------------------------------------------------------


def _alive(client, worker_token: tuple[str, str], *names: str) -> None:
    """Say that workers ``names`` of the worker token's testbed are alive, as their liveness threads do."""
    testbed, wtok = worker_token
    for name in names:
        r = client.post("/internal/alive", json={"worker": name, "testbed": testbed}, headers=bearer(wtok))
        assert r.status_code == 200, r.text


def _job_ids(db: Session, tenant: Tenant) -> set[str]:
    from sqlalchemy import select

    from attnprof.server.projects.models import Project

    return set(
        db.scalars(select(Job.id).join(Project, Project.id == Job.project_id).where(Project.name == tenant.name))
    )


def test_a_testbed_is_offered_one_job_per_free_live_worker_at_least_one(client, tenant, worker_token, db) -> None:
    """Jobs wait in the database; the broker gets a message for as many as the testbed has live workers free (one
    when none is live), and a claim, a result or a failure lets the next one go."""
    testbed, wtok = worker_token
    ids = [_post(client, tenant, testbed, commit=f"c{i}").json()["id"] for i in range(4)]
    (first,) = _profile_args(testbed)
    assert first[0] == ids[0]  # no live worker: one job offered, the others wait (no message, no secret)
    waiting = [db.get(Job, i) for i in ids[1:]]
    assert all(j.status == "queued" and j.offered_at is None and j.claim_secret_sha256 is None for j in waiting)
    _alive(client, worker_token, "w1", "w2")  # two live workers, none busy: one more is offered
    assert [m[0] for m in _profile_args(testbed)] == [ids[1]]
    token = claim(client, wtok, ids[0], first[2])["token"]
    assert _profile_args(testbed) == []  # one running, one offered: the two workers are spoken for
    done = client.post(
        f"/internal/jobs/{ids[0]}/result", json={"attempt": 1, "result": docs.h200()}, headers=bearer(token)
    )
    assert done.status_code == 200, done.text
    _messages("analysis")
    assert [m[0] for m in _profile_args(testbed)] == [ids[2]]  # its worker is free again


def _profile_args(testbed: str) -> list[list]:
    """The args of the profile messages on the testbed's queue, oldest first; the queue is emptied."""
    return [json.loads(base64.b64decode(m["body"]))[0] for m in reversed(_messages(f"profile.{testbed}"))]


def test_a_project_past_its_queue_limit_gets_a_429_naming_it_and_nothing_is_stored(
    client, tenant, other, worker_token, settings, db
) -> None:
    from sqlalchemy import func, select

    from attnprof.server.artifacts.models import Artifact

    settings.fairness.max_queued = 2
    testbed, wtok = worker_token
    ids = [_post(client, tenant, testbed, commit=f"c{i}").json()["id"] for i in range(2)]
    secret = claim_secret(REDIS_URL, testbed, ids[0])
    _messages(f"profile.{testbed}")
    artifacts = db.scalar(select(func.count()).select_from(Artifact))
    r = _post(client, tenant, testbed, commit="c9", bundle=_bundle({"never/stored.py": b"y = 2\n"}))
    assert r.status_code == 429, r.text
    assert r.json() == {
        "error": "queue_full",
        "detail": f"project {tenant.name} has 2 queued jobs, its limit (ATTNPROF_FAIRNESS__MAX_QUEUED = 2): "
        "nothing was stored; submit again once some have started, or cancel some",
    }
    assert r.headers["Retry-After"] == "60"
    assert _job_ids(db, tenant) == set(ids)  # no job, no bundle, no message
    assert db.scalar(select(func.count()).select_from(Artifact)) == artifacts
    assert _messages(f"profile.{testbed}") == []
    assert _post(client, other, testbed).status_code == 202  # another project has a queue of its own
    claim(client, wtok, ids[0], secret)  # a running job is no longer queued: room for one more
    assert _post(client, tenant, testbed, commit="c10").status_code == 202
    assert _post(client, tenant, testbed, commit="c11").status_code == 429


def test_a_newer_push_to_a_pull_request_cancels_its_earlier_commits_queued_and_running_jobs(
    client, tenant, other, worker_token, db
) -> None:
    testbed, wtok = worker_token
    _alive(client, worker_token, *(f"w{i}" for i in range(8)))
    running = _post(client, tenant, testbed, pr="7", commit="c1").json()["id"]
    token = claim(client, wtok, running, claim_secret(REDIS_URL, testbed, running))["token"]
    queued = _post(client, tenant, testbed, pr="7", commit="c1").json()["id"]
    queued_secret = claim_secret(REDIS_URL, testbed, queued)
    kept = {
        "no pr": _post(client, tenant, testbed, commit="c1").json()["id"],
        "other pr": _post(client, tenant, testbed, pr="8", commit="c1").json()["id"],
        "other repo": _post(client, tenant, testbed, pr="7", commit="c1", repo="o/fork").json()["id"],
        "other project": _post(client, other, testbed, pr="7", commit="c1").json()["id"],
    }
    _messages(f"profile.{testbed}")
    newer = _post(client, tenant, testbed, pr="7", commit="c2")
    assert newer.status_code == 202, newer.text
    why = f"superseded by commit c2 (job {newer.json()['id']}), a newer push to pull request #7"
    for job_id in (running, queued):
        job = client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()
        assert (job["status"], job["reason"]) == ("cancelled", why), job
    for what, job_id in kept.items():
        assert db.get(Job, job_id).status == "queued", what
    # The running attempt's worker hears it from its heartbeat, as with a user's cancel; the queued job's message
    # claims nothing.
    hb = client.post(f"/internal/jobs/{running}/heartbeat", json={"attempt": 1}, headers=bearer(token))
    assert hb.json() == {"status": "cancelled", "cancelled": True}
    again = {"attempt": 1, "worker": "w", "secret": queued_secret}
    assert client.post(f"/internal/jobs/{queued}/claim", json=again, headers=bearer(wtok)).status_code == 409
    # The same commit pushed again (a rerun) supersedes nothing.
    assert _post(client, tenant, testbed, pr="7", commit="c2").status_code == 202
    assert db.get(Job, newer.json()["id"]).status == "queued"


def test_superseding_is_a_setting(client, tenant, worker_token, settings, db) -> None:
    settings.fairness.cancel_superseded = False
    first = _post(client, tenant, worker_token[0], pr="9", commit="c1").json()["id"]
    assert _post(client, tenant, worker_token[0], pr="9", commit="c2").status_code == 202
    assert db.get(Job, first).status == "queued"


def test_a_queued_job_says_when_no_live_worker_serves_its_testbed(client, tenant, worker_token, db) -> None:
    from sqlalchemy import update

    from attnprof.server.testbeds.models import Worker

    testbed, wtok = worker_token
    job_id = _post(client, tenant, testbed).json()["id"]
    secret = claim_secret(REDIS_URL, testbed, job_id)
    _messages(f"profile.{testbed}")

    def notice() -> str | None:
        r = client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read"))
        listed = client.get(f"/api/v1/projects/{tenant.name}/jobs", headers=tenant.h("read")).json()["jobs"]
        assert [j["notice"] for j in listed if j["id"] == job_id] == [r.json()["notice"]]
        return r.json()["notice"]

    assert notice() == f"no worker has ever served testbed {testbed}: the job waits in the queue until one starts"
    _alive(client, worker_token, "host/pid1")
    assert notice() is None
    db.execute(update(Worker).values(last_seen_at=utcnow() - timedelta(seconds=300)))
    db.commit()
    assert notice() == (
        f"no live worker has served testbed {testbed} for 300 s: the job waits in the queue until one starts"
    )
    assert claim(client, wtok, job_id, secret)["token"] and notice() is None  # only a queued job waits


def test_the_alive_route_takes_its_own_testbed_only(client, tenant, worker_token) -> None:
    testbed, wtok = worker_token
    r = client.post("/internal/alive", json={"worker": "h/pid1", "testbed": testbed}, headers=bearer(wtok))
    assert r.status_code == 200 and r.json() == {"testbed": testbed, "live_workers": 1, "live_s": 30.0}
    r = client.post("/internal/alive", json={"worker": "h/pid2", "testbed": testbed}, headers=bearer(wtok))
    assert r.json()["live_workers"] == 2
    wrong = client.post("/internal/alive", json={"worker": "h/pid1", "testbed": "elsewhere"}, headers=bearer(wtok))
    assert wrong.status_code == 409
    assert wrong.json()["detail"] == f"testbed: this worker token serves testbed {testbed!r}, not 'elsewhere'"
    assert (
        client.post("/internal/alive", json={"worker": "x", "testbed": testbed}, headers=tenant.h()).status_code == 403
    )
    bad = client.post("/internal/alive", json={"worker": "", "testbed": testbed}, headers=bearer(wtok))
    assert bad.status_code == 422 and "worker" in json.dumps(bad.json()["detail"])


def test_fairness_settings_refuse_a_live_period_shorter_than_two_reports() -> None:
    from pydantic import ValidationError

    from attnprof.server.config import Fairness

    with pytest.raises(ValidationError, match=r"worker_live_s \(3\) must be at least twice worker_alive_s \(2\)"):
        Fairness(worker_alive_s=2, worker_live_s=3)
    with pytest.raises(ValidationError, match="max_running"):
        Fairness(max_running=0)


def _waiting_job(db: Session, project_id: int, testbed: str, commit: str = "c") -> Job:
    job, _ = jobs.create(
        db,
        project_id=project_id,
        new=jobs.NewJob(spec=SPEC, testbed=testbed, provenance=Provenance(branch="main", commit=commit)),
        limits=Limits(),
        max_attempts=3,
    )
    db.flush()
    return job


def _offered(db: Session, testbed_id: int, now, cfg=None) -> list[str]:
    return [m.job_id for m in dispatch.offer(db, testbed_id=testbed_id, cfg=cfg or Fairness(), now=now)]


def test_the_dispatcher_serves_the_project_with_fewest_jobs_in_flight_then_the_one_served_longest_ago(db) -> None:
    from attnprof.server.projects import service as projects
    from attnprof.server.testbeds import repository as testbed_rows
    from attnprof.server.testbeds import service as testbeds

    now = utcnow()
    tb = testbeds.ensure(db, f"tb-{uuid.uuid4().hex[:8]}")
    flood, lone = (projects.create(db, name=f"p-{uuid.uuid4().hex[:8]}") for _ in range(2))
    many = [_waiting_job(db, flood.id, tb.name) for _ in range(6)]
    one = _waiting_job(db, lone.id, tb.name)
    for name in ("w1", "w2"):
        testbed_rows.worker_seen(db, testbed_id=tb.id, name=name, now=now)
    # Two workers free: the flood's oldest job, then the lone project's (it has none in flight), not the flood's next.
    assert _offered(db, tb.id, now) == [many[0].id, one.id]
    assert _offered(db, tb.id, now) == []  # the window is full
    for job in (many[0], one):
        job.status = "running"
    # Both workers busy: one more is offered, to wait for the next that is free (the lone project has none waiting).
    t1, t2 = now + timedelta(seconds=1), now + timedelta(seconds=2)
    assert _offered(db, tb.id, t1) == [many[1].id]
    two = _waiting_job(db, lone.id, tb.name)  # the lone project submits again: the window is full
    assert _offered(db, tb.id, t1) == []
    many[0].status, many[1].status = "done", "running"  # a worker finished, and took the job offered
    # One job in flight each: the lone project was served longer ago than the flood, and goes first.
    assert _offered(db, tb.id, t2) == [two.id]
    for job in (one, many[1], two):
        job.status = "done"
    assert _offered(db, tb.id, t2) == [many[2].id, many[3].id]
    # A project at its limit of jobs running or offered on the testbed is skipped however many workers are free.
    for name in ("w3", "w4", "w5"):
        testbed_rows.worker_seen(db, testbed_id=tb.id, name=name, now=now)
    assert _offered(db, tb.id, t2, Fairness(max_running=3)) == [many[4].id]
    assert _offered(db, tb.id, t2, Fairness(max_running=3)) == []


def test_among_equals_the_project_served_longest_ago_goes_first_not_the_oldest_job(db) -> None:
    from attnprof.server.projects import service as projects
    from attnprof.server.testbeds import service as testbeds

    now = utcnow()
    tb = testbeds.ensure(db, f"tb-{uuid.uuid4().hex[:8]}")
    a, b = (projects.create(db, name=f"p-{uuid.uuid4().hex[:8]}") for _ in range(2))
    a_jobs = [_waiting_job(db, a.id, tb.name) for _ in range(3)]
    b_job = _waiting_job(db, b.id, tb.name)  # newer than all of a's
    assert _offered(db, tb.id, now) == [a_jobs[0].id]  # no live worker: one at a time
    a_jobs[0].status = "done"
    # Neither has a job in flight; a was served, b never: b's job goes before a's older ones (round-robin, not FIFO).
    assert _offered(db, tb.id, now + timedelta(seconds=1)) == [b_job.id]


def test_two_dispatchers_at_once_never_offer_more_than_the_window(tmp_path) -> None:
    """Two sessions (two server processes) dispatch one testbed at once on a real Postgres: the second waits for
    the first's commit and then sees its offers; eight at once offer the window between them, no more."""
    import threading

    from sqlalchemy import func, select, text

    from attnprof.server.db import make_sessionmaker
    from attnprof.server.projects import service as projects
    from attnprof.server.testbeds import repository as testbed_rows
    from attnprof.server.testbeds import service as testbeds

    name, url = create_database()
    engine = make_engine(url)
    try:
        migrate.upgrade(url)
        factory = make_sessionmaker(engine)
        now = utcnow()
        with factory() as s:
            tb = testbeds.ensure(s, "tb-race")
            project = projects.create(s, name="race")
            for i in range(30):
                _waiting_job(s, project.id, tb.name, commit=f"c{i}")
            for w in ("w1", "w2"):
                testbed_rows.worker_seen(s, testbed_id=tb.id, name=w, now=now)
            s.commit()
            tb_id, project_id = tb.id, project.id
        cfg = Fairness(max_running=100)

        def offered_rows() -> int:
            with factory() as s:
                return int(s.scalar(select(func.count()).select_from(Job).where(text(OFFERED_SQL))) or 0)

        first = factory()
        assert len(dispatch.offer(first, testbed_id=tb_id, cfg=cfg, now=now)) == 2  # holds the lock, uncommitted
        second: list[int] = []

        def other_process() -> None:
            with factory() as s:
                second.append(len(dispatch.offer(s, testbed_id=tb_id, cfg=cfg, now=now)))
                s.commit()

        racer = threading.Thread(target=other_process)
        racer.start()
        racer.join(1.0)
        assert racer.is_alive() and not second  # waiting for the first dispatcher's lock
        first.commit()
        first.close()
        racer.join(10)
        assert second == [0] and offered_rows() == 2

        # The two offers are claimed, two more workers appear: a window of two again, and eight dispatchers race.
        with factory() as s:
            s.execute(text("UPDATE jobs SET status = 'running' WHERE " + OFFERED_SQL))
            for w in ("w3", "w4"):
                testbed_rows.worker_seen(s, testbed_id=tb_id, name=w, now=now)
            s.commit()
        start = threading.Barrier(8)
        counts: list[int] = []

        def race() -> None:
            with factory() as s:
                start.wait()
                counts.append(len(dispatch.offer(s, testbed_id=tb_id, cfg=cfg, now=now)))
                s.commit()

        threads = [threading.Thread(target=race) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(counts) == [0] * 7 + [2], counts  # the first to hold the lock fills the window
        assert offered_rows() == 2

        # A submission that read no room skips the dispatch after its commit: a dispatch that starts before that
        # commit (a slot freed meanwhile) waits for it, and sees the job.
        with factory() as s:
            s.execute(text("UPDATE jobs SET status = 'done' WHERE status IN ('running', 'queued')"))
            s.commit()
        submitting = factory()
        late = _waiting_job(submitting, project_id, "tb-race", commit="late").id  # inserted, not committed
        freed: list[list[str]] = []

        def slot_freed() -> None:
            with factory() as s:
                freed.append([m.job_id for m in dispatch.offer(s, testbed_id=tb_id, cfg=cfg, now=now)])
                s.commit()

        racer = threading.Thread(target=slot_freed)
        racer.start()
        racer.join(1.0)
        assert racer.is_alive() and not freed  # waiting for the submission's transaction
        submitting.commit()
        submitting.close()
        racer.join(10)
        assert freed == [[late]]
    finally:
        engine.dispose()
        drop_database(name)


FAIR_COLUMNS = {("jobs", "offered_at"), ("testbeds", "dispatched_at")}
FAIR_INDEXES = {"ix_jobs_waiting", "ix_jobs_offered", "ix_jobs_offers", "ix_jobs_queued_project", "ix_jobs_open_pr"}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_migration_0007_counts_messaged_jobs_as_offered_and_its_downgrade_drops_what_it_added(
    tmp_path, backend
) -> None:
    from sqlalchemy import text

    name, url = create_database() if backend == "postgresql" else ("", f"sqlite:///{tmp_path / 'jobs.db'}")
    engine = make_engine(url)

    def columns() -> set[tuple[str, str]]:
        inspected = inspect(engine)
        return {(t, c["name"]) for t in ("jobs", "testbeds") for c in inspected.get_columns(t)}

    try:
        migrate.upgrade(url, "0006")
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO projects (id, name, default_branch, created_at) VALUES (1, 'p', 'main', :t)"),
                {"t": utcnow()},
            )
            conn.execute(text("INSERT INTO testbeds (id, name, created_at) VALUES (1, 'tb', :t)"), {"t": utcnow()})
            for job_id, secret in (("messaged", "ab" * 32), ("never", None)):
                conn.execute(
                    text(
                        'INSERT INTO jobs (id, project_id, testbed_id, spec, suite_name, branch, "commit", ancestors,'
                        " status, attempts, max_attempts, created_at, updated_at, feedback_attempts,"
                        " claim_secret_sha256) VALUES (:id, 1, 1, 's', 's', 'main', 'c', '[]', 'queued', 0, 3, :t, :t,"
                        " 0, :secret)"
                    ),
                    {"id": job_id, "t": utcnow() - timedelta(minutes=5), "secret": secret},
                )
        assert not FAIR_COLUMNS & columns()
        migrate.upgrade(url, "0007")
        assert columns() >= FAIR_COLUMNS
        assert {i["name"] for i in inspect(engine).get_indexes("jobs")} >= FAIR_INDEXES
        assert "workers" in inspect(engine).get_table_names()
        with engine.connect() as conn:
            rows = dict(conn.execute(text("SELECT id, offered_at IS NOT NULL FROM jobs")).all())
        assert {k: bool(v) for k, v in rows.items()} == {"messaged": True, "never": False}
        migrate.downgrade(url, "0006")
        assert not FAIR_COLUMNS & columns()
        assert not FAIR_INDEXES & {i["name"] for i in inspect(engine).get_indexes("jobs")}
        assert "workers" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
        if name:
            drop_database(name)
