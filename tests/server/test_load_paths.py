"""The request paths the load benchmark (bench/service_load.py) drives: job creation (bounded fields, the order of
its checks, the kombu-published message), samples stored one array per case (migration 0003), and the bootstrap
behind the upload's comparison."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from kombu import Connection as KombuConnection
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from attnprof.contract.provenance import Provenance
from attnprof.core.analysis import stats
from attnprof.core.analysis.compare import compare
from attnprof.core.documents import parse_result
from attnprof.server import migrate, queue
from attnprof.server.config import Limits
from attnprof.server.db import make_engine
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import Job
from attnprof.server.projects import service as projects
from attnprof.server.runs import repository as run_rows
from attnprof.server.runs import service as runs
from attnprof.server.testbeds.models import Testbed as StoredTestbed
from tests.pgtest import create_database, drop_database
from tests.profiling_support import tar_gz
from tests.server import documents as docs
from tests.server.stack import REDIS_URL
from tests.server.tenants import Tenant

SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "c"\ntarget = "sdpa"\nq_heads = 2\nseq_q = 64\nhead_dim = 32\n'


def _post_job(client: TestClient, project: str, headers: dict[str, str], **fields: str):
    data = {"testbed": "tb-fresh", "branch": "feature", "commit": "abc123", **fields}
    return client.post(
        f"/api/v1/projects/{project}/jobs", files={"spec": ("attnprof.toml", SPEC.encode())}, data=data, headers=headers
    )


def _messages(queue: str) -> list[dict]:
    r = redis.Redis.from_url(REDIS_URL)
    try:
        return [json.loads(m) for m in r.lrange(queue, 0, -1)]
    finally:
        r.delete(queue)
        r.close()


# --- job creation ------------------------------------------------------------------------------------------


def test_a_job_on_a_new_testbed_creates_the_testbed_and_is_enqueued(
    client: TestClient, tenant: Tenant, db: Session
) -> None:
    testbed = "tb-first-use"
    _messages(f"profile.{testbed}")
    r = _post_job(client, tenant.name, tenant.h("submit"), testbed=testbed, pr="7", ancestors="a1,a0")
    assert r.status_code == 202, r.text
    job = db.get(Job, r.json()["id"])
    assert job is not None and job.status == "queued" and job.pr == 7 and job.ancestors == ["a1", "a0"]
    assert db.get(StoredTestbed, job.testbed_id).name == testbed
    (msg,) = _messages(f"profile.{testbed}")
    assert msg["headers"]["task"] == "profile.run" and msg["headers"]["id"] == msg["properties"]["correlation_id"]
    job_id, attempt, secret = json.loads(base64.b64decode(msg["body"]))[0]
    assert (job_id, attempt) == (job.id, 1) and secret.startswith("apc_")  # the claim secret of attempt 1


def test_job_creation_checks_the_token_before_the_form(client: TestClient, tenant: Tenant, other: Tenant) -> None:
    bad_form = {"commit": "x" * 65}
    assert _post_job(client, tenant.name, {}, **bad_form).status_code == 401
    assert _post_job(client, tenant.name, {"Authorization": "Bearer ap_nope"}, **bad_form).status_code == 401
    # another tenant's project answers like one that does not exist; a read token may not submit
    assert _post_job(client, other.name, tenant.h("submit"), **bad_form).status_code == 404
    assert _post_job(client, "no-such-project", tenant.h("submit")).status_code == 404
    r = _post_job(client, tenant.name, tenant.h("read"), **bad_form)
    assert r.status_code == 403 and r.json()["error"] == "forbidden"
    r = _post_job(client, tenant.name, tenant.h("submit"), **bad_form)
    assert r.status_code == 422 and "commit" in r.json()["detail"]
    # Bounded path and header values too: a name no project can have, an over-long key.
    long_key = {"Idempotency-Key": "k" * 201}
    assert _post_job(client, "p" * 101, {}).status_code == 401
    assert _post_job(client, "p" * 101, tenant.h("submit")).status_code == 404
    assert client.get(f"/api/v1/projects/{'p' * 101}/jobs").status_code == 401
    assert _post_job(client, tenant.name, long_key).status_code == 401
    r = _post_job(client, tenant.name, {**tenant.h("submit"), **long_key})
    assert r.status_code == 422 and "header.Idempotency-Key" in r.json()["detail"], r.text


def test_a_retry_under_a_known_key_leaves_nothing_behind(client: TestClient, tenant: Tenant, db: Session) -> None:
    """The job the key named is the answer; the retry's own bundle and testbed are not kept."""
    key = {**tenant.h("submit"), "Idempotency-Key": uuid.uuid4().hex}
    testbed = f"tb-{uuid.uuid4().hex[:8]}"
    first = _post_job(client, tenant.name, key, testbed=testbed)
    assert first.status_code == 202, first.text
    artifacts = db.execute(text("SELECT count(*) FROM artifacts")).scalar_one()
    bundle = {"bundle": ("src.tar.gz", tar_gz({"pkg/a.py": b"x = 2\n"}))}
    again = client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode()), **bundle},
        data={"testbed": "tb-named-by-a-retry", "branch": "feature", "commit": "abc123"},
        headers=key,
    )
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"], again.text
    assert db.execute(text("SELECT count(*) FROM artifacts")).scalar_one() == artifacts
    assert db.scalars(select(StoredTestbed).where(StoredTestbed.name == "tb-named-by-a-retry")).first() is None
    assert len(_messages(f"profile.{testbed}")) == 1


def test_a_redis_broker_keeps_what_kombu_reads_from_its_url() -> None:
    """The publishing transport is set after kombu read the URL: TLS for rediss:// is kept."""
    for url in ("rediss://:pw@h:6380/0", "rediss://h:6380/0?ssl_cert_reqs=required", "redis://127.0.0.1:6379/13"):
        ours, stock = queue._connection(url, "/tmp"), KombuConnection(url)
        assert ours.transport_cls is queue._publishing_transport()
        assert (ours.ssl, ours.hostname, ours.port, ours.virtual_host) == (
            stock.ssl,
            stock.hostname,
            stock.port,
            stock.virtual_host,
        )


def test_an_oversized_pr_is_a_422_naming_the_field(client: TestClient, tenant: Tenant, db: Session) -> None:
    before = db.query(Job).count()
    r = _post_job(client, tenant.name, tenant.h("submit"), pr=str(2**31))
    assert r.status_code == 422 and "pr" in r.json()["detail"], r.text
    assert db.query(Job).count() == before
    r = client.get(f"/api/v1/projects/{tenant.name}/jobs", params={"pr": 2**31}, headers=tenant.h("read"))
    assert r.status_code == 422 and "pr" in r.json()["detail"], r.text
    largest = _post_job(client, tenant.name, tenant.h("submit"), pr=str(2**31 - 1))
    assert largest.status_code == 202, largest.text
    _messages("profile.tb-fresh")


def _count(db: Session) -> int:
    return db.query(Job).count()


@pytest.mark.parametrize(
    ("files", "data", "named"),
    [
        ({}, {"testbed": "tb", "branch": "b", "commit": "c"}, "body.spec: Field required"),
        ({"spec": ("a.toml", SPEC.encode())}, {"branch": "b", "commit": "c"}, "body.testbed: Field required"),
        ({"spec": ("a.toml", SPEC.encode())}, {"testbed": "", "branch": "b", "commit": "c"}, "body.testbed"),
        (
            {"spec": ("a.toml", SPEC.encode())},
            {"testbed": "tb", "branch": "b", "commit": "c", "pr": "seven"},
            "body.pr",
        ),
        ({"spec": ("a.toml", SPEC.encode())}, {"testbed": "tb", "branch": "b" * 256, "commit": "c"}, "body.branch"),
        (
            {"spec": ("a.toml", SPEC.encode()), "testbed": ("tb.txt", b"tb")},
            {"branch": "b", "commit": "c"},
            "body.testbed: a text field, not a file",
        ),
        (
            {"spec": ("a.toml", SPEC.encode())},
            {"testbed": "tb", "branch": "b", "commit": "c", "bundle": "not a file"},
            "body.bundle: a file (tar.gz)",
        ),
        ({"spec": ("a.toml", b"\xff\xfe")}, {"testbed": "tb", "branch": "b", "commit": "c"}, "spec: not UTF-8 text"),
    ],
)
def test_a_bad_job_form_is_a_422_naming_the_field_and_changes_nothing(
    client: TestClient, tenant: Tenant, db: Session, files: dict, data: dict, named: str
) -> None:
    before = _count(db)
    r = client.post(f"/api/v1/projects/{tenant.name}/jobs", files=files, data=data, headers=tenant.h("submit"))
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_payload" and named in r.json()["detail"], r.text
    assert _count(db) == before
    assert _messages("profile.tb") == []


def test_job_form_fields_left_empty_are_left_out_and_the_suite_may_be_a_text_field(
    client: TestClient, tenant: Tenant, db: Session
) -> None:
    data = {"testbed": "tb-fresh", "branch": "feature", "commit": "abc123", "repo": "", "pr": "", "spec": SPEC}
    r = client.post(f"/api/v1/projects/{tenant.name}/jobs", data=data, headers=tenant.h("submit"))
    assert r.status_code == 202, r.text
    job = db.get(Job, r.json()["id"])
    assert job is not None and job.repo is None and job.pr is None and job.suite_name == "s"
    assert len(_messages("profile.tb-fresh")) == 1


def test_a_testbed_id_is_remembered_once_read_from_a_committed_row(
    app: FastAPI, client: TestClient, tenant: Tenant, db: Session
) -> None:
    testbed = f"tb-{uuid.uuid4().hex[:8]}"
    first = _post_job(client, tenant.name, tenant.h("submit"), testbed=testbed)
    assert first.status_code == 202, first.text
    assert testbed not in app.state.testbed_ids  # created by that request: not known to be committed
    second = _post_job(client, tenant.name, tenant.h("submit"), testbed=testbed)
    assert second.status_code == 202, second.text
    row = db.scalars(select(StoredTestbed).where(StoredTestbed.name == testbed)).one()
    assert app.state.testbed_ids[testbed] == row.id
    third = _post_job(client, tenant.name, tenant.h("submit"), testbed=testbed)
    assert {db.get(Job, r.json()["id"]).testbed_id for r in (first, second, third)} == {row.id}
    # No live worker serves the testbed: the first job is offered, the other two wait in the database.
    assert len(_messages(f"profile.{testbed}")) == 1


def test_job_creation_documents_its_multipart_form(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    op = document["paths"]["/api/v1/projects/{project}/jobs"]["post"]
    ref = op["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert ref == {"$ref": "#/components/schemas/JobSubmission"}
    schema = document["components"]["schemas"]["JobSubmission"]
    assert schema["required"] == ["spec", "branch", "commit"]  # a testbed, several, or the suite's list
    assert schema["properties"]["spec"]["contentMediaType"] == "application/octet-stream"
    assert schema["properties"]["bundle"]["format"] == "binary"
    assert schema["properties"]["pr"] == {"title": "Pr", "type": "integer", "minimum": 1, "maximum": 2**31 - 1}
    assert {"401", "403", "404", "413", "422", "429"} <= set(op["responses"])
    assert {p["name"] for p in op["parameters"]} == {"project", "Idempotency-Key"}
    assert op["security"] == [{"BearerToken": []}]


@pytest.fixture
def own_database() -> Iterator[Engine]:
    """A database of the test's own, for transactions that must commit (the shared one rolls back per test)."""
    name, url = create_database()
    try:
        migrate.upgrade(url)
        engine = make_engine(url)
        yield engine
        engine.dispose()
    finally:
        drop_database(name)


def test_two_submissions_racing_with_one_idempotency_key_make_one_job(own_database: Engine) -> None:
    """An original and its retry at once, each with the bundle and on a testbed new to the service: the second
    waits on the first's uncommitted rows (artifact, testbed, job), then finds them there and answers the job the
    first committed."""
    with Session(own_database) as setup:
        project_id = projects.create(setup, name="race").id
        setup.commit()
    bundle = tar_gz({"pkg/a.py": b"x = 1\n"})
    new = jobs.NewJob(
        spec=SPEC, testbed="tb-race", provenance=Provenance(branch="b", commit="c"), bundle=bundle, idempotency_key="k"
    )

    def submit(session: Session) -> tuple[str, bool]:
        job, created = jobs.create(session, project_id=project_id, new=new, limits=Limits(), max_attempts=3)
        return job.id, created

    with Session(own_database) as first, Session(own_database) as second:
        first_id, first_created = submit(first)
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(submit, second)
            time.sleep(0.3)
            assert not waiting.done()  # blocked on the first's rows
            first.commit()
            assert waiting.result(timeout=10) == (first_id, False)
        assert first_created
    with Session(own_database) as check:
        assert check.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 1
        assert check.execute(text("SELECT count(*) FROM testbeds WHERE name = 'tb-race'")).scalar_one() == 1


# --- samples, one array per case ---------------------------------------------------------------------------


def test_samples_are_stored_one_array_per_case_in_their_order(db: Session) -> None:
    project = projects.create(db, name="samples-array")
    document = parse_result(docs.h200())
    run = runs.store_run(
        db, project_id=project.id, document=document, provenance=Provenance(branch="main", commit="c1")
    )
    stored = run_rows.samples_of_run(db, run.id)
    expected = {c.id: c.latency_us.samples for c in document.cases if c.latency_us and c.latency_us.samples}
    assert stored == expected and len(stored) > 1
    rows = db.execute(text("SELECT count(*) FROM case_samples")).scalar_one()
    assert rows >= len(expected)


def _seed_at_0002(url: str) -> list[tuple[int, int, float]]:
    """A project, testbed, run and two cases with per-row samples, written at revision 0002."""
    engine = make_engine(url)
    samples = [(1, i, 10.0 + i / 8) for i in range(7)] + [(2, i, 3.5 * (i + 1)) for i in range(3)]
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO projects (id, name, default_branch, created_at) VALUES (1, 'p', 'main', :t)"),
                {"t": "2026-01-01T00:00:00+00:00"},
            )
            conn.execute(
                text("INSERT INTO testbeds (id, name, created_at) VALUES (1, 'tb', :t)"),
                {"t": "2026-01-01T00:00:00+00:00"},
            )
            conn.execute(
                text(
                    'INSERT INTO runs (id, project_id, testbed_id, testbed_key, document_run_id, branch, "commit",'
                    " ancestors, mode, suspect, created_at, document) VALUES ('r1', 1, 1, 'k', 'd1', 'main', 'c1',"
                    " '[]', 'cuda', false, :t, '{}')"
                ),
                {"t": "2026-01-01T00:00:00+00:00"},
            )
            for case_row, case_id in ((1, "a"), (2, "b"), (3, "no-samples")):
                conn.execute(
                    text(
                        "INSERT INTO run_cases (id, run_id, project_id, testbed_id, branch, created_at, case_id,"
                        " status, samples_count) VALUES (:id, 'r1', 1, 1, 'main', :t, :case, 'ok', 0)"
                    ),
                    {"id": case_row, "t": "2026-01-01T00:00:00+00:00", "case": case_id},
                )
            for case_row, index, value in reversed(samples):  # stored out of order: the index decides
                conn.execute(
                    text('INSERT INTO samples (run_case_id, "index", value_us) VALUES (:c, :i, :v)'),
                    {"c": case_row, "i": index, "v": value},
                )
    finally:
        engine.dispose()
    return samples


def test_migration_0003_carries_the_samples_up_and_down(database_url: str) -> None:
    migrate.upgrade(database_url, "0002")
    samples = _seed_at_0002(database_url)
    migrate.upgrade(database_url, "0003")
    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            assert run_rows.samples_of_run(session, "r1") == {
                "a": [v for c, _, v in samples if c == 1],
                "b": [v for c, _, v in samples if c == 2],
            }
        migrate.downgrade(database_url, "0002")
        with engine.connect() as conn:
            rows = conn.execute(text('SELECT run_case_id, "index", value_us FROM samples ORDER BY 1, 2')).all()
        assert [tuple(r) for r in rows] == sorted(samples)
    finally:
        engine.dispose()


# --- the comparison's bootstrap ----------------------------------------------------------------------------


def test_runs_drawn_together_are_the_draws_made_one_run_at_a_time() -> None:
    rng = np.random.default_rng(3)
    medians = [stats.median_stat(stats.log_samples(rng.lognormal(3.0, 0.02, n))) for n in (50, 220, 1, 221)]
    spreads = [stats.spread_stat(stats.log_samples(rng.lognormal(3.0, 0.02, n))) for n in (50, 220)]
    for group in (medians, [s for s in spreads if s is not None], [medians[0], spreads[0]]):
        together = stats.draw_runs(group, np.random.default_rng(11), 500)
        one_by_one_rng = np.random.default_rng(11)
        one_by_one = [r.draw(one_by_one_rng, 500) for r in group]
        assert together.shape == (len(group), 500)
        assert all(np.array_equal(a, b) for a, b in zip(together, one_by_one, strict=True))
    # what the bootstrap median's distribution was before it was cached per sample count
    assert medians[1].weights is stats.median_stat(stats.log_samples(rng.lognormal(1.0, 0.1, 220))).weights
    assert not medians[1].weights.flags.writeable and np.isclose(medians[1].weights.sum(), 1.0)


def test_a_comparison_is_the_same_for_the_same_seed() -> None:
    base = [parse_result(docs.h200(jitter=0.002 * i)) for i in range(3)]
    cand = parse_result(docs.h200(slower=1.05))
    first = compare(base, cand, seed=5).model_dump(mode="json")
    assert compare(base, cand, seed=5).model_dump(mode="json") == first
    assert compare(base, cand, seed=6).model_dump(mode="json") != first
    assert first["verdict"] == "fail"


def test_the_interval_and_median_shortcuts_are_numpys_to_the_last_bit() -> None:
    rng = np.random.default_rng(17)
    for n in (1, 2, 3, 10, 999, 2000, 2001):
        draws = rng.standard_t(3.0, n)
        for level in (0.5, 0.9, 0.95, 0.99, 1.0):
            tail = (1.0 - level) / 2.0
            expected = tuple(float(v) for v in np.quantile(draws, [tail, 1.0 - tail]))
            assert stats.percentile_interval(draws, level) == expected
        assert stats._median(draws) == float(np.median(draws))
