"""A real server (``attnprof serve``) whose Postgres goes away under it: every route that needs the database answers
503 with the JSON error body (a page under /ui) and ``Retry-After``, never a plain-text 500; the server answers
again once the database is back.

The database is a cluster of this module's own (``pgcluster``), stopped and started here, or a connection of the
server's ended by ``pg_terminate_backend`` while a request is using it; the "never reachable" server points at a
port where nothing listens.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.pgcluster import Cluster, cluster_fixture, free_port  # noqa: F401 (cluster_fixture: the fixture named cluster)
from tests.server import documents as docs
from tests.server.process import Seeded, Server, seed, serve

pytestmark = pytest.mark.slow

SPEC = """[suite]
name = "outage"

[[cases]]
name = "sdpa"
target = "sdpa"
backend = "math"
batch = 1
q_heads = 2
seq_q = 64
head_dim = 32
"""


@dataclass
class Site:
    cluster: Cluster
    database_url: str
    server: Server
    seeded: Seeded
    job_id: str
    dashboard: httpx.Client  # signed in to the dashboard

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.server.url, headers=headers, timeout=30)

    def call(self, token: str | None, method: str, path: str, **kw: Any) -> httpx.Response:
        with self.http(token) as http:
            return http.request(method, path, **kw)

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url.replace("+psycopg", ""), autocommit=True) as conn:
            cursor = conn.execute(query, args)
            return list(cursor.fetchall()) if cursor.description else []


def _job_form(testbed: str) -> dict[str, Any]:
    data = {"testbed": testbed, "branch": "main", "commit": uuid.uuid4().hex[:12]}
    return {"data": data, "files": {"spec": ("attnprof.toml", SPEC)}, "headers": {"Idempotency-Key": uuid.uuid4().hex}}


def _login(client: httpx.Client, token: str) -> None:
    form = client.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    answer = client.post("/ui/login", data={"token": token, "csrf": csrf.group(1), "next": ""})
    assert answer.status_code == 303, answer.text


@pytest.fixture(scope="module")
def site(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    database_url = cluster.create_database()
    seeded = seed(database_url)
    with serve(database_url, tmp_path_factory.mktemp("outage-logs")) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {seeded.submit}"}) as http:
            created = http.post(f"/api/v1/projects/{seeded.project}/jobs", **_job_form(seeded.testbed))
        assert created.status_code == 202, created.text
        with httpx.Client(base_url=server.url, timeout=30) as dashboard:
            _login(dashboard, seeded.read)
            yield Site(cluster, database_url, server, seeded, str(created.json()["id"]), dashboard)


# Each route that reads or writes the database, as (what, send): the public API through the token dependency and
# through the hand-written job submission, the worker routes, the dashboard, the probes.
def _routes(site: Site) -> list[tuple[str, Callable[[], httpx.Response]]]:
    s, p, job = site.seeded, site.seeded.project, site.job_id
    body = docs.upload_body(docs.cpu())
    claim = {"attempt": 1, "worker": "w"}
    return [
        ("readyz", lambda: site.call(None, "GET", "/readyz")),
        ("metrics", lambda: site.call(None, "GET", "/metrics")),
        ("token", lambda: site.call(s.read, "GET", "/api/v1/token")),
        ("get job", lambda: site.call(s.read, "GET", f"/api/v1/jobs/{job}")),
        ("list jobs", lambda: site.call(s.read, "GET", f"/api/v1/projects/{p}/jobs")),
        ("submit job", lambda: site.call(s.submit, "POST", f"/api/v1/projects/{p}/jobs", **_job_form(s.testbed))),
        ("upload", lambda: site.call(s.submit, "POST", f"/api/v1/projects/{p}/results", json=body)),
        ("worker testbed", lambda: site.call(s.worker, "GET", "/internal/testbed")),
        ("claim", lambda: site.call(s.worker, "POST", f"/internal/jobs/{job}/claim", json=claim)),
        ("dashboard", lambda: site.dashboard.get(f"/ui/p/{p}")),
        ("dashboard jobs", lambda: site.dashboard.get(f"/ui/p/{p}/jobs")),
    ]


def _assert_unavailable(what: str, r: httpx.Response) -> None:
    assert r.status_code == 503, f"{what}: {r.status_code} {r.text[:300]}"
    assert r.headers.get("Retry-After", "").isdigit(), f"{what}: no Retry-After in {dict(r.headers)}"
    if r.request.url.path.startswith("/ui"):
        assert "unavailable" in r.text and r.headers["content-type"].startswith("text/html"), f"{what}: {r.text}"
        return
    assert r.headers["content-type"] == "application/json", f"{what}: {r.headers} {r.text[:300]}"
    body = r.json()
    assert set(body) == {"error", "detail"} and body["error"] == "unavailable", f"{what}: {body}"
    assert "database" in body["detail"], f"{what}: {body}"


def test_every_route_answers_503_while_the_database_is_down_and_recovers(site: Site) -> None:
    site.cluster.stop("fast")  # every session of the server's pool is ended; new connections are refused
    try:
        for what, send in _routes(site):
            _assert_unavailable(what, send())
        assert site.call(None, "GET", "/healthz").status_code == 200  # the process is up: no database needed
        form = site.call(None, "GET", "/ui/login")  # the sign-in form needs no database; signing in does
        assert form.status_code == 200
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        with site.http() as browser:
            browser.cookies.update(form.cookies)
            signin = browser.post("/ui/login", data={"token": site.seeded.read, "csrf": csrf.group(1), "next": ""})
        _assert_unavailable("sign-in", signin)
    finally:
        site.cluster.start()
    # Back: the pool's dead connections are noticed and replaced (pre-ping); nothing needs a restart.
    assert site.call(None, "GET", "/readyz").json()["database"] == "ok"
    assert site.call(site.seeded.read, "GET", f"/api/v1/jobs/{site.job_id}").json()["status"] == "queued"
    assert site.dashboard.get(f"/ui/p/{site.seeded.project}").status_code == 200
    assert "Traceback" not in site.server.text().split("Application startup complete")[-1]


def _in_thread(send: Callable[[], httpx.Response]) -> tuple[threading.Thread, list[httpx.Response]]:
    out: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: out.append(send()), daemon=True)
    thread.start()
    return thread, out


def _terminate_waiting(site: Site, wait_event: str, waited: threading.Thread) -> None:
    """End, with ``pg_terminate_backend``, the server's connection that waits on ``wait_event``."""
    deadline = time.monotonic() + 20
    while True:
        pids = site.sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event = %s AND pid <> "
            "pg_backend_pid()",
            wait_event,
        )
        if pids:
            break
        assert waited.is_alive(), "the request ended before it waited on the database"
        assert time.monotonic() < deadline, f"no connection waits on {wait_event}"
        time.sleep(0.05)
    for (pid,) in pids:
        site.sql("SELECT pg_terminate_backend(%s)", pid)


@pytest.mark.parametrize("route", ["get job", "submit job", "claim"])
def test_a_connection_dropped_mid_request_is_a_503(site: Site, route: str) -> None:
    send = dict(_routes(site))[route]
    with psycopg.connect(site.database_url.replace("+psycopg", "")) as locker:
        locker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")  # the request's query waits on the lock
        thread, answer = _in_thread(send)
        _terminate_waiting(site, "relation", thread)
        thread.join(30)
    _assert_unavailable(route, answer[0])
    # The next request gets a live connection.
    assert site.call(site.seeded.read, "GET", f"/api/v1/jobs/{site.job_id}").status_code == 200


def test_a_connection_lost_at_the_commit_is_a_503_and_the_retry_gets_the_stored_answer(site: Site) -> None:
    # With a synchronous standby named that never connects, a COMMIT that wrote waits for it: the connection is
    # ended there, after the transaction was committed locally (the case a client cannot tell from a lost write).
    site.sql("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
    site.sql("SELECT pg_reload_conf()")
    body = docs.upload_body(docs.cpu(), commit="at-commit")
    url = f"/api/v1/projects/{site.seeded.project}/results"
    try:
        thread, answer = _in_thread(lambda: site.call(site.seeded.submit, "POST", url, json=body))
        _terminate_waiting(site, "SyncRep", thread)
        thread.join(30)
    finally:
        site.sql("ALTER SYSTEM RESET synchronous_standby_names")
        site.sql("SELECT pg_reload_conf()")
    _assert_unavailable("upload at its commit", answer[0])
    stored = site.sql("SELECT id FROM runs WHERE document_run_id = %s", body["result"]["run"]["id"])
    assert len(stored) == 1  # committed locally before the wait was cut
    again = site.call(site.seeded.submit, "POST", url, json=body)
    assert again.status_code == 200, again.text
    assert again.json()["run_id"] == stored[0][0]


def test_a_server_whose_database_is_never_reachable_answers_503(tmp_path: Path) -> None:
    nowhere = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none"
    with serve(nowhere, tmp_path) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        token = {"Authorization": "Bearer ap_some_token"}
        form = _job_form("tb")
        for what, r in (
            ("readyz", http.get("/readyz")),
            ("token", http.get("/api/v1/token", headers=token)),
            ("submit job", http.post("/api/v1/projects/p/jobs", **{**form, "headers": {**form["headers"], **token}})),
            ("upload", http.post("/api/v1/projects/p/results", json=docs.upload_body(docs.cpu()), headers=token)),
            ("claim", http.post("/internal/jobs/j/claim", json={"attempt": 1, "worker": "w"}, headers=token)),
        ):
            _assert_unavailable(what, r)
