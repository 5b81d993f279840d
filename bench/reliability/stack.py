"""The stack a scenario runs against, started as docs/service.md says (``attnprof serve``, ``attnprof worker
--analysis`` with beat, CPU profile workers in their jail): its processes, its seeded database, its API, and what
the database holds for a job."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench import pipeline_load as pipeline
from bench import service_seed as seeding
from bench.reliability.common import PARKED, ROLES, ROOT, SWEEP, TESTBED, say, wait_for
from bench.reliability.servers import OwnRedis, admin_url, own_postgres
from tests.pgcluster import Cluster


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    retired: bool = False  # stopped or killed on purpose: no supervisor starts it again

    def start(self, cwd: Path) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, env=self.env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def kill9(self) -> None:
        """SIGKILL to the process alone (what it started must die with it by itself), then its group's leftovers."""
        self.retired = True
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        self.retired = True
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # anything of its session left behind


def _ready_or_gone(proc: Proc) -> bool:
    return " ready." in proc.text() or not proc.alive()


def logged(proc: Proc, needle: str) -> bool:
    return needle in proc.text()


@dataclass
class Tenant:
    name: str
    tokens: dict[str, str]  # role -> secret
    token_ids: dict[str, int]

    def h(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}


@dataclass
class Stack:
    workdir: Path
    database_url: str
    broker_url: str
    url: str
    port: int
    env: dict[str, str]
    tenants: dict[str, Tenant]
    worker_tokens: dict[str, str]  # testbed -> secret
    procs: dict[str, Proc] = field(default_factory=dict)  # the latest process of each name
    history: list[Proc] = field(default_factory=list)  # every process started, restarted ones too
    restarts: list[dict[str, Any]] = field(default_factory=list)

    # processes

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        log = self.workdir / "logs" / f"{name}.log"
        n = 1
        while log.exists():  # a process started again gets a log of its own
            n += 1
            log = self.workdir / "logs" / f"{name}.{n}.log"
        proc = Proc(name, argv, env, log)
        self.procs[name] = proc
        self.history.append(proc)
        proc.start(self.workdir)
        return proc

    def supervise(self) -> None:
        """What the deployment's supervisor does (``restart: unless-stopped`` in docker-compose.yml): a process of the
        stack that exited by itself is started again, and the exit is recorded with the last error it logged."""
        for name, proc in list(self.procs.items()):
            if proc.retired or proc.alive() or proc.popen is None:
                continue
            text = proc.text().splitlines()
            lines = [ln for ln in text if "Unrecoverable" in ln] or [
                ln for ln in text if "CRITICAL" in ln or "ERROR/" in ln
            ]
            self.restarts.append(
                {
                    "process": name,
                    "exit_code": proc.popen.returncode,
                    "at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "last_error": (lines[-1] if lines else proc.text()[-300:]).strip()[:300],
                }
            )
            say(f"  {name} exited ({proc.popen.returncode}): started again; it said: {self.restarts[-1]['last_error']}")
            proc.retired = True
            self.start(name, proc.argv, proc.env)

    def start_service(self) -> Proc:
        proc = self.start("service", [*pipeline.attnprof_command(), "serve", "--port", str(self.port)], self.env)
        wait_for("the service to answer /healthz", self._healthy, 60, 0.2)
        return proc

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def start_analysis(self, name: str = "analysis", **extra: str) -> Proc:
        schedule = self.workdir / f"beat-{name}-{uuid.uuid4().hex[:6]}"
        argv = [*pipeline.attnprof_command(), "worker", "--analysis", "--beat-schedule", str(schedule)]
        return self.start(name, argv, {**self.env, **extra})

    def start_profile(self, name: str, testbed: str = TESTBED) -> Proc:
        env = {
            **self.env,
            "ATTNPROF_DATABASE_URL": pipeline.NO_DATABASE,
            "ATTNPROF_WORKER_TOKEN": self.worker_tokens[testbed],
            "ATTNPROF_WORKER__SCRATCH_DIR": str(self.workdir / "scratch"),
            "ATTNPROF_WORKER__TIMEOUT_S": "120",
        }
        argv = [*pipeline.attnprof_command(), "worker", "--testbed", testbed, "--device", "cpu"]
        return self.start(name, argv, env)

    def wait_ready(self, *names: str, timeout_s: float = 150.0) -> None:
        for name in names:
            proc = self.procs[name]
            found = wait_for(f"{name} to be ready", partial(_ready_or_gone, proc), timeout_s)
            if not proc.alive() or not found:
                raise RuntimeError(f"{name} exited at start:\n{proc.text()[-3000:]}")

    def stop_all(self) -> None:
        for proc in self.history:
            if proc.alive():
                assert proc.popen is not None
                proc.popen.terminate()
        for proc in self.history:
            proc.stop()

    # the database, read directly

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(seeding.libpq_url(self.database_url), connect_timeout=5) as conn:
            return list(conn.execute(query, args).fetchall())

    def counts(self) -> dict[str, int]:
        """Rows of every table an input could add to."""
        tables = (
            "projects",
            "testbeds",
            "jobs",
            "runs",
            "run_cases",
            "run_traces",
            "comparisons",
            "alerts",
            "artifacts",
            "tokens",
            "baseline_rules",
        )
        query = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in tables)
        return {str(t): int(n) for t, n in self.sql(query)}

    # the API

    def http(self, token: str | None = None, timeout_s: float = 30.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def job(self, job_id: str) -> dict[str, Any]:
        with self.http(self.tenants["a"].tokens["read"]) as http:
            r = http.get(f"/api/v1/jobs/{job_id}")
        r.raise_for_status()
        found: dict[str, Any] = r.json()
        return found

    def submit(
        self,
        spec: str,
        *,
        tenant: str = "a",
        testbed: str = TESTBED,
        bundle: bytes | None = None,
        commit: str | None = None,
        branch: str = "main",
    ) -> str:
        files: dict[str, Any] = {"spec": ("attnprof.toml", spec.encode())}
        if bundle is not None:
            files["bundle"] = ("src.tar.gz", bundle)
        data = {"testbed": testbed, "branch": branch, "commit": commit or uuid.uuid4().hex[:12]}
        with self.http(self.tenants[tenant].tokens["submit"]) as http:
            r = http.post(f"/api/v1/projects/{self.tenants[tenant].name}/jobs", data=data, files=files)
        if r.status_code != 202:
            raise RuntimeError(f"job submission refused: {r.status_code} {r.text[:500]}")
        return str(r.json()["id"])

    def wait_final(self, job_ids: list[str], timeout_s: float, label: str) -> dict[str, dict[str, Any]]:
        """Poll until every job is final (or ``timeout_s``); a progress line every 10 s."""
        deadline = time.monotonic() + timeout_s
        last = 0.0
        jobs: dict[str, dict[str, Any]] = {}
        while True:
            self.supervise()
            jobs = {}
            for job_id in job_ids:
                try:
                    jobs[job_id] = self.job(job_id)
                except httpx.HTTPError as exc:
                    jobs[job_id] = {"status": f"unreadable: {exc}"}
            states = [j["status"] for j in jobs.values()]
            done = all(s in pipeline.FINAL for s in states)
            if done or time.monotonic() - last > 10:
                tally = {s: states.count(s) for s in sorted(set(states))}
                say(f"  [{label}] {tally}")
                last = time.monotonic()
            if done or time.monotonic() > deadline:
                return jobs
            time.sleep(1.0)

    # what the database holds for a job

    def runs_of(self, job_id: str) -> list[tuple[str, int]]:
        return [(str(r), int(a)) for r, a in self.sql("SELECT id, attempt FROM runs WHERE job_id = %s", job_id)]

    def comparisons_of(self, run_id: str) -> int:
        return int(self.sql("SELECT count(*) FROM comparisons WHERE candidate_run_id = %s", run_id)[0][0])


def _stack_env(workdir: Path, database_url: str, broker_url: str, url: str, cache_dir: Path) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        # The stack runs the code of the tree this script is in (a checkout, or an export of one commit).
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        ATTNPROF_DATABASE_URL=database_url,
        ATTNPROF_BROKER_URL=broker_url,
        ATTNPROF_PUBLIC_URL=url,
        ATTNPROF_SERVICE_URL=url,
        ATTNPROF_WORKER__CACHE_DIR=str(cache_dir),
        ATTNPROF_RATE_LIMIT__REQUESTS_PER_MINUTE="600000",
        ATTNPROF_RATE_LIMIT__BURST="100000",
        **SWEEP,
    )
    return env


def seed(database_url: str) -> tuple[dict[str, Tenant], dict[str, str]]:
    """Migrate ``database_url`` to head; two projects (``a``, ``b``) with a token of each role, and a worker token
    for each of the benchmark's testbeds, all made by the service's own code."""
    from attnprof.server import migrate
    from attnprof.server.auth import service as auth
    from attnprof.server.db import make_engine, make_sessionmaker
    from attnprof.server.projects import service as projects
    from attnprof.server.testbeds import service as testbeds

    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            tenants = {}
            for key in ("a", "b"):
                project = projects.create(session, name=f"rel-{key}")
                made = {
                    role: auth.create_project_token(session, project_id=project.id, role=role, name=f"{key}-{role}")
                    for role in ROLES
                }
                tenants[key] = Tenant(
                    project.name, {r: m[1] for r, m in made.items()}, {r: m[0].id for r, m in made.items()}
                )
            workers = {
                tb: auth.create_worker_token(session, testbed_id=testbeds.ensure(session, tb).id, name=tb)[1]
                for tb in (TESTBED, PARKED)
            }
            session.commit()
            return tenants, workers
    finally:
        engine.dispose()


@contextmanager
def stack_infra(args: argparse.Namespace, name: str, *, aof: bool = True) -> Iterator[tuple[Stack, Cluster, OwnRedis]]:
    """A Postgres cluster and a Redis of this scenario's own, a migrated and seeded database, and a ``Stack`` with no
    process started yet; everything stopped and removed on the way out."""
    workdir = Path(tempfile.mkdtemp(prefix=f"attnprof-rel-{name}-"))
    (workdir / "logs").mkdir()
    redis_server = OwnRedis(workdir / "redis", aof=aof)
    stack: Stack | None = None
    try:
        redis_server.start()
        with own_postgres() as cluster:
            database_url = seeding.create_database(admin_url(cluster), "attnprof_rel")
            tenants, workers = seed(database_url)
            port = pipeline.free_port()
            url = f"http://127.0.0.1:{port}"
            env = _stack_env(workdir, database_url, redis_server.url(), url, args.cache_dir)
            stack = Stack(workdir, database_url, redis_server.url(), url, port, env, tenants, workers)
            try:
                yield stack, cluster, redis_server
            finally:
                stack.stop_all()
                if args.keep:
                    say(f"  kept {workdir}")
    finally:
        redis_server.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def log_tails(stack: Stack, chars: int = 2500) -> dict[str, str]:
    return {name: p.text()[-chars:] for name, p in stack.procs.items()}


def job_row(stack: Stack, job_id: str) -> dict[str, Any]:
    cols = "status, attempts, claimed_by, started_at, lease_expires_at, finished_at, reason, run_id, verdict"
    values = stack.sql(f"SELECT {cols} FROM jobs WHERE id = %s", job_id)[0]
    return dict(zip(cols.split(", "), values, strict=True))


def log_time(procs: list[Proc], needle: str) -> float | None:
    """The time (epoch seconds) of the first line holding ``needle`` in the Celery logs of ``procs``
    (``[2026-12-01 20:29:19,074: INFO/MainProcess] ...``, local time)."""
    for proc in procs:
        for line in proc.text().splitlines():
            if needle in line and line.startswith("[") and len(line) > 24:
                with contextlib.suppress(ValueError):
                    return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def analysers(stack: Stack) -> list[Proc]:
    """Every analysis worker the stack started (restarted ones too): the sweep's log lines are in theirs."""
    return [p for p in stack.history if p.name.startswith("analysis")]
