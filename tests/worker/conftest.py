"""The worker tests' fixture: ``stack``, a real deployment per test module (``attnprof serve``, the analysis
worker with beat, three profile workers on the CPU) over a Postgres and a Redis database of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from attnprof.worker.profile import scratch as scratches
from tests.pgtest import create_database, drop_database
from tests.worker.stack import (
    ATTNPROF,
    FAULTS_TIMEOUT_S,
    NO_DATABASE,
    Stack,
    base_env,
    flush_redis,
    free_port,
    seed_project,
    start,
    stop,
    wait_ready,
)


@pytest.fixture(scope="module")
def service_env() -> dict[str, str]:
    """Settings the service and the analysis worker get beside the stack's own (a module overrides it, e.g. with a
    GitHub stand-in's address and token; the profile workers never get them, as a GPU host holds no GitHub token)."""
    return {}


@pytest.fixture(scope="module", name="stack")
def stack_fixture(tmp_path_factory: pytest.TempPathFactory, service_env: dict[str, str]) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    logs = tmp / "logs"
    logs.mkdir()
    flush_redis()
    name, url = create_database()
    procs = []
    try:
        project_name, submit, tokens = seed_project(url, "wk", ("tb-main", "tb-faults", "tb-idle"))
        port = free_port()
        env = {**base_env(tmp), "ATTNPROF_DATABASE_URL": url, "ATTNPROF_SERVICE_URL": f"http://127.0.0.1:{port}"}
        s = Stack(
            url=f"http://127.0.0.1:{port}",
            database_url=url,
            env=env,
            submit_token=submit,
            project=project_name,
            worker_tokens=tokens,
            tmp=tmp,
        )
        served = {**env, **service_env}
        s.procs["service"] = start("service", [*ATTNPROF, "serve", "--port", str(port)], served, logs, tmp)
        procs.append(s.procs["service"])
        s.procs["analysis"] = start(
            "analysis", [*ATTNPROF, "worker", "--analysis", "--beat-schedule", str(tmp / "beat")], served, logs, tmp
        )
        procs.append(s.procs["analysis"])
        # Two profile workers serve tb-main (one is killed mid-job) and share a host's scratch root; one serves
        # tb-faults with a short wall-clock limit (the hanging target).
        for label, testbed, timeout_s, scratch in (
            ("main-1", "tb-main", 120, "scratch-main"),
            ("main-2", "tb-main", 120, "scratch-main"),
            ("faults", "tb-faults", FAULTS_TIMEOUT_S, "scratch-faults"),
        ):
            wenv = {
                **env,
                "ATTNPROF_DATABASE_URL": NO_DATABASE,
                "ATTNPROF_WORKER_TOKEN": tokens[testbed],
                "ATTNPROF_WORKER__TIMEOUT_S": str(timeout_s),
                "ATTNPROF_WORKER__SCRATCH_DIR": str(tmp / scratch),
            }
            s.procs[label] = start(
                label, [*ATTNPROF, "worker", "--testbed", testbed, "--device", "cpu"], wenv, logs, tmp
            )
            procs.append(s.procs[label])
        wait_ready(procs)
        yield s
    finally:
        stop(procs)
        # A worker killed mid-job (the tests do) leaves its job's tmpfs mounted until a later job reaps it: with every
        # worker gone, reap them all now.
        for root in tmp.glob("scratch-*/attnprof-jobs"):
            scratches.reap_stale(root)
        drop_database(name)
