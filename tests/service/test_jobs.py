from __future__ import annotations

import base64
import io
import json
import tarfile

import redis
import svcdocs as docs
from conftest import REDIS_URL
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from svcconf import Tenant

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
    args = json.loads(base64.b64decode(msgs[0]["body"]))[0]
    assert args == [job_id, 1]
    assert db.get(Job, job_id).status == "queued"


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


def test_worker_lifecycle_result_is_idempotent(client, tenant, worker_token, other, settings, db) -> None:
    testbed, wtok = worker_token
    w = {"Authorization": f"Bearer {wtok}"}
    sent = _bundle()
    job_id = _post(client, tenant, testbed, bundle=sent).json()["id"]
    _messages(f"profile.{testbed}")
    assert (
        client.post(f"/internal/jobs/{job_id}/claim", json={"attempt": 2, "worker": "h0"}, headers=w).status_code == 409
    )
    r = client.post(f"/internal/jobs/{job_id}/claim", json={"attempt": 1, "worker": "h0"}, headers=w)
    assert r.status_code == 200 and r.json()["spec"] == SPEC
    assert (
        client.post(f"/internal/jobs/{job_id}/claim", json={"attempt": 1, "worker": "h1"}, headers=w).status_code == 409
    )
    assert client.get(f"/internal/jobs/{job_id}/bundle", headers=w).content == sent
    hb = client.post(f"/internal/jobs/{job_id}/heartbeat", json={"attempt": 1}, headers=w)
    assert hb.json() == {"status": "running", "cancelled": False}
    doc = docs.h200()
    r1 = client.post(f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": doc}, headers=w)
    r2 = client.post(f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": doc}, headers=w)
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


def test_worker_of_another_testbed_gets_404(client, tenant, worker_token, db) -> None:
    from service.auth import service as auth
    from service.testbeds import service as testbeds

    job_id = _post(client, tenant, worker_token[0]).json()["id"]
    _messages(f"profile.{worker_token[0]}")
    tb = testbeds.ensure(db, "elsewhere-tb")
    wtok = auth.create_worker_token(db, testbed_id=tb.id)[1]
    db.commit()
    r = client.post(
        f"/internal/jobs/{job_id}/claim",
        json={"attempt": 1, "worker": "x"},
        headers={"Authorization": f"Bearer {wtok}"},
    )
    assert r.status_code == 404
    assert (
        client.post(
            f"/internal/jobs/{job_id}/claim", json={"attempt": 1, "worker": "x"}, headers=tenant.h("admin")
        ).status_code
        == 403
    )


def test_cancel_list_and_heartbeat_says_cancelled(client, tenant, worker_token) -> None:
    testbed, wtok = worker_token
    w = {"Authorization": f"Bearer {wtok}"}
    ids = [_post(client, tenant, testbed, pr="7").json()["id"] for _ in range(3)]
    _messages(f"profile.{testbed}")
    client.post(f"/internal/jobs/{ids[0]}/claim", json={"attempt": 1, "worker": "h"}, headers=w)
    assert client.post(f"/api/v1/jobs/{ids[0]}/cancel", headers=tenant.h("read")).status_code == 403
    assert client.post(f"/api/v1/jobs/{ids[0]}/cancel", headers=tenant.h("submit")).status_code == 200
    assert client.post(f"/api/v1/jobs/{ids[0]}/cancel", headers=tenant.h("submit")).status_code == 409
    hb = client.post(f"/internal/jobs/{ids[0]}/heartbeat", json={"attempt": 1}, headers=w).json()
    assert hb["cancelled"] is True
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
    w = {"Authorization": f"Bearer {wtok}"}
    job_id = _post(client, tenant, testbed).json()["id"]
    for attempt in (1, 2, 3):
        assert (
            client.post(
                f"/internal/jobs/{job_id}/claim", json={"attempt": attempt, "worker": "h"}, headers=w
            ).status_code
            == 200
        )
        r = client.post(
            f"/internal/jobs/{job_id}/failure",
            json={"attempt": attempt, "reason": "GPU lost", "retry": True},
            headers=w,
        )
        assert r.status_code == 200
    assert r.json()["status"] == "failed" and r.json()["reason"] == "GPU lost"
    assert len(_messages(f"profile.{testbed}")) == 3
