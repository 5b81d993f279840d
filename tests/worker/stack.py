"""The pieces of a real deployment for the worker tests, and their fixtures: a Postgres database migrated with
Alembic (with a per-test rolled-back session for the plain code), a Redis database of its own,
``attnprof serve`` on a free port, and ``attnprof worker`` processes (real Celery workers, ``--pool=solo``,
profiling on the CPU). Nothing is mocked and Celery never runs eagerly.

The fixture that starts them (``stack``, once per test module) is in this folder's ``conftest.py``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis

from attnprof.server import migrate
from attnprof.server.auth import service as auth
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.projects import service as projects
from attnprof.server.testbeds import service as testbeds
from tests.pgtest import create_database, drop_database
from tests.profiling_support import tar_gz

REDIS_URL = os.environ.get("ATTNPROF_TEST_WORKER_REDIS", "redis://127.0.0.1:6379/12")
ATTNPROF = [str(Path(sys.executable).parent / "attnprof")]
FAULTS_TIMEOUT_S = 12  # wall-clock limit of the tb-faults worker (the hanging target)
# A database URL that cannot work: profile workers get it, so any database access there would fail loudly.
NO_DATABASE = "postgresql+psycopg://nobody@127.0.0.1:9/none"

TINY_TIMING = """[suite.timing]
warmup = 1
min_samples = 3
max_samples = 5
budget_s = 0.05
trace_iters = 1
"""

# The user's code of the fault tests: a factory that hangs, one that raises.
FAULTY = {
    "faulty/__init__.py": b"",
    "faulty/targets.py": b"""import os
import time


def hang(params, device):
    # Named after the test's marker (PR_SET_NAME), so the test finds it among the host's processes: in the jail,
    # its own pid is its PID namespace's, and no file it writes outside its scratch folder reaches the test.
    import ctypes

    ctypes.CDLL(None).prctl(15, params["args"]["marker"].encode()[:15], 0, 0, 0)
    time.sleep(3600)


def boom(params, device):
    seen = sorted(k for k in os.environ if k.startswith("ATTNPROF")) or "none"
    raise RuntimeError(f"boom from the user's factory; ATTNPROF variables seen: {seen}")
""",
}


def suite(name: str, cases: str) -> str:
    return f'[suite]\nname = "{name}"\n\n{TINY_TIMING}\n{cases}'


SDPA_CASE = """[[cases]]
name = "sdpa"
target = "sdpa"
backend = "math"
batch = 1
q_heads = 2
seq_q = 64
head_dim = 32
dtype = "fp32"
"""


def custom_case(name: str, target: str, args: dict[str, str] | None = None) -> str:
    extra = "".join(f'args.{k} = "{v}"\n' for k, v in (args or {}).items())
    return f'[[cases]]\nname = "{name}"\ntarget = "{target}"\n{extra}'


def host_pid_named(marker: str) -> int | None:
    """The host pid of the process whose name (``/proc/<pid>/comm``) is ``marker``, or None."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == marker[:15]:
                return int(comm.parent.name)
        except OSError:
            continue
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- Postgres -------------------------------------------------------------------------------------------


def sql(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
        return list(conn.execute(query, args).fetchall())


# --- processes ------------------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.popen.poll() is None


def start(name: str, argv: list[str], env: dict[str, str], logs: Path, cwd: Path) -> Proc:
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    return Proc(name, popen, log)


def stop(procs: list[Proc]) -> None:
    for p in procs:
        if p.alive():
            p.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for p in procs:
        try:
            p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.popen.kill()
            p.popen.wait()


def wait_for(what: str, check: Any, timeout_s: float, every_s: float = 0.2, logs: list[Proc] | None = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    tails = "".join(f"\n--- {p.name} ---\n{p.text()[-3000:]}" for p in logs or [])
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{tails}")


@dataclass
class Stack:
    url: str
    database_url: str
    env: dict[str, str]
    submit_token: str
    project: str
    worker_tokens: dict[str, str]
    tmp: Path
    procs: dict[str, Proc] = field(default_factory=dict)

    @property
    def logs(self) -> list[Proc]:
        return list(self.procs.values())

    def http(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token or self.submit_token}"}, timeout=30
        )

    def submit(
        self,
        spec: str,
        *,
        testbed: str,
        files: dict[str, bytes] | None = None,
        branch: str = "main",
        commit: str | None = None,
        base_commit: str | None = None,
    ) -> str:
        data = {"testbed": testbed, "branch": branch, "commit": commit or uuid.uuid4().hex[:12]}
        if base_commit:
            data["base_commit"] = base_commit
        upload: dict[str, Any] = {"spec": ("attnprof.toml", spec.encode())}
        if files:
            upload["bundle"] = ("src.tar.gz", tar_gz(files))
        with self.http() as http:
            r = http.post(f"/api/v1/projects/{self.project}/jobs", data=data, files=upload)
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        with self.http() as http:
            r = http.get(f"/api/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        found: dict[str, Any] = r.json()
        return found

    def wait_status(self, job_id: str, statuses: tuple[str, ...], timeout_s: float = 90) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["status"] in statuses else None

        found: dict[str, Any] = wait_for(f"job {job_id} to be {'/'.join(statuses)}", check, timeout_s, logs=self.logs)
        return found

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(REDIS_URL)

    def messages(self, queue: str) -> list[list[Any]]:
        """The args of the messages waiting on ``queue`` (a Redis list)."""
        import base64

        r = self.redis()
        try:
            return [json.loads(base64.b64decode(json.loads(m)["body"]))[0] for m in r.lrange(queue, 0, -1)]
        finally:
            r.close()


# --- fixtures -------------------------------------------------------------------------------------------


def base_env(tmp: Path) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "OMP_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        ATTNPROF_BROKER_URL=REDIS_URL,
        ATTNPROF_SWEEP__INTERVAL_S="1",
        ATTNPROF_SWEEP__QUEUED_STALE_S="2",
        ATTNPROF_SWEEP__HEARTBEAT_STALE_S="4",
        ATTNPROF_SWEEP__ANALYZING_STALE_S="15",
        ATTNPROF_WORKER__HEARTBEAT_S="0.5",
        ATTNPROF_WORKER__CACHE_DIR=str(tmp / "peaks-cache"),
        ATTNPROF_RATE_LIMIT__REQUESTS_PER_MINUTE="60000",
        ATTNPROF_RATE_LIMIT__BURST="10000",
    )
    return env


def flush_redis(url: str = REDIS_URL) -> None:
    """Empty a Redis database of the tests: no message of an earlier stack reaches this one's workers."""
    r = redis.Redis.from_url(url)
    r.flushdb()
    r.close()


def seed_project(url: str, prefix: str, testbed_names: Sequence[str]) -> tuple[str, str, dict[str, str]]:
    """Migrate the database at ``url`` and make a project with a submit token and a worker token per testbed:
    (the project's name, the submit token, {testbed: worker token})."""
    migrate.upgrade(url)
    eng = make_engine(url)
    try:
        with make_sessionmaker(eng)() as session:
            project = projects.create(session, name=f"{prefix}-{uuid.uuid4().hex[:6]}")
            submit = auth.create_project_token(session, project_id=project.id, role="submit")[1]
            tokens = {
                tb: auth.create_worker_token(session, testbed_id=testbeds.ensure(session, tb).id)[1]
                for tb in testbed_names
            }
            session.commit()
            return project.name, submit, tokens
    finally:
        eng.dispose()


def allow_repo(url: str, project: str, repo: str) -> None:
    """Let ``project`` report to ``repo``, as the service's admin does (``attnprof admin allow-repo``)."""
    from attnprof.server.projects import repository as project_repository

    eng = make_engine(url)
    try:
        with make_sessionmaker(eng)() as session:
            found = project_repository.get_by_name(session, project)
            assert found is not None, project
            projects.allow_repository(session, project_id=found.id, repo=repo, added_by="the tests")
            session.commit()
    finally:
        eng.dispose()


def wait_ready(procs: list[Proc]) -> None:
    """Wait until every worker among ``procs`` says it is ready (the service is reached over HTTP instead)."""
    for p in procs:
        if p.name != "service":
            wait_for(f"{p.name} to be ready", lambda p=p: " ready." in p.text() or not p.alive(), 90, logs=procs)
            assert p.alive(), p.text()


@contextmanager
def cpu_fleet(
    tmp: Path,
    *,
    redis_url: str,
    prefix: str,
    testbeds: Sequence[str],
    workers: Mapping[str, tuple[str, dict[str, str]]],
    env: Mapping[str, str] | None = None,
) -> Iterator[Stack]:
    """``attnprof serve``, the analysis worker with beat, and a CPU profile worker per entry of ``workers`` (its name:
    its testbed and its own environment on top of the stack's), on a fresh database with a project of ``prefix``
    holding a worker token per testbed, and Redis database ``redis_url``; stopped, the database dropped and Redis
    emptied on the way out. ``env``: the stack's settings on top of ``base_env``."""
    logs = tmp / "logs"
    logs.mkdir()
    flush_redis(redis_url)
    name, url = create_database()
    procs: dict[str, Proc] = {}
    try:
        project, submit, tokens = seed_project(url, prefix, tuple(testbeds))
        port = free_port()
        stack_env = {
            **base_env(tmp),
            "ATTNPROF_BROKER_URL": redis_url,
            "ATTNPROF_DATABASE_URL": url,
            "ATTNPROF_SERVICE_URL": f"http://127.0.0.1:{port}",
            **(env or {}),
        }
        s = Stack(
            url=f"http://127.0.0.1:{port}",
            database_url=url,
            env=stack_env,
            submit_token=submit,
            project=project,
            worker_tokens=tokens,
            tmp=tmp,
        )
        procs = s.procs
        procs["service"] = start("service", [*ATTNPROF, "serve", "--port", str(port)], stack_env, logs, tmp)
        analysis = [*ATTNPROF, "worker", "--analysis", "--beat-schedule", str(tmp / "beat")]
        procs["analysis"] = start("analysis", analysis, stack_env, logs, tmp)
        for worker, (testbed, own) in workers.items():
            wenv = {
                **stack_env,
                "ATTNPROF_DATABASE_URL": NO_DATABASE,
                "ATTNPROF_WORKER_TOKEN": tokens[testbed],
                "ATTNPROF_WORKER__TIMEOUT_S": "120",
                "ATTNPROF_WORKER__SCRATCH_DIR": str(tmp / "scratch"),
                **own,
            }
            argv = [*ATTNPROF, "worker", "--testbed", testbed, "--device", "cpu"]
            procs[worker] = start(worker, argv, wenv, logs, tmp)
        wait_ready(list(procs.values()))
        yield s
    finally:
        stop(list(procs.values()))
        drop_database(name)
        flush_redis(redis_url)
