"""Inputs from outside that the service must refuse with a clear 4xx, changing nothing: nesting deep enough to
break a parser or a serialiser (suite files, JSON bodies, the ancestors list), bundles the worker could not
unpack, numbers that are not finite (on Postgres and on SQLite), and a worker token on project routes."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from attnprof.server import migrate
from attnprof.server.app import create_app
from attnprof.server.auth import service as auth
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.projects import service as projects
from tests.claiming import bearer, claim, claim_secret
from tests.server import documents as docs
from tests.server.documents import SPEC
from tests.server.stack import REDIS_URL, make_settings
from tests.server.tenants import Tenant

# Deeper than Python's recursion limit: a recursive parser or serialiser fails on it.
DEEP = 5000
# Within what a JSON body parser reads, past what pydantic serialises (and far past what a document allows).
MIDDLING = 300


def _tar(*members: tuple[str, bytes | None]) -> bytes:
    """A tar.gz of ``members``: (name, data) for a file, (name, None) for a directory."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _submit(
    client: TestClient, tenant: Tenant, testbed: str, *, spec: str = SPEC, bundle: bytes | None = None, **kw: str
):
    files = {"spec": ("attnprof.toml", spec.encode())}
    if bundle is not None:
        files["bundle"] = ("src.tar.gz", bundle)
    data = {"testbed": testbed, "branch": "feature", "commit": "abc123", **kw}
    return client.post(f"/api/v1/projects/{tenant.name}/jobs", files=files, data=data, headers=tenant.h("submit"))


def _drop_queue(testbed: str) -> None:
    r = redis.Redis.from_url(REDIS_URL)
    try:
        r.delete(f"profile.{testbed}")
    finally:
        r.close()


def _queued(testbed: str) -> int:
    r = redis.Redis.from_url(REDIS_URL)
    try:
        return int(r.llen(f"profile.{testbed}"))
    finally:
        r.close()


def _jobs(client: TestClient, tenant: Tenant) -> list[dict[str, Any]]:
    r = client.get(f"/api/v1/projects/{tenant.name}/jobs", headers=tenant.h("read"))
    assert r.status_code == 200, r.text
    jobs: list[dict[str, Any]] = r.json()["jobs"]
    return jobs


def _refused_and_nothing_queued(client: TestClient, tenant: Tenant, testbed: str, r: Any, words: str) -> None:
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_payload" and words in r.json()["detail"], r.text
    assert _jobs(client, tenant) == [] and _queued(testbed) == 0


# --- nesting ----------------------------------------------------------------------------------------


def test_a_suite_spec_nested_thousands_deep_is_a_422(client, tenant, worker_token) -> None:
    testbed = worker_token[0]
    for deep in ("[" * DEEP + "]" * DEEP, "{a = " * DEEP + "}" * DEEP):
        r = _submit(client, tenant, testbed, spec=SPEC + f"args = {deep}\n")
        _refused_and_nothing_queued(client, tenant, testbed, r, "line 11: arrays and inline tables are nested more")
    dotted = SPEC + ".".join(["k"] * 20_000) + " = 1\n"
    r = _submit(client, tenant, testbed, spec=dotted)
    _refused_and_nothing_queued(client, tenant, testbed, r, "line 11: a key is nested more than 32 levels deep")


def test_a_nested_ancestors_list_is_a_422(client, tenant, worker_token) -> None:
    testbed = worker_token[0]
    r = _submit(client, tenant, testbed, ancestors="[" * DEEP + "]" * DEEP)
    _refused_and_nothing_queued(client, tenant, testbed, r, "ancestors: a flat JSON list of commit hashes")
    r = _submit(client, tenant, testbed, ancestors='["a1", {"b": "c"}]')
    _refused_and_nothing_queued(client, tenant, testbed, r, "ancestors: a flat JSON list of commit hashes")
    ok = _submit(client, tenant, testbed, ancestors='["a1", "b2"]')
    assert ok.status_code == 202, ok.text
    _drop_queue(testbed)


def _deep_params_body(levels: int) -> dict[str, Any]:
    doc = docs.h200()
    deep: Any = 1
    for _ in range(levels):
        deep = [deep]
    doc["cases"][0]["params"]["deep"] = deep
    return doc


def _deep_json(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_deeply_nested_upload_bodies_are_4xx(client, tenant) -> None:
    url = f"/api/v1/projects/{tenant.name}/results"
    headers = {**tenant.h("submit"), "Content-Type": "application/json"}
    # The body parser itself gives up: a 400 that says so.
    for body in (_deep_json(DEEP), '{"result": ' + _deep_json(DEEP) + ', "branch": "main", "commit": "a1"}'):
        r = client.post(url, content=body, headers=headers)
        assert r.status_code == 400 and r.json()["error"] == "bad_request", r.text
    # Parsed, then refused by the document's own bound, naming the field (it used to fail storing the run: a 500).
    r = client.post(url, json=docs.upload_body(_deep_params_body(MIDDLING)), headers=tenant.h("submit"))
    assert r.status_code == 422, r.text
    assert "cases.0.params: Input should nest at most 32 levels deep" in r.json()["detail"]
    assert client.get(f"/api/v1/projects/{tenant.name}/runs", headers=tenant.h("read")).json()["runs"] == []


def _claimed(client: TestClient, tenant: Tenant, worker_token: tuple[str, str]) -> tuple[str, str]:
    testbed, wtok = worker_token
    job_id = _submit(client, tenant, testbed).json()["id"]
    token = claim(client, wtok, job_id, claim_secret(REDIS_URL, testbed, job_id))["token"]
    _drop_queue(testbed)
    return job_id, token


def test_deeply_nested_worker_results_are_4xx_and_the_job_runs_on(client, tenant, worker_token) -> None:
    job_id, token = _claimed(client, tenant, worker_token)
    url = f"/internal/jobs/{job_id}/result"
    headers = {**bearer(token), "Content-Type": "application/json"}
    for body in (_deep_json(DEEP), '{"attempt": 1, "result": ' + _deep_json(DEEP) + "}"):
        r = client.post(url, content=body, headers=headers)
        assert r.status_code == 400 and r.json()["error"] == "bad_request", r.text
    r = client.post(url, json={"attempt": 1, "result": _deep_params_body(MIDDLING)}, headers=bearer(token))
    assert r.status_code == 422, r.text
    assert "cases.0.params: Input should nest at most 32 levels deep" in r.json()["detail"]
    assert client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()["status"] == "running"
    beat = client.post(f"/internal/jobs/{job_id}/heartbeat", json={"attempt": 1}, headers=bearer(token))
    assert beat.status_code == 200 and beat.json()["status"] == "running", beat.text


# --- bundles the worker cannot unpack --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "words"),
    [
        ((("pkg/mod.py", b"1"), ("pkg/mod.py", b"2")), "'pkg/mod.py' appears twice"),
        ((("pkg/mod.py", b"1"), ("./pkg//mod.py", b"2")), "'./pkg//mod.py' appears twice"),
        ((("pkg", None), ("pkg", b"1")), "'pkg' is both a file and a directory"),
        ((("pkg", b"1"), ("pkg/mod.py", b"2")), "'pkg/mod.py' is under 'pkg', which an earlier member made a file"),
        ((("pkg/mod.py", b"1"), ("pkg", b"2")), "'pkg' is a file, but earlier members are inside it"),
    ],
    ids=["duplicate", "duplicate-spelt-otherwise", "dir-then-file", "file-then-under-it", "file-over-a-dir"],
)
def test_a_bundle_the_worker_cannot_unpack_is_refused_at_submission(
    client, tenant, worker_token, members: tuple, words: str
) -> None:
    testbed = worker_token[0]
    r = _submit(client, tenant, testbed, bundle=_tar(*members))
    _refused_and_nothing_queued(client, tenant, testbed, r, f"bundle: member {words}")


# --- numbers that are not finite -------------------------------------------------------------------------


@dataclass
class Uploader:
    client: TestClient
    project: str
    submit: dict[str, str]
    read: dict[str, str]


@pytest.fixture(scope="module")
def lite_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Uploader]:
    """The service on a migrated SQLite file (the embedded mode), with one project and its tokens."""
    url = f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'attnprof.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    with make_sessionmaker(engine)() as session:
        project = projects.create(session, name="lite")
        submit = auth.create_project_token(session, project_id=project.id, role="submit")[1]
        read = auth.create_project_token(session, project_id=project.id, role="read")[1]
        session.commit()
    engine.dispose()
    with TestClient(create_app(make_settings(url))) as client:
        yield Uploader(client, "lite", bearer(submit), bearer(read))


@pytest.fixture(params=["postgres", "sqlite"])
def uploader(request: pytest.FixtureRequest) -> Uploader:
    if request.param == "sqlite":
        lite: Uploader = request.getfixturevalue("lite_app")
        return lite
    tenant: Tenant = request.getfixturevalue("tenant")
    return Uploader(request.getfixturevalue("client"), tenant.name, tenant.h("submit"), tenant.h("read"))


NON_FINITE = ["Infinity", "-Infinity", "NaN", "1e309", "-1e309"]


def _with_literal(body: dict[str, Any], place: tuple[str | int, ...], literal: str) -> str:
    """``body`` as JSON text with ``literal`` (not JSON, but what Python's json reads) at ``place``."""
    node: Any = body
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = "__literal__"
    return json.dumps(body).replace('"__literal__"', literal)


@pytest.mark.parametrize("literal", NON_FINITE)
@pytest.mark.parametrize(
    ("place", "field"),
    [
        (("result", "cases", 0, "latency_us", "median"), "cases.0.latency_us.median: Input should be a finite number"),
        (("result", "cases", 1, "kernels", 0, "tflops"), "cases.1.kernels.0.tflops: Input should be a finite number"),
        (("result", "cases", 0, "params", "scale"), "cases.0.params: Input should be a finite number at scale"),
    ],
    ids=["median", "kernel-tflops", "params"],
)
def test_an_upload_with_a_non_finite_number_is_a_422_on_both_backends(
    uploader: Uploader, literal: str, place: tuple[str | int, ...], field: str
) -> None:
    body = _with_literal(docs.upload_body(docs.h200()), place, literal)
    r = uploader.client.post(
        f"/api/v1/projects/{uploader.project}/results",
        content=body,
        headers={**uploader.submit, "Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_payload" and field in r.json()["detail"], r.text
    runs = uploader.client.get(f"/api/v1/projects/{uploader.project}/runs", headers=uploader.read)
    assert runs.status_code == 200 and runs.json()["runs"] == []


@pytest.mark.parametrize("literal", NON_FINITE)
def test_a_worker_result_with_a_non_finite_number_is_a_422(client, tenant, worker_token, literal: str) -> None:
    job_id, token = _claimed(client, tenant, worker_token)
    body = _with_literal({"attempt": 1, "result": docs.h200()}, ("result", "cases", 0, "latency_us", "p75"), literal)
    r = client.post(
        f"/internal/jobs/{job_id}/result", content=body, headers={**bearer(token), "Content-Type": "application/json"}
    )
    assert r.status_code == 422, r.text
    assert "cases.0.latency_us.p75: Input should be a finite number" in r.json()["detail"]
    assert client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()["status"] == "running"


# --- a worker token on project routes --------------------------------------------------------------------


def test_a_worker_token_gets_the_same_403_for_a_project_that_exists_or_not(client, tenant, worker_token) -> None:
    w = bearer(worker_token[1])
    for missing in ("no-such-project", "x" * 300):
        for method, path, kw in [
            ("GET", "runs", {}),
            ("GET", "jobs", {}),
            ("POST", "results", {"json": docs.upload_body(docs.h200())}),
            ("POST", "jobs", {"files": {"spec": ("s.toml", SPEC.encode())}, "data": {"branch": "b", "commit": "c"}}),
        ]:
            answers = [
                client.request(method, f"/api/v1/projects/{name}/{path}", headers=w, **kw)
                for name in (tenant.name, missing)
            ]
            assert [a.status_code for a in answers] == [403, 403], (path, [a.text for a in answers])
            assert answers[0].json() == answers[1].json()
            assert answers[0].json()["detail"].startswith("a worker token opens no project route")
    assert client.get(f"/api/v1/projects/{tenant.name}/runs", headers=tenant.h("read")).json()["runs"] == []
    assert _jobs(client, tenant) == []


# --- query parameters -----------------------------------------------------------------------------------


def test_a_query_parameter_the_route_does_not_take_is_a_422_that_names_it(client, tenant) -> None:
    alerts = f"/api/v1/projects/{tenant.name}/alerts"
    assert client.get(f"{alerts}?regressions_only=false", headers=tenant.h("read")).status_code == 200
    for query, named in [
        ("regresions_only=false", "'regresions_only'"),  # a misspelt filter is not silently dropped
        ("after=1&=null", "''"),  # a parameter with no name
        ("limit=5&foo=1&bar=2", "'bar', 'foo'"),
    ]:
        r = client.get(f"{alerts}?{query}", headers=tenant.h("read"))
        assert r.status_code == 422, (query, r.text)
        body = r.json()
        assert body["error"] == "invalid_payload"
        assert named in body["detail"] and "it takes: after, limit, regressions_only" in body["detail"], body
    # a dependency's own query parameters count as the route's (the job list's paging)
    assert client.get(f"/api/v1/projects/{tenant.name}/jobs?limit=5", headers=tenant.h("read")).status_code == 200
    assert client.get(f"/api/v1/projects/{tenant.name}/jobs?limt=5", headers=tenant.h("read")).status_code == 422
