"""A fleet's host that degrades mid-day, end to end: real Postgres, real Redis, ``attnprof serve``, the analysis
worker and three real profile workers (profiling on the CPU) as three hosts of one testbed, each running its canary
at start and every few seconds while idle.

One host's canary is made to fail through its worker's test-only setting (``ATTNPROF_WORKER__CANARY_SCALE_FILE``, a
file of the worker's that no job reaches): the service quarantines it, its worker stops consuming, jobs run on the
other two; the file removed, its canary passes again, the worker starts again and takes jobs.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.worker.stack import (
    SDPA_CASE,
    Stack,
    cpu_fleet,
    sql,
    suite,
    wait_for,
)

pytestmark = pytest.mark.slow

REDIS_URL = "redis://127.0.0.1:6379/10"
TESTBED = "tb-fleet"
HOSTS = 3
QUICK = suite("quick", SDPA_CASE)


@pytest.fixture(scope="module", name="fleet")
def fleet_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("fleet")
    workers = {
        f"worker-{i}": (
            TESTBED,
            {
                "ATTNPROF_WORKER__HOST": f"host-{i}",
                "ATTNPROF_WORKER__CANARY_EVERY_S": "4",
                "ATTNPROF_WORKER__CANARY_SCALE_FILE": str(tmp / f"scale-{i}.json"),
            },
        )
        for i in range(HOSTS)
    }
    env = {
        "ATTNPROF_FAIRNESS__WORKER_ALIVE_S": "0.5",
        "ATTNPROF_FAIRNESS__WORKER_LIVE_S": "3",
        # Three CPU hosts on two cores: their figures wander fivefold with each other's load (a canary that overlaps
        # another's), so the band is wide (a tenth of the best host's rates); the degraded host's are a fiftieth.
        "ATTNPROF_HEALTH__CPU_TOLERANCE": "0.9",
        "ATTNPROF_HEALTH__LAUNCH_TOLERANCE": "5",
        "ATTNPROF_HEALTH__RETRY_S": "2",
    }
    with cpu_fleet(tmp, redis_url=REDIS_URL, prefix="fleet", testbeds=(TESTBED,), workers=workers, env=env) as s:
        yield s


def _hosts(fleet: Stack) -> dict[str, str]:
    return {str(h): str(s) for h, s in sql(fleet.database_url, "SELECT name, state FROM hosts")}


def _claimed_by(fleet: Stack, job_id: str) -> str:
    return str(sql(fleet.database_url, "SELECT claimed_by FROM jobs WHERE id = %s", job_id)[0][0])


def test_every_host_runs_its_canary_at_start_and_is_taken(fleet: Stack) -> None:
    hosts = wait_for("three hosts to pass a canary", lambda: len(h := _hosts(fleet)) == HOSTS and h, 60)
    assert set(hosts) == {f"host-{i}" for i in range(HOSTS)} and "quarantined" not in hosts.values()
    canaries = sql(fleet.database_url, "SELECT host, seconds, figures FROM canaries")
    assert all(0 < seconds < 60 and "copy_gbps" in figures for _, seconds, figures in canaries)


def test_a_host_that_degrades_is_quarantined_and_jobs_run_elsewhere(fleet: Stack) -> None:
    Path(fleet.tmp / "scale-2.json").write_text(json.dumps({"copy_gbps": 0.02, "matmul_tflops_fp32": 0.02}))
    wait_for("host-2 to be quarantined", lambda: _hosts(fleet).get("host-2") == "quarantined", 60, logs=fleet.logs)
    reason = sql(fleet.database_url, "SELECT reason FROM hosts WHERE name = 'host-2'")[0][0]
    assert re.search(r"copy_gbps [\d.,]+ GB/s is \d+% under the best host's [\d.,]+: outside copy_gbps >= ", reason)
    wait_for(
        "worker-2 to stop consuming", lambda: "consumes nothing until its canary" in fleet.procs["worker-2"].text(), 30
    )
    jobs = [fleet.submit(QUICK, testbed=TESTBED) for _ in range(4)]
    for job_id in jobs:
        assert fleet.wait_status(job_id, ("done",), timeout_s=180)["status"] == "done"
    assert {_claimed_by(fleet, j).split("/")[0] for j in jobs} <= {"host-0", "host-1"}
    marked = sql(fleet.database_url, "SELECT DISTINCT host FROM runs WHERE host_note IS NOT NULL")
    assert marked in ([], [("host-2",)])  # only its own runs, if any ran since its last passing canary


def test_the_host_returns_when_its_canary_passes_again(fleet: Stack) -> None:
    Path(fleet.tmp / "scale-2.json").unlink()
    wait_for("host-2 to pass again", lambda: _hosts(fleet).get("host-2") == "healthy", 60, logs=fleet.logs)
    wait_for("worker-2 to consume again", lambda: fleet.procs["worker-2"].text().count(" ready.") >= 2, 60)
    for i in (0, 1):  # the other two hosts go: only host-2 can take the next job
        fleet.procs[f"worker-{i}"].popen.send_signal(signal.SIGTERM)
        fleet.procs[f"worker-{i}"].popen.wait(timeout=30)
    job_id = fleet.submit(QUICK, testbed=TESTBED)
    assert fleet.wait_status(job_id, ("done",), timeout_s=180)["status"] == "done"
    assert _claimed_by(fleet, job_id).startswith("host-2/")
