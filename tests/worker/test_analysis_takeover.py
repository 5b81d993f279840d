"""An analysis worker killed mid-analysis (``kill -9``): its lease runs out, the sweep sends ``analysis.run`` again
whatever the broker's ``unacked`` hash holds, another worker makes the analysis, and the job has exactly one
comparison; the dead worker's message, restored later as kombu would after ``visibility_timeout``, changes nothing.

Real Postgres, Redis, ``attnprof serve`` and ``attnprof worker --analysis`` processes. The first analysis worker
waits mid-analysis (``ATTNPROF_ANALYSIS__PAUSE_S``, with its comparison made and not committed) so that it can be
killed there; the GPU side of the job is played over HTTP as a worker plays it (the message's claim secret, then
the attempt's job token)."""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pgtest import create_database, drop_database
from tests.worker.stack import (
    ATTNPROF,
    SDPA_CASE,
    Stack,
    base_env,
    flush_redis,
    free_port,
    seed_project,
    sql,
    start,
    stop,
    suite,
    wait_for,
    wait_ready,
)

pytestmark = pytest.mark.slow

TESTBED = "tb-takeover"
LEASE_S = 6  # the analysis lease (ATTNPROF_SWEEP__ANALYZING_STALE_S), renewed every 2 s while the analysis works
DOCUMENT = Path(__file__).resolve().parents[1] / "data" / "service" / "cpu-run-1.json"


@pytest.fixture(scope="module", name="takeover")
def takeover_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("takeover")
    logs = tmp / "logs"
    logs.mkdir()
    flush_redis()
    name, url = create_database()
    s: Stack | None = None
    try:
        project, submit, tokens = seed_project(url, "takeover", (TESTBED,))
        port = free_port()
        env = {
            **base_env(tmp),
            "ATTNPROF_DATABASE_URL": url,
            "ATTNPROF_SERVICE_URL": f"http://127.0.0.1:{port}",
            "ATTNPROF_SWEEP__ANALYZING_STALE_S": str(LEASE_S),
        }
        s = Stack(f"http://127.0.0.1:{port}", url, env, submit, project, tokens, tmp)
        s.procs["service"] = start("service", [*ATTNPROF, "serve", "--port", str(port)], env, logs, tmp)
        slow = [*ATTNPROF, "worker", "--analysis", "--beat-schedule", str(tmp / "beat-slow")]
        s.procs["slow"] = start("slow", slow, {**env, "ATTNPROF_ANALYSIS__PAUSE_S": "600"}, logs, tmp)
        wait_ready(s.logs)
        wait_for("the service", lambda: _answers(s.url), 60, logs=s.logs)
        yield s
    finally:
        if s is not None:
            stop(s.logs)
        drop_database(name)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _result_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DOCUMENT.read_text())
    document["run"]["id"] = str(uuid.uuid4())
    return document


def _lease(s: Stack, job_id: str) -> datetime:
    found: datetime = sql(s.database_url, "SELECT lease_expires_at FROM jobs WHERE id = %s", job_id)[0][0]
    return found


def _comparisons(s: Stack, run_id: str) -> int:
    return int(sql(s.database_url, "SELECT count(*) FROM comparisons WHERE candidate_run_id = %s", run_id)[0][0])


def _unacked(s: Stack, job_id: str) -> dict[bytes, bytes]:
    """The dead worker's delivery of ``analysis.run(job_id)`` in kombu's ``unacked`` hash, by delivery tag."""
    r = s.redis()
    try:
        return {tag: raw for tag, raw in r.hgetall("unacked").items() if job_id.encode() in raw}
    finally:
        r.close()


def test_an_analysis_worker_killed_mid_analysis_is_replaced_and_the_job_gets_one_comparison(takeover: Stack) -> None:
    s = takeover
    job_id = s.submit(suite("takeover", SDPA_CASE), testbed=TESTBED)
    ((_, attempt, secret),) = [m for m in s.messages(f"profile.{TESTBED}") if m[0] == job_id]
    with s.http(s.worker_tokens[TESTBED]) as worker:
        claimed = worker.post(
            f"/internal/jobs/{job_id}/claim", json={"attempt": attempt, "worker": "played", "secret": secret}
        )
    assert claimed.status_code == 200, claimed.text
    with s.http(claimed.json()["token"]) as played:
        stored = played.post(f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": _result_document()})
    assert stored.status_code == 200, stored.text
    run_id = stored.json()["run_id"]

    slow = s.procs["slow"]
    wait_for("the analysis to be mid-way", lambda: f"job {job_id}: pausing" in slow.text(), 60, logs=s.logs)
    # While it works, the analysis renews its own lease: the sweep (every second) leaves the job to it.
    taken = _lease(s, job_id)
    time.sleep(LEASE_S * 1.5)
    assert _lease(s, job_id) > taken
    assert s.job(job_id)["status"] == "analyzing" and "sent analysis again" not in slow.text()
    (tag, raw), *others = _unacked(s, job_id).items()
    assert not others and _comparisons(s, run_id) == 0

    slow.popen.send_signal(signal.SIGKILL)
    slow.popen.wait()
    killed_at = time.monotonic()
    fresh = start(
        "fresh",
        [*ATTNPROF, "worker", "--analysis", "--beat-schedule", str(s.tmp / "beat-fresh")],
        s.env,
        s.tmp / "logs",
        s.tmp,
    )
    s.procs["fresh"] = fresh
    job = s.wait_status(job_id, ("done", "failed"), 60)
    assert job["status"] == "done" and job["verdict"] == "pass", job
    assert time.monotonic() - killed_at < 60
    assert _comparisons(s, run_id) == 1
    assert "sent analysis again (analyzing, its lease ran out" in fresh.text()
    # The dead worker's delivery is still unacknowledged: the resend did not wait for it. Restore it as kombu would
    # after visibility_timeout (3 h): the repeat finds the job done and stores nothing.
    assert _unacked(s, job_id) == {tag: raw}
    message, _exchange, routing_key = json.loads(raw)
    r = s.redis()
    try:
        r.lpush(routing_key, json.dumps(message))
        r.hdel("unacked", tag)
    finally:
        r.close()
    task_id = message["headers"]["id"]
    wait_for("the restored message to run", lambda: f"analysis.run[{task_id}] succeeded" in fresh.text(), 30)
    assert _comparisons(s, run_id) == 1
    again = s.job(job_id)
    assert (again["status"], again["verdict"], again["finished_at"]) == ("done", "pass", job["finished_at"])
