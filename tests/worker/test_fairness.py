"""The GPU pool shared fairly, end to end: real Postgres, real Redis, ``attnprof serve`` and two real Celery profile
workers on one testbed (profiling on the CPU), which tell the service they are alive.

The tests share one running stack (module scope) and run in file order.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pgtest import create_database, drop_database
from tests.profiling_support import tar_gz
from tests.worker.stack import (
    ATTNPROF,
    FAULTY,
    NO_DATABASE,
    SDPA_CASE,
    Proc,
    base_env,
    custom_case,
    flush_redis,
    free_port,
    host_pid_named,
    seed_project,
    sql,
    start,
    stop,
    suite,
    wait_for,
    wait_ready,
)

pytestmark = pytest.mark.slow

# A Redis database of its own: the pipeline stack's workers (db 12) never see these messages.
REDIS_URL = "redis://127.0.0.1:6379/14"
TESTBED = "tb-fair"
NO_WORKER = "tb-none"
WORKERS = 2
FLOOD = 100
QUICK = suite("quick", SDPA_CASE)


@dataclass
class Fair:
    url: str
    database_url: str
    env: dict[str, str]
    flood: tuple[str, str]  # (project, submit token) of the project that floods the queue
    lone: tuple[str, str]  # (project, submit token) of the one with a single job
    procs: dict[str, Proc]

    @property
    def logs(self) -> list[Proc]:
        return list(self.procs.values())

    def http(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def submit(
        self, who: tuple[str, str], spec: str = QUICK, *, testbed: str = TESTBED, files: Any = None, **fields: str
    ) -> str:
        project, token = who
        data = {"testbed": testbed, "branch": "main", "commit": uuid.uuid4().hex[:12], **fields}
        upload: dict[str, Any] = {"spec": ("attnprof.toml", spec.encode())}
        if files:
            upload["bundle"] = ("src.tar.gz", tar_gz(files))
        with self.http(token) as http:
            r = http.post(f"/api/v1/projects/{project}/jobs", data=data, files=upload)
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def job(self, who: tuple[str, str], job_id: str) -> dict[str, Any]:
        with self.http(who[1]) as http:
            r = http.get(f"/api/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        found: dict[str, Any] = r.json()
        return found

    def cancel_open(self, who: tuple[str, str]) -> None:
        """Cancel the project's queued and running jobs (a test leaves the workers idle for the next)."""
        with self.http(who[1]) as http:
            for status in ("queued", "running"):
                page = http.get(f"/api/v1/projects/{who[0]}/jobs", params={"status": status, "limit": 1000}).json()
                for job in page["jobs"]:
                    http.post(f"/api/v1/jobs/{job['id']}/cancel")


@pytest.fixture(scope="module", name="fair")
def fair_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fair]:
    tmp = tmp_path_factory.mktemp("fair")
    logs = tmp / "logs"
    logs.mkdir()
    flush_redis(REDIS_URL)
    name, url = create_database()
    procs: dict[str, Proc] = {}
    try:
        flood_project, flood_token, tokens = seed_project(url, "flood", (TESTBED, NO_WORKER))
        lone_project, lone_token, _ = seed_project(url, "lone", ())
        port = free_port()
        env = {
            **base_env(tmp),
            "ATTNPROF_BROKER_URL": REDIS_URL,
            "ATTNPROF_DATABASE_URL": url,
            "ATTNPROF_SERVICE_URL": f"http://127.0.0.1:{port}",
            "ATTNPROF_FAIRNESS__WORKER_ALIVE_S": "0.5",
            "ATTNPROF_FAIRNESS__WORKER_LIVE_S": "3",
        }
        procs["service"] = start("service", [*ATTNPROF, "serve", "--port", str(port)], env, logs, tmp)
        procs["analysis"] = start(
            "analysis", [*ATTNPROF, "worker", "--analysis", "--beat-schedule", str(tmp / "beat")], env, logs, tmp
        )
        for i in range(WORKERS):
            wenv = {
                **env,
                "ATTNPROF_DATABASE_URL": NO_DATABASE,
                "ATTNPROF_WORKER_TOKEN": tokens[TESTBED],
                "ATTNPROF_WORKER__TIMEOUT_S": "120",
                "ATTNPROF_WORKER__SCRATCH_DIR": str(tmp / "scratch"),
            }
            argv = [*ATTNPROF, "worker", "--testbed", TESTBED, "--device", "cpu"]
            procs[f"worker-{i}"] = start(f"worker-{i}", argv, wenv, logs, tmp)
        wait_ready(list(procs.values()))
        yield Fair(
            url=f"http://127.0.0.1:{port}",
            database_url=url,
            env=env,
            flood=(flood_project, flood_token),
            lone=(lone_project, lone_token),
            procs=procs,
        )
    finally:
        stop(list(procs.values()))
        drop_database(name)
        flush_redis(REDIS_URL)


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def test_each_profile_worker_tells_the_service_it_is_alive_idle_or_not(fair: Fair) -> None:
    def seen() -> list[tuple[Any, ...]]:
        return sql(
            fair.database_url,
            "SELECT w.name, extract(epoch FROM now() - w.last_seen_at) FROM workers w "
            "JOIN testbeds t ON t.id = w.testbed_id WHERE t.name = %s",
            TESTBED,
        )

    rows = wait_for("both workers to say they are alive", lambda: len(seen()) == WORKERS and seen(), 30, logs=fair.logs)
    pids = {fair.procs[f"worker-{i}"].popen.pid for i in range(WORKERS)}
    assert {int(str(name).split("/pid")[1].split("/")[0]) for name, _ in rows} == pids
    assert all(age < 3 for _, age in rows)  # every half second (ATTNPROF_FAIRNESS__WORKER_ALIVE_S), idle as they are


def test_a_lone_job_starts_after_one_job_per_worker_not_after_another_projects_flood(
    fair: Fair, capsys: pytest.CaptureFixture[str], record_property: Any
) -> None:
    flood = [fair.submit(fair.flood) for _ in range(FLOOD)]
    # The pool is saturated by the flood before the other project submits.
    wait_for(
        "both workers to run flood jobs",
        lambda: sum(fair.job(fair.flood, j)["status"] == "running" for j in flood[:4]) == WORKERS,
        120,
        logs=fair.logs,
    )
    lone = fair.submit(fair.lone)
    started = wait_for(
        "the lone project's job to start",
        lambda: (job := fair.job(fair.lone, lone))["started_at"] and job,
        120,
        every_s=0.5,
        logs=fair.logs,
    )
    waited_s = _at(started["started_at"]) - _at(started["created_at"])
    flood_jobs = [fair.job(fair.flood, j) for j in flood]
    fair.cancel_open(fair.flood)
    ran = [j for j in flood_jobs if j["started_at"] and j["finished_at"] and j["status"] == "done"]
    assert ran, "no flood job finished"
    job_s = max(_at(j["finished_at"]) - _at(j["started_at"]) for j in ran)
    # Flood jobs a worker claimed while the lone job waited: only those offered before it came (one while both
    # workers are busy, two if both were free at that moment), never the rest of the flood.
    overtook = [
        j
        for j in flood_jobs
        if j["started_at"] and _at(started["created_at"]) < _at(j["started_at"]) < _at(started["started_at"])
    ]
    with capsys.disabled():
        print(
            f"\nfairness: the lone project's job waited {waited_s:.1f} s behind a flood of {FLOOD} jobs of another "
            f"project on {WORKERS} workers (a flood job took at most {job_s:.1f} s, claim to verdict; "
            f"{len(overtook)} flood job(s) started meanwhile; {len(ran)} finished in all)"
        )
    record_property("lone_job_wait_s", round(waited_s, 2))
    record_property("flood_job_max_s", round(job_s, 2))
    assert len(overtook) <= WORKERS, overtook
    assert waited_s <= job_s + 10, (waited_s, job_s)  # about one job's time: the first worker to finish takes it
    assert len(ran) < FLOOD / 2  # it did not wait for the flood


def test_a_newer_push_to_a_pull_request_stops_its_older_commits_running_job(fair: Fair) -> None:
    marker = f"hang{uuid.uuid4().hex[:8]}"
    hang = suite("hang", custom_case("hang", "faulty.targets:hang", {"marker": marker}))
    pr = {"repo": "acme/attn", "pr": "7"}
    old = fair.submit(fair.flood, hang, files=FAULTY, commit="c0ffee01", **pr)
    pid = int(wait_for("the old commit's job to run", lambda: host_pid_named(marker), 60, logs=fair.logs))
    assert fair.job(fair.flood, old)["status"] == "running"
    newer = fair.submit(fair.flood, commit="c0ffee02", **pr)
    job = fair.job(fair.flood, old)
    assert job["status"] == "cancelled"
    assert job["reason"] == f"superseded by commit c0ffee02 (job {newer}), a newer push to pull request #7"
    # Its worker hears it from the next heartbeat and kills the job, as a user's cancel does.
    wait_for("the superseded job's process to be killed", lambda: host_pid_named(marker) != pid, 15, logs=fair.logs)
    done = wait_for(
        "the newer commit's job to finish",
        lambda: (j := fair.job(fair.flood, newer))["status"] in ("done", "failed") and j,
        120,
        logs=fair.logs,
    )
    assert done["status"] == "done", done


def test_submit_wait_says_once_that_no_worker_serves_the_testbed(fair: Fair, tmp_path: Path) -> None:
    spec = tmp_path / "attnprof.toml"
    spec.write_text(QUICK)
    env = {**fair.env, "ATTNPROF_SERVER": fair.url, "ATTNPROF_TOKEN": fair.lone[1]}
    env.pop("ATTNPROF_DATABASE_URL")
    argv = [*ATTNPROF, "submit", str(spec), "--testbed", NO_WORKER, "--branch", "main", "--commit", "c1"]
    started = time.monotonic()
    done = subprocess.run([*argv, "--wait", "--timeout", "5"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    said = f"no worker has ever served testbed {NO_WORKER}: the job waits in the queue until one starts"
    assert (done.stdout + done.stderr).count(said) == 1, (done.stdout, done.stderr)
    assert "no verdict: the wait ran out while the job was queued" in done.stdout
    assert time.monotonic() - started < 30
