"""A submission that names several testbeds (``testbeds``, or the suite's ``[suite] testbeds``): one job per testbed,
linked by ``matrix_id``, each on its own testbed's queue; every bad input answered 422 naming its field, with nothing
stored. The migration that adds the link, against the model."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
import redis
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlalchemy import inspect, select
from sqlalchemy.orm import Session

from attnprof.server import migrate
from attnprof.server.db import make_engine
from attnprof.server.jobs.models import Job
from attnprof.server.models import Base
from attnprof.server.projects.models import Project
from tests.pgtest import create_database, drop_database
from tests.server.documents import SPEC
from tests.server.stack import REDIS_URL
from tests.server.tenants import Tenant


def _names(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:6]
    return [f"mx{i}-{tag}" for i in range(n)]


def _post(client: TestClient, tenant: Tenant, *, spec: str = SPEC, headers: dict[str, str] | None = None, **fields):
    data = {"branch": "feature", "commit": "abc123", "repo": "o/r", **fields}
    return client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", spec.encode())},
        data=data,
        headers={**tenant.h("submit"), **(headers or {})},
    )


def _queued(testbed: str) -> list[str]:
    """The job ids of the profile messages on the testbed's queue; the queue is emptied."""
    r = redis.Redis.from_url(REDIS_URL)
    try:
        queue = f"profile.{testbed}"
        messages = [json.loads(m) for m in r.lrange(queue, 0, -1)]
        r.delete(queue)
    finally:
        r.close()
    return [json.loads(base64.b64decode(m["body"]))[0][0] for m in messages]


def _jobs(db: Session, tenant: Tenant) -> list[Job]:
    q = select(Job).join(Project, Project.id == Job.project_id).where(Project.name == tenant.name)
    return list(db.scalars(q))


def _suite_naming(*testbeds: str) -> str:
    return SPEC.replace('name = "s"\n', f'name = "s"\ntestbeds = {json.dumps(list(testbeds))}\n', 1)


def test_a_submission_naming_two_testbeds_makes_one_linked_job_on_each_queue(client, tenant, db: Session) -> None:
    a, b = _names(2)
    r = _post(client, tenant, testbeds=f"{b},{a}")
    assert r.status_code == 202, r.text
    body = r.json()
    matrix = body["matrix_id"]
    assert matrix and [j["testbed"] for j in body["jobs"]] == [a, b]  # by name, whatever order they were named in
    assert body["id"] == body["jobs"][0]["id"] and body["status"] == "queued"
    by_testbed = {j["testbed"]: j["id"] for j in body["jobs"]}
    assert _queued(a) == [by_testbed[a]] and _queued(b) == [by_testbed[b]]
    rows = _jobs(db, tenant)
    assert {j.id for j in rows} == set(by_testbed.values())
    assert {j.matrix_id for j in rows} == {matrix}
    assert len({j.created_at for j in rows}) == 1  # neither is the newer job of its pull request
    for name, job_id in by_testbed.items():
        out = client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()
        assert (out["testbed"], out["matrix_id"], out["commit"]) == (name, matrix, "abc123")
    # A JSON list says the same.
    again = _post(client, tenant, testbeds=json.dumps([a, b]), commit="abc124")
    assert again.status_code == 202 and len(again.json()["jobs"]) == 2 and again.json()["matrix_id"] != matrix


def test_the_suites_testbeds_apply_when_the_submission_names_none_and_one_named_testbed_wins(
    client, tenant, db: Session
) -> None:
    a, b = _names(2)
    spec = _suite_naming(a, b)
    r = _post(client, tenant, spec=spec)
    assert r.status_code == 202, r.text
    assert [j["testbed"] for j in r.json()["jobs"]] == [a, b] and r.json()["matrix_id"]
    alone = _post(client, tenant, spec=spec, testbed=a, commit="abc124")
    assert alone.status_code == 202, alone.text
    assert alone.json()["matrix_id"] is None and [j["testbed"] for j in alone.json()["jobs"]] == [a]
    assert db.get(Job, alone.json()["id"]).matrix_id is None
    # One testbed named in testbeds is a job alone, as testbed makes it.
    one = _post(client, tenant, testbeds=b, commit="abc125")
    assert one.status_code == 202 and one.json()["matrix_id"] is None


def test_a_retried_matrix_submission_answers_with_all_its_jobs_and_makes_none(client, tenant, db: Session) -> None:
    a, b = _names(2)
    first = _post(client, tenant, testbeds=f"{a},{b}", headers={"Idempotency-Key": "m1"})
    again = _post(client, tenant, testbeds=f"{a},{b}", headers={"Idempotency-Key": "m1"})
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json() == first.json()
    assert len(_jobs(db, tenant)) == 2
    assert len(_queued(a)) == 1 and len(_queued(b)) == 1


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"testbed": "t1", "testbeds": "t2,t3"}, "not both"),
        ({"testbeds": "t1,t1"}, "'t1' named more than once"),
        ({"testbeds": "t1,bad/name"}, "testbed 'bad/name': letters, digits"),
        ({"testbeds": ",".join(f"t{i}" for i in range(9))}, "at most 8 testbeds, got 9"),
        ({"testbeds": '["t1", 2]'}, "a list of testbed names"),
        ({"testbeds": "[not json"}, "a list of testbed names"),
        ({"testbeds": " , "}, "a list of testbed names"),
        ({"testbeds": "x" * 2001}, "at most 2000 characters"),
    ],
)
def test_bad_testbeds_are_422_naming_the_field_and_store_nothing(client, tenant, db: Session, fields, words) -> None:
    r = _post(client, tenant, **fields)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_payload"
    assert "body.testbeds: " in r.json()["detail"] and words in r.json()["detail"], r.json()
    assert _jobs(db, tenant) == []


@pytest.mark.parametrize(
    ("suite_line", "words"),
    [
        ('testbeds = ["h100", "h100"]', "testbeds names 'h100' more than once"),
        ('testbeds = ["h100", "no spaces"]', "testbed 'no spaces': letters, digits"),
        ('testbeds = "h100"', "testbeds must be a list of testbed names"),
        (f"testbeds = {json.dumps([f't{i}' for i in range(9)])}", "at most 8 testbeds, got 9"),
    ],
)
def test_bad_suite_testbeds_are_422_naming_the_key_and_store_nothing(
    client, tenant, db: Session, suite_line, words
) -> None:
    r = _post(client, tenant, spec=SPEC.replace('name = "s"\n', f'name = "s"\n{suite_line}\n', 1), testbed="t1")
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_payload"
    assert "suite.testbeds" in r.json()["detail"] and words in r.json()["detail"], r.json()
    assert _jobs(db, tenant) == []


def test_no_testbed_anywhere_is_422_naming_testbed_and_each_way_to_give_it(client, tenant, db: Session) -> None:
    r = _post(client, tenant)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith("body.testbed: Field required") and "testbeds" in detail and "[suite] testbeds" in detail
    assert _jobs(db, tenant) == []


def test_migration_0016_adds_the_matrix_link_as_the_model_has_it_and_its_downgrade_drops_it() -> None:
    name, url = create_database()
    engine = make_engine(url)
    try:
        migrate.upgrade(url, "0016")
        with engine.connect() as conn:
            diff = compare_metadata(
                MigrationContext.configure(conn, opts={"compare_type": True}),
                Base.metadata,
            )
        on_jobs = [d for d in diff if "jobs" in repr(d) and "matrix" in repr(d)]
        assert on_jobs == []
        inspected = inspect(engine)
        assert "matrix_id" in {c["name"] for c in inspected.get_columns("jobs")}
        assert "ix_jobs_matrix_id" in {i["name"] for i in inspected.get_indexes("jobs")}
        migrate.downgrade(url, "0015")
        inspected = inspect(engine)
        assert "matrix_id" not in {c["name"] for c in inspected.get_columns("jobs")}
        assert "ix_jobs_matrix_id" not in {i["name"] for i in inspected.get_indexes("jobs")}
    finally:
        engine.dispose()
        drop_database(name)
