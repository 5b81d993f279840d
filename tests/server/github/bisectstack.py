"""The processes a bisection runs through, for its end-to-end test and its CPU benchmark (``bench/bisect_cpu.py``):
``attnprof serve``, the analysis worker with beat (the sweep, every 2 s) and a CPU profile worker, on a fresh Postgres
database and a Redis database of their own, with ``github`` (the stand-in) as GitHub."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.pgtest import create_database, drop_database
from tests.server.github.fakegithub import FakeGitHub
from tests.worker.stack import (
    ATTNPROF,
    NO_DATABASE,
    Stack,
    allow_repo,
    base_env,
    flush_redis,
    free_port,
    seed_project,
    start,
    stop,
    wait_ready,
)

REDIS_URL = "redis://127.0.0.1:6379/11"
TESTBED = "tb-bisect"


@contextmanager
def bisect_stack(tmp: Path, github: FakeGitHub, *repos: str) -> Iterator[Stack]:
    """The stack, its project allowed to report to ``repos``; stopped and its database dropped on the way out."""
    (tmp / "logs").mkdir(parents=True, exist_ok=True)
    flush_redis(REDIS_URL)
    name, url = create_database()
    procs = []
    try:
        project, submit, tokens = seed_project(url, "bisect", (TESTBED,))
        for repo in repos:
            allow_repo(url, project, repo)
        port = free_port()
        env = {
            **base_env(tmp),
            "ATTNPROF_BROKER_URL": REDIS_URL,
            "ATTNPROF_DATABASE_URL": url,
            "ATTNPROF_SERVICE_URL": f"http://127.0.0.1:{port}",
            "ATTNPROF_PUBLIC_URL": f"http://127.0.0.1:{port}",
            "ATTNPROF_GITHUB_API_URL": github.url,
            "ATTNPROF_GITHUB_TOKEN": "test-token-1",
            "ATTNPROF_SWEEP__INTERVAL_S": "2",
            "ATTNPROF_SWEEP__HEARTBEAT_STALE_S": "60",
            "ATTNPROF_SWEEP__ANALYZING_STALE_S": "120",
            "ATTNPROF_BISECT__WORKDIR": str(tmp / "bisect"),
        }
        s = Stack(
            url=f"http://127.0.0.1:{port}",
            database_url=url,
            env=env,
            submit_token=submit,
            project=project,
            worker_tokens=tokens,
            tmp=tmp,
        )
        logs = tmp / "logs"
        s.procs["service"] = start("service", [*ATTNPROF, "serve", "--port", str(port)], env, logs, tmp)
        analysis = [*ATTNPROF, "worker", "--analysis", "--beat-schedule", str(tmp / "beat")]
        s.procs["analysis"] = start("analysis", analysis, env, logs, tmp)
        wenv = {
            **{k: v for k, v in env.items() if k != "ATTNPROF_GITHUB_TOKEN"},  # a GPU host holds no GitHub token
            "ATTNPROF_DATABASE_URL": NO_DATABASE,
            "ATTNPROF_WORKER_TOKEN": tokens[TESTBED],
            "ATTNPROF_WORKER__TIMEOUT_S": "400",
            "ATTNPROF_WORKER__SCRATCH_DIR": str(tmp / "scratch"),
        }
        s.procs["profile"] = start(
            "profile", [*ATTNPROF, "worker", "--testbed", TESTBED, "--device", "cpu"], wenv, logs, tmp
        )
        procs = list(s.procs.values())
        wait_ready(procs)
        yield s
    finally:
        stop(procs)
        drop_database(name)
        flush_redis(REDIS_URL)
