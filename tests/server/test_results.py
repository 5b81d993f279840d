from __future__ import annotations

import asyncio
import copy
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.pgtest import create_database, drop_database
from tests.server import documents as docs
from tests.server.process import ATTNPROF, Seeded, Server, seed, serve
from tests.server.tenants import Tenant


def test_first_upload_passes_with_no_baseline(client: TestClient, tenant: Tenant) -> None:
    r = client.post(
        f"/api/v1/projects/{tenant.name}/results", json=docs.upload_body(docs.h200()), headers=tenant.h("submit")
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["verdict"] == "pass"
    assert body["baseline"] is None
    assert body["run_id"] and body["comparison_id"]


def test_ten_percent_slower_fails_naming_the_case(client: TestClient, tenant: Tenant) -> None:
    base = docs.h200()
    url = f"/api/v1/projects/{tenant.name}/results"
    first = client.post(url, json=docs.upload_body(base, commit="a1"), headers=tenant.h("submit")).json()
    case = "sdpa[backend=cudnn,pass=fwd]"
    slow = docs.variant(base, slower=1.10, cases=[case])
    r = client.post(
        url, json=docs.upload_body(slow, branch="feature", commit="b1", base_commit="a1"), headers=tenant.h("submit")
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["verdict"] == "fail", body["comparison"]["findings"]
    assert body["baseline"] == [first["run_id"]] or body["baseline"]
    failing = {f["case"] for f in body["comparison"]["findings"] if f["verdict"] == "fail"}
    assert failing == {case}


def test_the_same_upload_again_gets_the_first_answer_and_stores_nothing(client: TestClient, tenant: Tenant) -> None:
    doc = docs.cpu()
    url = f"/api/v1/projects/{tenant.name}/results"
    body = docs.upload_body(doc, commit="a1", ancestors=["a0"], pr=7)
    first = client.post(url, json=body, headers=tenant.h("submit"))
    assert first.status_code == 201, first.text
    again = client.post(url, json=body, headers=tenant.h("submit"))  # a client retrying after a lost answer
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    runs = client.get(f"/api/v1/projects/{tenant.name}/runs", headers=tenant.h()).json()["runs"]
    assert [r["id"] for r in runs] == [first.json()["run_id"]]

    # The same document with anything else is not a retry: 409, naming what differs, and nothing changes.
    moved = client.post(url, json={**body, "branch": "feature", "pr": 8}, headers=tenant.h("submit"))
    assert moved.status_code == 409 and moved.json()["error"] == "conflict"
    assert "branch, pr" in moved.json()["detail"] and first.json()["run_id"] in moved.json()["detail"]
    edited = copy.deepcopy(doc)
    edited["cases"][0]["latency_us"]["median"] *= 1.5
    changed = client.post(url, json={**body, "result": edited}, headers=tenant.h("submit"))
    assert changed.status_code == 409 and "result (the document's content)" in changed.json()["detail"]
    assert len(client.get(f"/api/v1/projects/{tenant.name}/runs", headers=tenant.h()).json()["runs"]) == 1


# --- against a real server: an answer lost after the store, two tries at once ---------------------------------


@dataclass
class Served:
    server: Server
    seeded: Seeded
    database_url: str

    def runs_of(self, document_run_id: str) -> list[str]:
        with psycopg.connect(self.database_url.replace("+psycopg", "")) as conn:
            rows = conn.execute("SELECT id FROM runs WHERE document_run_id = %s", (document_run_id,)).fetchall()
        return [r[0] for r in rows]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    name, url = create_database()
    try:
        seeded = seed(url)
        with serve(url, tmp_path_factory.mktemp("results-logs")) as server:
            yield Served(server, seeded, url)
    finally:
        drop_database(name)


class LossyProxy:
    """A TCP proxy on loopback that relays both ways to ``upstream_port``, except the answer to the first request
    whose request line holds ``match``: it forwards that request, and once the server starts answering (the
    server answers after its commit) closes the client's connection without relaying a byte of the answer."""

    def __init__(self, upstream_port: int, match: bytes) -> None:
        self.upstream_port = upstream_port
        self.match = match
        self.request_lines: list[bytes] = []
        self.dropped = 0
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()

    def __enter__(self) -> LossyProxy:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self.loop.run_forever()
        finally:
            server.close()
            self.loop.close()

    async def _relay(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        server_in, server_out = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        armed = False

        async def requests() -> None:
            nonlocal armed
            while data := await client_in.read(65536):
                line = data.split(b"\r\n", 1)[0]
                if re.match(rb"^[A-Z]+ /\S* HTTP/1\.1$", line):  # a request's head starts the chunk
                    self.request_lines.append(line)
                    armed = armed or (self.dropped == 0 and self.match in line)
                server_out.write(data)
                await server_out.drain()

        async def answers() -> None:
            while data := await server_in.read(65536):
                if armed:
                    self.dropped += 1
                    return  # both connections close below: the answer is lost
                client_out.write(data)
                await client_out.drain()

        pending = [asyncio.ensure_future(requests()), asyncio.ensure_future(answers())]
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        for writer in (client_out, server_out):
            writer.close()


def test_an_upload_whose_answer_was_lost_after_the_store_counts_as_done(served: Served, tmp_path: Path) -> None:
    doc = docs.cpu()
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    with LossyProxy(int(served.server.url.rsplit(":", 1)[1]), match=b"/results ") as proxy:
        argv = [ATTNPROF, "upload", str(path), "--branch", "main", "--commit", "c1", "--json", "--timeout", "60"]
        argv += ["--server", f"http://127.0.0.1:{proxy.port}", "--token", served.seeded.submit]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr  # the verdict of the stored run, not a conflict (exit 2)
    answer = json.loads(done.stdout)
    assert answer["verdict"] == "pass"
    posts = [line for line in proxy.request_lines if line.startswith(b"POST ")]
    assert proxy.dropped == 1 and len(posts) == 2, proxy.request_lines  # the first answer was lost, then a retry
    assert served.runs_of(doc["run"]["id"]) == [answer["run_id"]]  # stored once


def test_two_tries_of_one_upload_at_once_store_it_once(served: Served) -> None:
    # A retry that overtakes its first try: both pass the lookup (nothing stored yet), then the second waits on the
    # first's row; when that commits, the second is answered as a retry.
    body = docs.upload_body(docs.cpu(), commit="c2")
    url = f"{served.server.url}/api/v1/projects/{served.seeded.project}/results"
    answers: list[httpx.Response] = []

    def post() -> None:
        answers.append(httpx.post(url, json=body, headers={"Authorization": f"Bearer {served.seeded.submit}"}))

    dsn = served.database_url.replace("+psycopg", "")
    with psycopg.connect(dsn) as locker, psycopg.connect(dsn, autocommit=True) as watcher:
        locker.execute("LOCK TABLE runs IN EXCLUSIVE MODE")  # reads go on, inserts wait
        threads = [threading.Thread(target=post) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while True:
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if waiting and waiting[0] == 2:
                break
            assert time.monotonic() < deadline and not answers, [a.text for a in answers]
            time.sleep(0.05)
    for t in threads:
        t.join(30)
    assert sorted(a.status_code for a in answers) == [200, 201], [a.text for a in answers]
    assert answers[0].json() == answers[1].json()
    assert served.runs_of(body["result"]["run"]["id"]) == [answers[0].json()["run_id"]]
