"""A testbed's key and meaning are its workers' word: the first worker to start keys it (``POST /internal/testbed/key``,
worker token only), and a result document, an upload's or a job's, never changes them. A document measured on
another key than its testbed's is refused, naming both, and changes nothing; a testbed no worker has keyed takes
runs as what they claim and stays keyless."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from attnprof.contract.worker_api import WorkerTestbed
from attnprof.core import testbed as keys
from attnprof.server.auth import service as auth
from attnprof.server.jobs.models import Job
from attnprof.server.runs.models import Run
from attnprof.server.testbeds import models as testbed_models
from attnprof.server.testbeds import repository as testbed_rows
from attnprof.server.testbeds import service as testbeds
from attnprof.worker.profile import device as gpus
from attnprof.worker.profile.device import LocalDevice
from tests.claiming import bearer, claim, claim_secret
from tests.server import documents as docs
from tests.server.stack import REDIS_URL
from tests.server.tenants import Tenant

# The device of the committed CPU run (tests/data/service/cpu-run-1.json), as its worker would probe it.
CPU = LocalDevice(mode="cpu", name="AMD EPYC", driver=None, threads=2)
FORGED = {"device": "FORGED-GPU", "driver": "999.1", "mode": "cuda"}


def _measured_on(meaning: dict[str, str]) -> dict[str, Any]:
    """The committed CPU run (a new run id) as if measured on ``meaning``: what a forger writes."""
    doc = docs.cpu()
    doc["environment"]["testbed"] = dict(meaning)
    doc["environment"]["testbed_key"] = keys.testbed_key(meaning)
    return doc


def _register(client: TestClient, token: str, meaning: dict[str, str], key: str | None = None) -> Any:
    body = {"key": key or keys.testbed_key(meaning), "meaning": meaning}
    return client.post("/internal/testbed/key", json=body, headers=bearer(token))


def _testbed(db: Session, name: str) -> testbed_models.Testbed:
    db.expire_all()
    found = testbed_rows.get_by_name(db, name)
    assert found is not None
    return found


def _upload(client: TestClient, tenant: Tenant, doc: dict[str, Any], **kw: Any) -> Any:
    url = f"/api/v1/projects/{tenant.name}/results"
    return client.post(url, json=docs.upload_body(doc, **kw), headers=tenant.h("submit"))


def _runs(client: TestClient, tenant: Tenant) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = client.get(f"/api/v1/projects/{tenant.name}/runs", headers=tenant.h()).json()["runs"]
    return runs


def test_the_first_worker_keys_its_testbed_the_next_matches_and_another_device_is_refused(
    client: TestClient, worker_token: tuple[str, str], tenant: Tenant, db: Session
) -> None:
    name, wtok = worker_token
    assert client.get("/internal/testbed", headers=bearer(wtok)).json() == {"name": name, "key": None, "meaning": None}

    first = _register(client, wtok, CPU.meaning())
    assert first.status_code == 200, first.text
    assert first.json() == {"name": name, "key": CPU.key(), "meaning": CPU.meaning(), "keyed": True}
    again = _register(client, wtok, CPU.meaning())  # a second worker of the testbed, on the same device
    assert again.status_code == 200 and again.json()["keyed"] is False

    other = _register(client, wtok, FORGED)
    assert other.status_code == 409, other.text
    assert other.json()["detail"] == (
        f"this worker's device does not match testbed {name}: the testbed is device AMD EPYC, driver none, mode cpu, "
        f"threads 2 (key {CPU.key()}); this worker's device is device FORGED-GPU, driver 999.1, mode cuda "
        f"(key {keys.testbed_key(FORGED)})"
    )
    # A key that is not the hash of its meaning, and a token that is not this testbed's worker's, key nothing.
    lying = _register(client, wtok, FORGED, key=CPU.key())
    assert lying.status_code == 422 and lying.json()["detail"].startswith(f"key: {CPU.key()} is not the testbed key")
    body = {"key": keys.testbed_key(FORGED), "meaning": FORGED}
    assert client.post("/internal/testbed/key", json=body, headers=tenant.h("admin")).status_code == 403
    assert client.post("/internal/testbed/key", json=body).status_code == 401
    tb = _testbed(db, name)
    assert (tb.key, tb.meaning) == (CPU.key(), CPU.meaning())
    answer = client.get("/internal/testbed", headers=bearer(wtok)).json()
    assert answer == {"name": name, "key": CPU.key(), "meaning": CPU.meaning()}


def test_a_forged_upload_is_refused_and_the_next_worker_of_the_testbed_still_starts(
    client: TestClient, worker_token: tuple[str, str], tenant: Tenant, db: Session
) -> None:
    name, wtok = worker_token
    assert _register(client, wtok, CPU.meaning()).json()["keyed"] is True

    forged = _upload(client, tenant, _measured_on(FORGED), testbed=name)
    assert forged.status_code == 422, forged.text
    assert forged.json() == {
        "error": "invalid_payload",
        "detail": f"environment.testbed_key: this document was measured on key {keys.testbed_key(FORGED)} (device "
        f"FORGED-GPU, driver 999.1, mode cuda); testbed {name} is key {CPU.key()} (device AMD EPYC, driver none, "
        "mode cpu, threads 2), set by its workers: a testbed takes runs measured on its own device only",
    }
    tb = _testbed(db, name)
    assert (tb.key, tb.meaning) == (CPU.key(), CPU.meaning())
    assert _runs(client, tenant) == []

    # The next worker of the testbed to start: the testbed as the service answers it, checked against its device
    # as the worker checks it, then its registration.
    found = client.get("/internal/testbed", headers=bearer(wtok)).json()
    assert gpus.check(WorkerTestbed.model_validate(found), CPU) == (
        f"CPU AMD EPYC, 2 threads: testbed key {CPU.key()} matches"
    )
    assert _register(client, wtok, CPU.meaning()).json() == {**found, "keyed": False}

    # A run measured on the testbed's device is taken.
    honest = _upload(client, tenant, docs.cpu(), testbed=name)
    assert honest.status_code == 201, honest.text
    assert honest.json()["testbed"] == name


def test_an_upload_naming_no_testbed_never_keys_one(
    client: TestClient, worker_token: tuple[str, str], tenant: Tenant, db: Session
) -> None:
    name, wtok = worker_token
    _register(client, wtok, CPU.meaning())
    # A run of the testbed's key goes to that testbed; one of another key to a testbed named after its key, which it
    # does not key either.
    went = _upload(client, tenant, docs.cpu()).json()["testbed"]
    assert _testbed(db, went).key == CPU.key()
    forged_key = keys.testbed_key(FORGED)
    assert _upload(client, tenant, _measured_on(FORGED)).json()["testbed"] == forged_key
    assert _testbed(db, forged_key).key is None
    assert (_testbed(db, name).key, _testbed(db, name).meaning) == (CPU.key(), CPU.meaning())


def test_a_testbed_no_worker_has_keyed_takes_runs_as_they_claim_and_stays_keyless(
    client: TestClient, tenant: Tenant, db: Session
) -> None:
    name = "tb-no-worker-yet"
    first = _upload(client, tenant, _measured_on(FORGED), testbed=name)
    assert first.status_code == 201, first.text
    assert _upload(client, tenant, docs.cpu(), testbed=name).status_code == 201
    tb = _testbed(db, name)
    assert (tb.key, tb.meaning) == (None, None)
    stored = {db.get(Run, r["id"]).testbed_key for r in _runs(client, tenant)}  # type: ignore[union-attr]
    assert stored == {keys.testbed_key(FORGED), CPU.key()}  # each run as it claims

    # Its first worker keys it with its own device, whatever the uploads claimed; from then on it takes that key only.
    wtok = auth.create_worker_token(db, testbed_id=tb.id)[1]
    db.commit()
    assert _register(client, wtok, CPU.meaning()).json()["keyed"] is True
    refused = _upload(client, tenant, _measured_on(FORGED), testbed=name)
    assert refused.status_code == 422 and f"testbed {name} is key {CPU.key()}" in refused.json()["detail"]
    assert _upload(client, tenant, docs.cpu(), testbed=name).status_code == 201


def _claimed_job(client: TestClient, tenant: Tenant, worker_token: tuple[str, str]) -> tuple[str, str]:
    """A job of ``tenant`` on the worker token's testbed, claimed: (its id, the attempt's job token)."""
    testbed, wtok = worker_token
    r = client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", docs.SPEC.encode())},
        data={"testbed": testbed, "branch": "feature", "commit": "abc123", "repo": "o/r"},
        headers=tenant.h("submit"),
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    secret = claim_secret(REDIS_URL, testbed, job_id)
    _drop_messages(testbed, job_id)
    return job_id, claim(client, wtok, job_id, secret)["token"]


def _drop_messages(testbed: str, job_id: str) -> None:
    """Remove the job's messages from its testbed's queue and the analysis queue (shared by the tests' Redis)."""
    r = redis.Redis.from_url(REDIS_URL)
    try:
        for queue in (f"profile.{testbed}", "analysis"):
            for raw in r.lrange(queue, 0, -1):
                if job_id in json.dumps(json.loads(raw)):
                    r.lrem(queue, 0, raw)
    finally:
        r.close()


class _Sent(list[str]):
    """The app's GitHub feedback sender, recording the jobs it is asked to deliver for."""

    def __call__(self, job_ids: Sequence[str]) -> None:
        self.extend(job_ids)

    def runs(self, run_ids: Sequence[str]) -> None:
        pass


def test_a_jobs_forged_document_fails_the_job_and_leaves_the_testbed(
    client: TestClient, worker_token: tuple[str, str], tenant: Tenant, db: Session
) -> None:
    name, wtok = worker_token
    sent_feedback = client.app.state.send_feedback = _Sent()  # type: ignore[attr-defined]
    _register(client, wtok, CPU.meaning())
    job_id, token = _claimed_job(client, tenant, worker_token)
    sent_feedback.clear()  # its pending status, sent as it was queued

    sent = client.post(
        f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": _measured_on(FORGED)}, headers=bearer(token)
    )
    assert sent.status_code == 422, sent.text
    mismatch = (
        f"environment.testbed_key: this document was measured on key {keys.testbed_key(FORGED)} (device FORGED-GPU, "
        f"driver 999.1, mode cuda); testbed {name} is key {CPU.key()}"
    )
    assert sent.json()["detail"].startswith(mismatch)
    job = client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()
    assert job["status"] == "failed" and job["run_id"] is None
    assert job["reason"].startswith(f"the result document was refused: {mismatch}")
    db.expire_all()
    row = db.get(Job, job_id)
    assert row is not None and row.feedback_due_at is not None  # its repository is owed its failure...
    assert sent_feedback == [job_id]  # ...sent once the refusal answered
    assert db.query(Run).filter(Run.job_id == job_id).count() == 0
    tb = _testbed(db, name)
    assert (tb.key, tb.meaning) == (CPU.key(), CPU.meaning())
    # The attempt is over: its token opens nothing, a second try included.
    again = client.post(
        f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": docs.cpu()}, headers=bearer(token)
    )
    assert again.status_code == 401

    # A job whose document was measured on the testbed's device is stored as before.
    honest_id, honest_token = _claimed_job(client, tenant, worker_token)
    stored = client.post(
        f"/internal/jobs/{honest_id}/result", json={"attempt": 1, "result": docs.cpu()}, headers=bearer(honest_token)
    )
    _drop_messages(name, honest_id)
    assert stored.status_code == 200, stored.text
    assert db.get(Run, stored.json()["run_id"]).testbed_key == CPU.key()  # type: ignore[union-attr]


def test_keying_is_one_statement_that_a_second_device_cannot_overwrite(
    worker_token: tuple[str, str], db: Session
) -> None:
    name, _ = worker_token
    tb = _testbed(db, name)
    assert testbeds.register(db, testbed_id=tb.id, key=CPU.key(), meaning=CPU.meaning())[1] is True
    assert testbed_rows.key_if_none(db, tb.id, key=keys.testbed_key(FORGED), meaning=FORGED) is False
    assert (_testbed(db, name).key, _testbed(db, name).meaning) == (CPU.key(), CPU.meaning())


def test_an_admin_clears_a_testbeds_key_and_its_next_worker_keys_it_again() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    from attnprof.server.db import make_engine, make_sessionmaker
    from tests.pgtest import create_database, drop_database

    attnprof = [str(Path(sys.executable).parent / "attnprof")]
    name, url = create_database()
    env = {**os.environ, "ATTNPROF_DATABASE_URL": url, "ATTNPROF_BROKER_URL": REDIS_URL}

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*attnprof, *args], env=env, capture_output=True, text=True, timeout=120)

    engine = make_engine(url)
    try:
        assert admin("db", "upgrade").returncode == 0
        old = {"device": "NVIDIA H200", "driver": "570.1", "mode": "cuda"}
        new = {"device": "NVIDIA H200", "driver": "580.2", "mode": "cuda"}
        with make_sessionmaker(engine)() as session:
            testbed_id = testbeds.ensure(session, "h200").id
            testbeds.register(session, testbed_id=testbed_id, key=keys.testbed_key(old), meaning=old)
            session.commit()
        cleared = admin("admin", "reset-testbed-key", "h200", "--json")
        assert cleared.returncode == 0, cleared.stderr
        assert json.loads(cleared.stdout) == {"testbed": "h200", "cleared": True, "key_was": keys.testbed_key(old)}
        with make_sessionmaker(engine)() as session:
            # the upgraded host's worker now keys it; the old driver's would be refused
            _, keyed = testbeds.register(session, testbed_id=testbed_id, key=keys.testbed_key(new), meaning=new)
            session.commit()
            assert keyed and testbed_rows.get(session, testbed_id, fresh=True).key == keys.testbed_key(new)
        again = admin("admin", "reset-testbed-key", "nowhere")
        assert again.returncode == 2 and "no testbed named 'nowhere'" in again.stderr
    finally:
        engine.dispose()
        drop_database(name)


def test_a_name_with_a_trailing_newline_is_no_testbed_and_no_repository() -> None:
    import pytest

    from attnprof.server.errors import InvalidPayload
    from attnprof.server.projects import service as project_service

    for bad in ("h100\n", "h100\nx", "h100 "):
        with pytest.raises(InvalidPayload):
            testbeds.check_name(bad)
    with pytest.raises(InvalidPayload):
        project_service.repo_key("acme/attn\n")
    assert testbeds.check_name("h100") == "h100" and project_service.repo_key("Acme/Attn") == "acme/attn"
