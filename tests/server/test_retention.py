"""Retention of traces and bundles and the per-project quota: the settings over the API (read, changed, refused
naming the field, admin only), the quota refusing an upload and storing nothing, and the sweep removing what is
past retention while keeping fresh artifacts, pinned baselines' traces and live jobs' bundles; on a real Postgres
(each test in a transaction rolled back), and the sweep and quota on SQLite too."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import subprocess
import tarfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from attnprof.contract.provenance import Provenance
from attnprof.core.documents import parse_result
from attnprof.server import migrate
from attnprof.server.artifacts.models import Artifact
from attnprof.server.audit.models import AuditEvent
from attnprof.server.config import Retention, Settings
from attnprof.server.db import make_engine, utcnow
from attnprof.server.jobs.models import Job
from attnprof.server.projects import service as projects
from attnprof.server.projects.retention import ProjectRetention, QuotaExceeded, used_bytes
from attnprof.server.retention import service as retention
from attnprof.server.runs import service as runs
from attnprof.server.runs.models import Run, RunTrace
from tests.claiming import bearer, claim, claim_secret
from tests.pgtest import create_database, drop_database
from tests.server import documents as docs
from tests.server.documents import SPEC
from tests.server.stack import REDIS_URL
from tests.server.tenants import Tenant
from tests.worker.stack import ATTNPROF

TRACES = [c["trace"] for c in docs.cpu()["cases"] if c["trace"]]


def _url(tenant: Tenant) -> str:
    return f"/api/v1/projects/{tenant.name}/retention"


def _trace(seed: int, size: int = 2000) -> bytes:
    """A gzip trace of about ``size`` bytes that no other seed gives (random-looking: gzip cannot shrink it)."""
    rng = random.Random(seed)
    return gzip.compress(bytes(rng.getrandbits(8) for _ in range(size)), mtime=0)


def _bundle(seed: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = f"x = {seed}\n".encode()
        info = tarfile.TarInfo("pkg/mod.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _upload(client: TestClient, tenant: Tenant, commit: str) -> str:
    r = client.post(
        f"/api/v1/projects/{tenant.name}/results",
        json=docs.upload_body(docs.cpu(), commit=commit),
        headers=tenant.h("submit"),
    )
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def _put_trace(client: TestClient, tenant: Tenant, run_id: str, name: str, blob: bytes) -> Any:
    return client.put(
        f"/api/v1/projects/{tenant.name}/runs/{run_id}/traces/{name}", content=blob, headers=tenant.h("submit")
    )


def _submit(client: TestClient, tenant: Tenant, testbed: str, bundle: bytes) -> Any:
    return client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode()), "bundle": ("src.tar.gz", bundle)},
        data={"testbed": testbed, "branch": "feature", "commit": "abc123"},
        headers=tenant.h("submit"),
    )


def _artifacts(db: Session) -> int:
    return int(db.scalar(select(func.count()).select_from(Artifact)) or 0)


def test_settings_are_read_changed_and_reset_and_audited(client: TestClient, tenant: Tenant, db: Session) -> None:
    first = client.get(_url(tenant), headers=tenant.h("read"))
    assert first.status_code == 200, first.text
    defaults = {"trace_days": None, "bundle_days": None, "quota_bytes": None}
    assert first.json() == {**defaults, "source": "defaults", "used_bytes": 0, "defaults": defaults}
    changed = client.patch(_url(tenant), json={"trace_days": 30, "quota_bytes": 10_000_000}, headers=tenant.h())
    assert changed.status_code == 200, changed.text
    assert changed.json()["trace_days"] == 30 and changed.json()["bundle_days"] is None
    assert changed.json()["quota_bytes"] == 10_000_000 and changed.json()["source"] == "project"
    again = client.patch(_url(tenant), json={"bundle_days": 7, "quota_bytes": None}, headers=tenant.h()).json()
    assert (again["trace_days"], again["bundle_days"], again["quota_bytes"]) == (30, 7, None)  # trace_days kept
    assert client.get(_url(tenant), headers=tenant.h("read")).json()["bundle_days"] == 7
    reset = client.delete(_url(tenant), headers=tenant.h())
    assert reset.status_code == 200 and reset.json()["source"] == "defaults" and reset.json()["trace_days"] is None
    events = db.scalars(select(AuditEvent).where(AuditEvent.kind == "retention.changed")).all()
    assert any("traces kept 30 days, bundles kept 7 days, quota none" in e.detail for e in events), events
    assert len(events) == 3
    assert all(e.token_prefix and tenant.admin.startswith(e.token_prefix) for e in events)  # the admin token


def test_the_service_defaults_apply_until_a_project_sets_its_own(
    settings: Settings, db: Session, tenant: Tenant
) -> None:
    from attnprof.server.app import create_app
    from tests.server.stack import bind

    settings = settings.model_copy(update={"retention": Retention(trace_days=90, quota_bytes=5000)})
    with TestClient(bind(create_app(settings), db)) as client:
        got = client.get(_url(tenant), headers=tenant.h("read")).json()
        assert (got["trace_days"], got["bundle_days"], got["quota_bytes"], got["source"]) == (
            90,
            None,
            5000,
            "defaults",
        )
        run_id = _upload(client, tenant, "d1")
        refused = _put_trace(client, tenant, run_id, TRACES[0], _trace(1, size=6000))
        assert refused.status_code == 413 and "quota of 4.9 KiB (5000 bytes)" in refused.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"trace_days": 0}, "trace_days", "greater than or equal to 1"),
        ({"trace_days": "ninety"}, "trace_days", "integer"),
        ({"bundle_days": 40000}, "bundle_days", "less than or equal to 36500"),
        ({"bundle_days": 1.5}, "bundle_days", "integer"),
        ({"quota_bytes": -1}, "quota_bytes", "greater than or equal to 1"),
        ({"quota_bytes": 0}, "quota_bytes", "greater than or equal to 1"),
        ({"trace_dayz": 3}, "trace_dayz", "Extra inputs"),
        ({}, "trace_days", "at least one"),
    ],
)
def test_bad_settings_answer_422_naming_the_field_and_change_nothing(
    client: TestClient, tenant: Tenant, db: Session, body: dict[str, object], field: str, says: str
) -> None:
    r = client.patch(_url(tenant), json=body, headers=tenant.h())
    assert r.status_code == 422, r.text
    assert field in r.text and says in r.text, r.text
    assert db.scalars(select(ProjectRetention)).all() == []
    assert client.get(_url(tenant), headers=tenant.h("read")).json()["source"] == "defaults"


def test_read_and_submit_tokens_cannot_change_the_settings(client: TestClient, tenant: Tenant, other: Tenant) -> None:
    for role in ("read", "submit"):
        assert client.patch(_url(tenant), json={"trace_days": 1}, headers=tenant.h(role)).status_code == 403
        assert client.delete(_url(tenant), headers=tenant.h(role)).status_code == 403
    assert client.get(_url(tenant), headers=other.h()).status_code == 404  # another project's token
    assert client.patch(_url(tenant), json={"trace_days": 1}, headers=other.h()).status_code == 404
    assert client.get(_url(tenant), headers=tenant.h("read")).json()["source"] == "defaults"


def test_the_quota_refuses_a_trace_past_it_naming_quota_and_use_and_stores_nothing(
    client: TestClient, tenant: Tenant, db: Session
) -> None:
    run_id = _upload(client, tenant, "q1")
    first, second = _trace(1), _trace(2)
    quota = len(first) + len(second) - 1
    assert client.patch(_url(tenant), json={"quota_bytes": quota}, headers=tenant.h()).status_code == 200
    assert _put_trace(client, tenant, run_id, TRACES[0], first).status_code == 204
    assert _put_trace(client, tenant, run_id, TRACES[0], first).status_code == 204  # the same bytes: no more use
    before = _artifacts(db)
    refused = _put_trace(client, tenant, run_id, TRACES[1], second)
    assert refused.status_code == 413, refused.text
    body = refused.json()
    assert body["error"] == "quota_exceeded"
    assert f"stores {len(first) / 1024:.1f} KiB ({len(first)} bytes)" in body["detail"], body
    assert f"quota of {quota / 1024:.1f} KiB ({quota} bytes)" in body["detail"], body
    assert "trace" in body["detail"] and "Nothing was stored" in body["detail"]
    assert _artifacts(db) == before
    url = f"/api/v1/projects/{tenant.name}/runs/{run_id}/traces/{TRACES[1]}"
    assert client.get(url, headers=tenant.h("read")).status_code == 404
    assert client.get(_url(tenant), headers=tenant.h("read")).json()["used_bytes"] == len(first)
    assert client.patch(_url(tenant), json={"quota_bytes": None}, headers=tenant.h()).status_code == 200
    assert _put_trace(client, tenant, run_id, TRACES[1], second).status_code == 204  # no quota: stored


def test_the_quota_refuses_a_bundle_past_it_and_creates_no_job(
    client: TestClient, tenant: Tenant, db: Session, worker_token: tuple[str, str]
) -> None:
    testbed, _ = worker_token
    one = _bundle(1)
    assert client.patch(_url(tenant), json={"quota_bytes": len(one) + 10}, headers=tenant.h()).status_code == 200
    assert _submit(client, tenant, testbed, one).status_code == 202
    redis.Redis.from_url(REDIS_URL).delete(f"profile.{testbed}")
    jobs_before, artifacts_before = db.scalar(select(func.count()).select_from(Job)), _artifacts(db)
    refused = _submit(client, tenant, testbed, _bundle(2))
    assert refused.status_code == 413, refused.text
    assert refused.json()["error"] == "quota_exceeded" and "bundle" in refused.json()["detail"]
    assert f"quota of {len(one) + 10} bytes" in refused.json()["detail"]
    assert db.scalar(select(func.count()).select_from(Job)) == jobs_before
    assert _artifacts(db) == artifacts_before


def test_the_sweep_removes_what_is_past_retention_and_keeps_the_rest(
    client: TestClient, tenant: Tenant, other: Tenant, db: Session, worker_token: tuple[str, str]
) -> None:
    old, pinned, fresh = (_upload(client, tenant, c) for c in ("s1", "s2", "s3"))
    for i, run_id in enumerate((old, pinned, fresh)):
        assert _put_trace(client, tenant, run_id, TRACES[0], _trace(10 + i)).status_code == 204
    # The same bytes in another project, whose retention keeps them: the artifact stays, only the link goes.
    shared = _trace(99)
    assert _put_trace(client, tenant, old, TRACES[1], shared).status_code == 204
    theirs = _upload(client, other, "o1")
    assert _put_trace(client, other, theirs, TRACES[1], shared).status_code == 204
    pin = client.post(f"/api/v1/projects/{tenant.name}/baselines/pins", json={"run_id": pinned}, headers=tenant.h())
    assert pin.status_code == 201, pin.text

    testbed, _ = worker_token
    job_ids = {}
    for i, state in enumerate(("done", "failed", "queued", "running", "fresh")):
        r = _submit(client, tenant, testbed, _bundle(100 + i))
        assert r.status_code == 202, r.text
        job_ids[state] = r.json()["id"]
    redis.Redis.from_url(REDIS_URL).delete(f"profile.{testbed}")  # the messages: no worker here takes them
    long_ago = utcnow() - timedelta(days=40)
    db.execute(update(Run).where(Run.id.in_([old, pinned, theirs])).values(created_at=long_ago))
    for state, job_id in job_ids.items():
        status, when = ("done", utcnow()) if state == "fresh" else (state, long_ago)
        db.execute(update(Job).where(Job.id == job_id).values(status=status, updated_at=when))
    db.commit()
    assert client.patch(_url(tenant), json={"trace_days": 30, "bundle_days": 30}, headers=tenant.h()).status_code == 200
    used_before = used_bytes(db, db.scalar(select(Run.project_id).where(Run.id == old)) or 0)
    assert used_before == sum(len(_trace(10 + i)) for i in range(3)) + len(shared) + sum(
        len(_bundle(100 + i)) for i in range(5)
    )
    artifacts_before = _artifacts(db)

    report = retention.sweep(db, defaults=Retention())
    db.commit()

    assert (report.traces, report.bundles) == (2, 2)
    links = set(db.execute(select(RunTrace.run_id, RunTrace.name)).all())
    assert (old, TRACES[0]) not in links and (old, TRACES[1]) not in links
    assert {(pinned, TRACES[0]), (fresh, TRACES[0]), (theirs, TRACES[1])} <= links
    bundles = dict(db.execute(select(Job.id, Job.bundle_sha256).where(Job.id.in_(job_ids.values()))).all())
    assert bundles[job_ids["done"]] is None and bundles[job_ids["failed"]] is None
    assert all(bundles[job_ids[s]] is not None for s in ("queued", "running", "fresh"))
    # Deleted: the old run's own trace and the two finished jobs' bundles; the shared trace stays for the other.
    assert report.artifacts_deleted == 3 and _artifacts(db) == artifacts_before - 3
    shared_left = select(func.count()).select_from(Artifact).where(Artifact.data == shared)
    assert db.scalar(shared_left) == 1
    bundle_bytes = len(_bundle(100)) + len(_bundle(101))
    assert report.bytes_freed == len(_trace(10)) + bundle_bytes
    (swept,) = report.projects
    assert swept.released_bytes == report.bytes_freed + len(shared)  # no longer this project's, kept for the other
    assert used_bytes(db, swept.project_id) == used_before - swept.released_bytes
    # The result document and its comparison are kept: the run still reads, its trace answers 404.
    assert client.get(f"/api/v1/projects/{tenant.name}/runs/{old}", headers=tenant.h("read")).status_code == 200
    gone = client.get(f"/api/v1/projects/{tenant.name}/runs/{old}/traces/{TRACES[0]}", headers=tenant.h("read"))
    assert gone.status_code == 404
    event = db.scalars(select(AuditEvent.detail).where(AuditEvent.kind == "artifacts.swept")).one()
    assert "removed 2 traces and 2 bundles" in event and "traces kept 30 days" in event, event
    # A second sweep finds nothing more to do.
    again = retention.sweep(db, defaults=Retention())
    assert (again.traces, again.bundles, again.artifacts_deleted) == (0, 0, 0)


@pytest.fixture(params=["postgres", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Session]:
    if request.param == "postgres":
        yield request.getfixturevalue("db")
        return
    url = f"sqlite:///{tmp_path / 'r.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    with Session(engine, expire_on_commit=False) as session:
        yield session
    engine.dispose()


def test_the_sweep_and_the_quota_on_each_backend(backend: Session) -> None:
    session = backend
    project = projects.create(session, name=f"ret-{utcnow().timestamp():.0f}-{id(session) % 1000}")
    stored = []
    for i in range(2):
        run = runs.store_run(
            session,
            project_id=project.id,
            document=parse_result(docs.cpu()),
            provenance=Provenance(branch="main", commit=f"b{i}"),
        )
        runs.put_trace(session, run=run, name=TRACES[0], data=_trace(200 + i), limit_bytes=1 << 20)
        stored.append(run)
    session.execute(update(Run).where(Run.id == stored[0].id).values(created_at=utcnow() - timedelta(days=10)))
    session.commit()
    used = used_bytes(session, project.id)
    assert used == len(_trace(200)) + len(_trace(201))
    with pytest.raises(QuotaExceeded, match="past its quota"):
        runs.put_trace(
            session,
            run=stored[1],
            name=TRACES[1],
            data=_trace(300),
            limit_bytes=1 << 20,
            retention=Retention(quota_bytes=used + 10),
        )
    session.rollback()
    report = retention.sweep(session, defaults=Retention(trace_days=7))
    session.commit()
    assert (report.traces, report.artifacts_deleted, report.bytes_freed) == (1, 1, len(_trace(200)))
    left = session.execute(select(RunTrace.run_id).where(RunTrace.run_id.in_([r.id for r in stored]))).scalars()
    assert list(left) == [stored[1].id]
    assert used_bytes(session, project.id) == len(_trace(201))


def test_the_sweeper_enforces_the_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``attnprof.worker.analysis.sweeper.run`` (what ``jobs.sweep`` runs) with ``ATTNPROF_RETENTION__TRACE_DAYS`` set:
    the old run's trace goes, in a transaction it commits, and the sweep's answer counts it."""
    from attnprof.worker.analysis import sweeper
    from tests.server.stack import make_settings

    name, url = create_database()
    try:
        migrate.upgrade(url)
        engine = make_engine(url)
        with Session(engine) as session:
            project = projects.create(session, name="swept")
            ids = []
            for i in range(2):
                run = runs.store_run(
                    session,
                    project_id=project.id,
                    document=parse_result(docs.cpu()),
                    provenance=Provenance(branch="main", commit=f"e{i}"),
                )
                runs.put_trace(session, run=run, name=TRACES[0], data=_trace(400 + i), limit_bytes=1 << 20)
                ids.append(run.id)
            session.execute(update(Run).where(Run.id == ids[0]).values(created_at=utcnow() - timedelta(days=8)))
            session.commit()
        monkeypatch.setenv("ATTNPROF_RETENTION__TRACE_DAYS", "7")
        monkeypatch.setenv("ATTNPROF_RETENTION__INTERVAL_S", "3600")
        settings = make_settings(url)
        assert settings.retention.trace_days == 7
        monkeypatch.setattr(retention, "_last_sweep", [])  # as a sweeper process that has not swept yet
        answer = sweeper.run(settings)
        assert (answer["traces_swept"], answer["bundles_swept"]) == (1, 0)
        with Session(engine) as session:  # within the interval the next passes leave retention alone
            session.execute(update(Run).where(Run.id == ids[1]).values(created_at=utcnow() - timedelta(days=8)))
            session.commit()
        assert sweeper.run(settings)["traces_swept"] == 0
        monkeypatch.setattr(retention, "_last_sweep", [time.monotonic() - 3601])
        assert sweeper.run(settings)["traces_swept"] == 1
        with Session(engine) as session:
            assert list(session.scalars(select(RunTrace.run_id))) == []
            assert session.scalar(select(func.count()).select_from(Artifact)) == 0
        engine.dispose()
    finally:
        drop_database(name)


def test_the_admin_command_sweeps_at_once_and_says_what_it_removed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {**os.environ, "ATTNPROF_DATABASE_URL": url, "ATTNPROF_RETENTION__BUNDLE_DAYS": "3"}
    assert subprocess.run([*ATTNPROF, "db", "upgrade"], env=env, capture_output=True, timeout=120).returncode == 0
    engine = make_engine(url)
    with Session(engine) as session:
        project = projects.create(session, name="cli-swept")
        run = runs.store_run(
            session,
            project_id=project.id,
            document=parse_result(docs.cpu()),
            provenance=Provenance(branch="main", commit="f0"),
        )
        runs.put_trace(session, run=run, name=TRACES[0], data=_trace(500), limit_bytes=1 << 20)
        session.execute(update(Run).values(created_at=utcnow() - timedelta(days=30)))
        session.commit()
    engine.dispose()
    kept = subprocess.run(
        [*ATTNPROF, "admin", "sweep-artifacts", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout) == {"projects": [], "artifacts_deleted": 0, "bytes_freed": 0}  # bundles only
    env["ATTNPROF_RETENTION__TRACE_DAYS"] = "14"
    swept = subprocess.run(
        [*ATTNPROF, "admin", "sweep-artifacts"], env=env, capture_output=True, text=True, timeout=120
    )
    assert swept.returncode == 0, swept.stderr
    size = len(_trace(500))
    assert swept.stdout.splitlines() == [
        "cli-swept: 1 traces, 0 bundles removed",
        f"1 artifacts deleted, {size / 1024:.1f} KiB ({size} bytes) freed",
    ]


def test_the_quota_refuses_a_workers_trace_upload_too(
    client: TestClient, tenant: Tenant, db: Session, worker_token: tuple[str, str], settings: Settings
) -> None:
    """The worker's route (``/internal/jobs/{id}/traces/{name}``) checks the same quota as the API's, here the
    service's default (``ATTNPROF_RETENTION__QUOTA_BYTES``)."""
    testbed, wtok = worker_token
    r = client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode())},
        data={"testbed": testbed, "branch": "feature", "commit": "abc123"},
        headers=tenant.h("submit"),
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    try:
        token = claim(client, wtok, job_id, claim_secret(REDIS_URL, testbed, job_id))["token"]
    finally:
        redis.Redis.from_url(REDIS_URL).delete(f"profile.{testbed}")
    doc = docs.h200()
    result = client.post(f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": doc}, headers=bearer(token))
    assert result.status_code == 200, result.text
    names = [c["trace"] for c in doc["cases"] if c.get("trace")]
    first, second = _trace(600), _trace(601)
    quota = len(first) + 100
    settings.retention.quota_bytes = quota  # the app's own settings object

    def put(name: str, blob: bytes) -> Any:
        return client.put(f"/internal/jobs/{job_id}/traces/{name}?attempt=1", content=blob, headers=bearer(token))

    assert put(names[0], first).status_code == 204
    before = _artifacts(db)
    refused = put(names[1], second)
    assert refused.status_code == 413 and refused.json()["error"] == "quota_exceeded", refused.text
    assert f"quota of {quota / 1024:.1f} KiB ({quota} bytes)" in refused.json()["detail"]
    assert _artifacts(db) == before
