"""Reliability and security of the whole stack, measured the same way each time: processes killed, the broker and
the database taken away, generated and hand-made hostile requests, other tenants' tokens, hostile jobs.

    .venv/bin/python bench/reliability.py all                  # every scenario (~15 min on 2 cores), then the report
    .venv/bin/python bench/reliability.py profile-kill         # one scenario: its raw JSON under out/reliability/
    .venv/bin/python bench/reliability.py report               # the report again from out/reliability/*.json
    .venv/bin/python bench/reliability.py report --from bench/reports/data/reliability-2026-12-01/summary.json
                                                               # the committed report again from its summary

Scenarios (each bounded in time, each against the real stack started as docs/service.md says: ``attnprof serve``,
``attnprof worker --analysis`` with beat, CPU profile workers ``attnprof worker --testbed T --device cpu`` in
their bubblewrap jail):

``profile-kill``   a profile worker killed with SIGKILL mid-job (``--tries``): exactly one run stored per job, the
                   takeover time and its parts (lease, sweep, claim by the other worker);
``analysis-kill``  the analysis worker killed with SIGKILL mid-analysis (held there by ``ATTNPROF_ANALYSIS__PAUSE_S``):
                   the job done within a minute of the kill, exactly one comparison, also once the dead worker's
                   message is delivered again;
``redis``          Redis killed (SIGKILL) with 8 jobs in flight, without and with its append-only file, and Redis down
                   30 s while jobs are submitted: every job done, none lost or stored twice;
``postgres``       Postgres stopped and started again under 200 submissions: no accepted job lost, none stored that was
                   refused, the answers by kind (the 503 JSON error, anything else); ``attnprof submit --wait``
                   across a restart ends with a verdict;
``schemathesis``   generated requests against ``/openapi.json`` and ``/internal/openapi.json`` (a claimed job's token
                   per case) over HTTP: cases and server errors;
``bad-inputs``     a catalogue of hand-made hostile inputs: each must get a 4xx that names the field, and no row change;
``isolation``      project A's tokens of each role against project B's objects, read tokens on write routes, worker
                   and job tokens where they do not belong: each must be refused, and nothing of B change;
``hostile-jobs``   ``tests/worker/test_jail.py`` and ``tests/worker/test_hostile_jobs.py``: their outcome.

Everything runs on loopback with a Redis server and a Postgres cluster of the benchmark's own (free ports, temporary
folders), never the shared ones: Redis is killed and Postgres stopped here. Leases and the sweep are shortened
(``SWEEP``, below, and in the report) so that a takeover takes seconds rather than the production minute; the report
splits each takeover into its parts so the production figure follows from the production settings.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gzip
import io
import json
import os
import platform
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pipeline_load as pipeline  # noqa: E402
import service_seed as seeding  # noqa: E402

from tests.pgcluster import Cluster, _bindir  # noqa: E402

OUT = ROOT / "out" / "reliability"
REPORT = ROOT / "bench" / "reports" / "reliability.md"
SCENARIOS = (
    "profile-kill",
    "analysis-kill",
    "redis",
    "postgres",
    "schemathesis",
    "bad-inputs",
    "isolation",
    "hostile-jobs",
)
TESTBED = "rel-cpu"
PARKED = "rel-parked"  # a testbed with no worker: its jobs stay queued
# Leases and sweep, shortened (production: interval 10 s, heartbeat 10 s, running lease 60 s, analyzing lease 120 s).
SWEEP = {
    "ATTNPROF_SWEEP__INTERVAL_S": "2",
    "ATTNPROF_SWEEP__QUEUED_STALE_S": "6",
    "ATTNPROF_SWEEP__HEARTBEAT_STALE_S": "8",
    "ATTNPROF_SWEEP__ANALYZING_STALE_S": "10",
    "ATTNPROF_WORKER__HEARTBEAT_S": "1",
}
ROLES = ("admin", "submit", "read")


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def now_s() -> float:
    return time.time()


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.25) -> Any:
    """``check()`` until it is true (returned), or a ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)


# --- the broker and the database of the benchmark's own ---------------------------------------------------


@dataclass
class OwnRedis:
    """``redis-server`` as a child process on a free loopback port, its files in ``root``; killed and started
    again on the same port and folder (with ``aof``, it comes back with what its append-only file holds)."""

    root: Path
    aof: bool
    port: int = field(default_factory=pipeline.free_port)
    password: str = field(default_factory=lambda: secrets.token_hex(16))
    popen: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root)]
        argv += ["--daemonize", "no", "--save", "", "--requirepass", self.password, "--logfile", "redis.log"]
        argv += ["--appendonly", "yes" if self.aof else "no", "--appendfsync", "everysec"]
        self.popen = subprocess.Popen(argv, cwd=self.root, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_for("redis to answer", self.answers, 20, 0.05)

    def answers(self) -> bool:
        import redis

        try:
            r = redis.Redis.from_url(self.url(), socket_timeout=1)
            try:
                return bool(r.ping())
            finally:
                r.close()
        except redis.RedisError:
            return False

    def kill9(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait()

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url(), socket_timeout=5)

    def version(self) -> str:
        done = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
        return done.stdout.strip()


@contextmanager
def own_postgres() -> Iterator[Cluster]:
    """A Postgres cluster of the benchmark's own (``tests/pgcluster.py``): initdb on a free port in a temporary
    folder, as the postgres user when this runs as root; stopped and removed on the way out."""
    root = Path(tempfile.mkdtemp(prefix="attnprof-rel-pg-"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    cluster = Cluster(root=root, port=pipeline.free_port(), bindir=_bindir())
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        if (cluster.data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def admin_url(cluster: Cluster) -> str:
    return seeding.libpq_url(cluster.url())


# --- the stack --------------------------------------------------------------------------------------------


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


def _logged(proc: Proc, needle: str) -> bool:
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


# --- suites ------------------------------------------------------------------------------------------------

BUNDLE = pipeline.bundle_bytes(pipeline.BUNDLE_SOURCE, pipeline.BUNDLE_PACKAGE)


def tiny_suite() -> str:
    """The small suite's first case alone, on SDPA's math backend (no bundle needed): the cheapest real job, for
    the scenarios that need many jobs rather than long ones."""
    head, first, *_ = pipeline.SMALL_SUITE.split("\n[[cases]]")
    return head + "\n[[cases]]" + first.replace('backends = ["math", "flash"]', 'backends = ["math"]')


def small_suite(budget_s: float) -> str:
    """The pipeline benchmark's small CPU suite (4 cases, one from the job's bundle) with ``budget_s`` of timing a
    case: long enough to be killed mid-way, short enough for many jobs."""
    return pipeline.SMALL_SUITE.replace("budget_s = 0.1", f"budget_s = {budget_s}").replace(
        "max_samples = 30", "max_samples = 2000"
    )


# --- 1. a profile worker killed mid-job ---------------------------------------------------------------------


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value else None


def _row(stack: Stack, job_id: str) -> dict[str, Any]:
    cols = "status, attempts, claimed_by, started_at, lease_expires_at, finished_at, reason, run_id, verdict"
    values = stack.sql(f"SELECT {cols} FROM jobs WHERE id = %s", job_id)[0]
    return dict(zip(cols.split(", "), values, strict=True))


def _job_processes(pattern: str) -> list[int]:
    """Live processes whose command line holds ``pattern`` (a job's scratch folder name)."""
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found if int(p) != os.getpid()]


def _profile_kill_try(stack: Stack, spec: str, index: int, kill_after_s: float) -> dict[str, Any]:
    job_id = stack.submit(spec, bundle=BUNDLE, branch=f"kill-{index}")
    out: dict[str, Any] = {"job": job_id}
    row = wait_for("the job to be claimed", lambda: (r := _row(stack, job_id))["status"] == "running" and r, 60)
    victim = next(p for p in stack.procs.values() if f"/pid{p.pid}" in (row["claimed_by"] or "") and p.alive())
    survivors = [
        p.name for p in stack.procs.values() if p.name.startswith("profile-") and p is not victim and p.alive()
    ]
    line = f"job {job_id} attempt 1: profiling in "
    wait_for("the profiling subprocess to start", lambda: line in victim.text(), 30, 0.05)
    scratch = victim.text().split(line, 1)[1].split()[0]
    time.sleep(kill_after_s)  # well inside the profiling (the subprocess needs ~1 s to import torch)
    children = _job_processes(Path(scratch).name)
    lease = _row(stack, job_id)["lease_expires_at"]
    t_kill = now_s()
    victim.kill9()
    out.update(victim=victim.name, survivors=survivors, subprocesses_at_kill=len(children), status_at_kill="running")
    out["lease_left_at_kill_s"] = round(lease.timestamp() - t_kill, 3) if lease else None
    t_requeued = t_claimed = t_orphans_gone = None
    final = None
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        row = _row(stack, job_id)
        t = now_s()
        if t_orphans_gone is None and not _job_processes(Path(scratch).name):
            t_orphans_gone = t
        if t_requeued is None and (row["status"] == "queued" or row["attempts"] >= 2):
            t_requeued = t
        if t_claimed is None and row["attempts"] >= 2 and row["started_at"]:
            t_claimed = row["started_at"].timestamp()
        if row["status"] in pipeline.FINAL:
            final = row
            break
        time.sleep(0.2)
    runs = stack.runs_of(job_id)
    # The sweep's own log says when it re-queued the job (the row's timestamps move on at the next claim).
    t_requeued = log_time(_analysers(stack), f"job {job_id}: sent profile again") or t_requeued
    out.update(
        status=final["status"] if final else f"not final: {_row(stack, job_id)['status']}",
        verdict=final["verdict"] if final else None,
        attempts=final["attempts"] if final else None,
        reason=(final or {}).get("reason"),
        claimed_by_survivor=bool(
            final and any(f"/pid{stack.procs[s].pid}" in (final["claimed_by"] or "") for s in survivors)
        ),
        runs=[{"run": r, "attempt": a} for r, a in runs],
        comparisons=stack.comparisons_of(runs[0][0]) if len(runs) == 1 else None,
        kill_to_orphans_gone_s=round(t_orphans_gone - t_kill, 3) if t_orphans_gone else None,
        kill_to_requeued_s=round(t_requeued - t_kill, 3) if t_requeued else None,
        kill_to_lease_expiry_s=out["lease_left_at_kill_s"],
        kill_to_claimed_s=round(t_claimed - t_kill, 3) if t_claimed else None,
        kill_to_done_s=round(final["finished_at"].timestamp() - t_kill, 3) if final and final["finished_at"] else None,
    )
    out["ok"] = bool(
        out["status"] == "done"
        and len(runs) == 1
        and runs[0][1] == 2
        and out["comparisons"] == 1
        and out["claimed_by_survivor"]
    )
    say(
        f"  try {index + 1}: {out['status']}, runs {[(r[:8], a) for r, a in runs]}, comparisons {out['comparisons']}; "
        f"kill → re-queued {out['kill_to_requeued_s']} s → claimed {out['kill_to_claimed_s']} s → done "
        f"{out['kill_to_done_s']} s; subprocess gone after {out['kill_to_orphans_gone_s']} s"
    )
    # The dead worker comes back, as its supervisor would start it again, before the next try.
    stack.start_profile(victim.name)
    stack.wait_ready(victim.name)
    return out


def scenario_profile_kill(args: argparse.Namespace) -> dict[str, Any]:
    spec = small_suite(1.0)
    with stack_infra(args, "profile-kill") as (stack, _cluster, _redis):
        stack.start_service()
        stack.start_analysis()
        for name in ("profile-1", "profile-2"):
            stack.start_profile(name)
        stack.wait_ready("analysis", "profile-1", "profile-2")
        say("  stack up; a warm-up job first (its analysis has no baseline)")
        warm = stack.submit(small_suite(0.1), bundle=BUNDLE)
        stack.wait_final([warm], 90, "warm-up")
        tries = []
        for i in range(args.tries):
            try:
                tries.append(_profile_kill_try(stack, spec, i, args.kill_after_s))
            except (TimeoutError, RuntimeError, StopIteration) as exc:
                tries.append({"ok": False, "error": str(exc), "logs": log_tails(stack)})
                say(f"  try {i + 1}: {exc}")
        return {
            "tries": tries,
            "suite": "bench/pipeline_load.py's small CPU suite, budget_s = 1.0 per case",
            "kill_after_s": args.kill_after_s,
            "logs": log_tails(stack) if not all(t.get("ok") for t in tries) else {},
        }


def log_time(procs: list[Proc], needle: str) -> float | None:
    """The time (epoch seconds) of the first line holding ``needle`` in the Celery logs of ``procs``
    (``[2026-12-01 20:29:19,074: INFO/MainProcess] ...``, local time)."""
    for proc in procs:
        for line in proc.text().splitlines():
            if needle in line and line.startswith("[") and len(line) > 24:
                with contextlib.suppress(ValueError):
                    return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def _analysers(stack: Stack) -> list[Proc]:
    """Every analysis worker the stack started (restarted ones too): the sweep's log lines are in theirs."""
    return [p for p in stack.history if p.name.startswith("analysis")]


# --- 2. the analysis worker killed mid-analysis -----------------------------------------------------------


def _unacked(redis_server: OwnRedis, job_id: str) -> dict[bytes, bytes]:
    """Deliveries of ``analysis.run(job_id)`` in kombu's ``unacked`` hash (a worker took them, none acknowledged)."""
    r = redis_server.client()
    try:
        return {tag: raw for tag, raw in r.hgetall("unacked").items() if job_id.encode() in raw}
    finally:
        r.close()


def _analysis_kill_try(stack: Stack, redis_server: OwnRedis, index: int) -> dict[str, Any]:
    slow = stack.start_analysis(f"analysis-slow-{index + 1}", ATTNPROF_ANALYSIS__PAUSE_S="600")
    stack.wait_ready(slow.name)
    job_id = stack.submit(tiny_suite(), branch=f"analysis-kill-{index}")
    out: dict[str, Any] = {"job": job_id}
    wait_for("the analysis to be paused mid-way", lambda: f"job {job_id}: pausing" in slow.text(), 90, 0.1)
    run_id = _row(stack, job_id)["run_id"]
    out["comparisons_before_kill"] = stack.comparisons_of(run_id)
    row = _row(stack, job_id)
    out["status_at_kill"] = row["status"]
    t_kill = now_s()
    slow.kill9()
    out["lease_left_at_kill_s"] = (
        round(row["lease_expires_at"].timestamp() - t_kill, 3) if row["lease_expires_at"] else None
    )
    out["unacked_after_kill"] = len(_unacked(redis_server, job_id))
    # A supervisor starts the analysis worker again (compose's restart, systemd): a fresh one, no pause.
    fresh = stack.start_analysis(f"analysis-fresh-{index + 1}")
    stack.wait_ready(fresh.name)
    t_ready = now_s()
    final = None
    with contextlib.suppress(TimeoutError):
        final = wait_for(
            "the job to be final",
            lambda: (r := _row(stack, job_id))["status"] in pipeline.FINAL and r,
            90,
            0.2,
        )
    t_resent = log_time([fresh], f"job {job_id}: sent analysis again")
    out.update(
        status=final["status"] if final else f"not final: {_row(stack, job_id)['status']}",
        verdict=final["verdict"] if final else None,
        kill_to_fresh_ready_s=round(t_ready - t_kill, 3),
        kill_to_resent_s=round(t_resent - t_kill, 3) if t_resent else None,
        kill_to_done_s=round(final["finished_at"].timestamp() - t_kill, 3) if final and final["finished_at"] else None,
        comparisons=stack.comparisons_of(run_id),
        runs=len(stack.runs_of(job_id)),
    )
    # The dead worker's delivery, restored as kombu restores it after visibility_timeout (3 h): it must change nothing.
    left = _unacked(redis_server, job_id)
    out["restored_deliveries"] = len(left)
    for tag, raw in left.items():
        message, _exchange, routing_key = json.loads(raw)
        r = redis_server.client()
        try:
            r.lpush(routing_key, json.dumps(message))
            r.hdel("unacked", tag)
        finally:
            r.close()
        task_id = message["headers"]["id"]
        with contextlib.suppress(TimeoutError):
            wait_for("the restored message to run", partial(_logged, fresh, f"analysis.run[{task_id}] succeeded"), 30)
    after = _row(stack, job_id)
    out["after_restore"] = {
        "status": after["status"],
        "verdict": after["verdict"],
        "finished_at_unchanged": bool(final and after["finished_at"] == final["finished_at"]),
        "comparisons": stack.comparisons_of(run_id),
    }
    out["ok"] = bool(
        final
        and final["status"] == "done"
        and out["comparisons"] == 1
        and out["after_restore"]["comparisons"] == 1
        and out["after_restore"]["finished_at_unchanged"]
        and out["kill_to_done_s"] is not None
        and out["kill_to_done_s"] < 60
    )
    say(
        f"  try {index + 1}: {out['status']} {out['verdict']}, comparisons {out['comparisons']} "
        f"(after the restored delivery {out['after_restore']['comparisons']}); kill → fresh worker ready "
        f"{out['kill_to_fresh_ready_s']} s → analysis resent {out['kill_to_resent_s']} s → done "
        f"{out['kill_to_done_s']} s"
    )
    fresh.stop()  # the next try starts its own slow worker
    return out


def scenario_analysis_kill(args: argparse.Namespace) -> dict[str, Any]:
    with stack_infra(args, "analysis-kill") as (stack, _cluster, redis_server):
        stack.start_service()
        stack.start_profile("profile-1")
        stack.wait_ready("profile-1")
        tries = []
        for i in range(args.tries):
            try:
                tries.append(_analysis_kill_try(stack, redis_server, i))
            except (TimeoutError, RuntimeError) as exc:
                tries.append({"ok": False, "error": str(exc), "logs": log_tails(stack)})
                say(f"  try {i + 1}: {exc}")
                for proc in _analysers(stack):
                    proc.stop()
        return {"tries": tries, "pause_s": 600}


# --- 3. Redis killed, Redis down ----------------------------------------------------------------------------


def _audit_jobs(stack: Stack, job_ids: list[str], jobs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the database holds for ``job_ids``: their states, runs per job, comparisons per run, and every job
    that was lost (not done) or stored twice."""
    per_job = []
    for job_id in job_ids:
        runs = stack.runs_of(job_id)
        per_job.append(
            {
                "job": job_id,
                "status": jobs[job_id]["status"],
                "attempts": jobs[job_id].get("attempts"),
                "runs": len(runs),
                "comparisons": [stack.comparisons_of(r) for r, _ in runs],
                "reason": jobs[job_id].get("reason"),
            }
        )
    sweeps = _analysers(stack)
    return {
        "jobs": len(job_ids),
        "done": sum(1 for j in per_job if j["status"] == "done"),
        "not_done": [j for j in per_job if j["status"] != "done"],
        "stored_twice": [j for j in per_job if j["runs"] > 1 or any(c > 1 for c in j["comparisons"])],
        "without_run": [j["job"] for j in per_job if j["runs"] == 0],
        "attempts": sorted(j["attempts"] or 0 for j in per_job),
        "profile_resent": sum(p.text().count(": sent profile again") for p in sweeps),
        "analysis_resent": sum(p.text().count(": sent analysis again") for p in sweeps),
        "per_job": per_job,
    }


def _in_flight(stack: Stack, job_ids: list[str]) -> dict[str, int]:
    states = [s for (s,) in stack.sql("SELECT status FROM jobs WHERE id = ANY(%s)", job_ids)]
    return {k: states.count(k) for k in sorted(set(states))}


def _final_s(t_end: str | None, since: float) -> float | None:
    """Seconds from ``since`` (epoch) to ``t_end`` (an ISO timestamp of the API)."""
    moment = pipeline.utc(t_end)
    return round(moment.timestamp() - since, 2) if moment else None


def _redis_kill_case(args: argparse.Namespace, aof: bool, down_s: float) -> dict[str, Any]:
    label = "with AOF" if aof else "without AOF"
    with stack_infra(args, f"redis-{'aof' if aof else 'noaof'}", aof=aof) as (stack, _cluster, redis_server):
        stack.start_service()
        stack.start_analysis()
        for name in ("profile-1", "profile-2"):
            stack.start_profile(name)
        stack.wait_ready("analysis", "profile-1", "profile-2")
        ids = [stack.submit(tiny_suite(), branch=f"redis-{i}") for i in range(args.redis_jobs)]
        wait_for("two jobs running", lambda: _in_flight(stack, ids).get("running", 0) >= 2, 60, 0.1)
        time.sleep(1.0)
        at_kill = _in_flight(stack, ids)
        queue_len = int(redis_server.client().llen(f"profile.{TESTBED}"))
        t_kill = now_s()
        redis_server.kill9()
        say(f"  [{label}] Redis killed with {at_kill} ({queue_len} messages waiting); down {down_s:.0f} s")
        time.sleep(down_s)
        redis_server.start()
        t_back = now_s()
        restored = int(redis_server.client().llen(f"profile.{TESTBED}"))
        jobs = stack.wait_final(ids, args.redis_wait_s, label)
        t_end = max((j["finished_at"] for j in jobs.values() if j.get("finished_at")), default=None)
        audit = _audit_jobs(stack, ids, jobs)
        alive = {name: p.alive() for name, p in stack.procs.items()}
        out = {
            "aof": aof,
            "down_s": down_s,
            "at_kill": at_kill,
            "messages_waiting_at_kill": queue_len,
            "messages_after_restart": restored,
            "back_to_all_final_s": _final_s(t_end, t_back),
            "kill_to_all_final_s": _final_s(t_end, t_kill),
            "processes_alive_after": alive,
            "restarts": stack.restarts,
            **audit,
        }
        # The figure: every job done, none stored twice. A worker that exited on its own is reported beside it.
        out["ok"] = audit["done"] == len(ids) and not audit["stored_twice"]
        if not out["ok"]:
            out["logs"] = log_tails(stack)
        say(
            f"  [{label}] {audit['done']}/{len(ids)} done, stored twice {len(audit['stored_twice'])}, "
            f"profile resent {audit['profile_resent']}, analysis resent {audit['analysis_resent']}; "
            f"all final {out['back_to_all_final_s']} s after Redis was back"
        )
        return out


def _redis_down_during_submissions(args: argparse.Namespace, down_s: float) -> dict[str, Any]:
    with stack_infra(args, "redis-down", aof=True) as (stack, _cluster, redis_server):
        stack.start_service()
        stack.start_analysis()
        for name in ("profile-1", "profile-2"):
            stack.start_profile(name)
        stack.wait_ready("analysis", "profile-1", "profile-2")
        spec = tiny_suite()
        ids = [stack.submit(spec, branch="before") for _ in range(2)]
        redis_server.kill9()
        t_kill = now_s()
        say(f"  [down {down_s:.0f} s] Redis killed; submitting while it is down")
        answers = []
        readyz = []
        tenant = stack.tenants["a"]
        while now_s() - t_kill < down_s:
            t0 = time.perf_counter()
            with stack.http(tenant.tokens["submit"]) as http:
                r = http.post(
                    f"/api/v1/projects/{tenant.name}/jobs",
                    data={"testbed": TESTBED, "branch": "during", "commit": uuid.uuid4().hex[:12]},
                    files={"spec": ("attnprof.toml", spec.encode())},
                )
                answers.append({"status": r.status_code, "seconds": round(time.perf_counter() - t0, 3)})
                if r.status_code == 202:
                    ids.append(str(r.json()["id"]))
                ready = http.get("/readyz")
                readyz.append({"status": ready.status_code, "body": ready.text[:200]})
            time.sleep(max(0.0, 4.0 - (time.perf_counter() - t0)))
        redis_server.start()
        t_back = now_s()
        say(f"  [down {down_s:.0f} s] Redis back after {t_back - t_kill:.1f} s; {len(answers)} submissions while down")
        ids += [stack.submit(spec, branch="after") for _ in range(2)]
        jobs = stack.wait_final(ids, args.redis_wait_s, f"down {down_s:.0f} s")
        t_end = max((j["finished_at"] for j in jobs.values() if j.get("finished_at")), default=None)
        audit = _audit_jobs(stack, ids, jobs)
        alive = {name: p.alive() for name, p in stack.procs.items()}
        out = {
            "aof": True,
            "down_s": round(t_back - t_kill, 1),
            "submissions_while_down": answers,
            "readyz_while_down": readyz[:3],
            "back_to_all_final_s": _final_s(t_end, t_back),
            "processes_alive_after": alive,
            "restarts": stack.restarts,
            **audit,
        }
        accepted = sum(1 for a in answers if a["status"] == 202)
        out["ok"] = audit["done"] == len(ids) and not audit["stored_twice"] and accepted == len(answers)
        if not out["ok"]:
            out["logs"] = log_tails(stack)
        say(
            f"  [down {down_s:.0f} s] {accepted}/{len(answers)} submissions accepted while down; {audit['done']}/"
            f"{len(ids)} done, stored twice {len(audit['stored_twice'])}; all final {out['back_to_all_final_s']} s "
            "after Redis was back"
        )
        return out


def _redis_kill_mid_analysis(args: argparse.Namespace) -> dict[str, Any]:
    """Redis killed while the analysis worker holds a message (an analysis held mid-way for a few seconds by the
    pause knob): does the worker ride out the outage, and does the job end?"""
    with stack_infra(args, "redis-mid-analysis", aof=True) as (stack, _cluster, redis_server):
        stack.start_service()
        analysis = stack.start_analysis(ATTNPROF_ANALYSIS__PAUSE_S="8")
        stack.start_profile("profile-1")
        stack.wait_ready("analysis", "profile-1")
        job_id = stack.submit(tiny_suite(), branch="mid-analysis")
        wait_for("the analysis to be paused mid-way", lambda: f"job {job_id}: pausing" in analysis.text(), 90, 0.1)
        redis_server.kill9()
        time.sleep(3.0)
        alive_while_down = analysis.alive()
        redis_server.start()
        t_back = now_s()
        # The held analysis ends 8 s after it paused; a worker that is going away exits soon after.
        with contextlib.suppress(TimeoutError):
            wait_for("the worker to exit", lambda: not analysis.alive(), 25, 0.5)
        exit_line = next((ln for ln in analysis.text().splitlines() if "Unrecoverable" in ln), None)
        out: dict[str, Any] = {
            "alive_while_down": alive_while_down,
            "worker_exited": not analysis.alive(),
            "exit_code": analysis.popen.returncode if analysis.popen and not analysis.alive() else None,
            "unrecoverable_error": exit_line[:300] if exit_line else None,
            "status_when_worker_gone": _row(stack, job_id)["status"],
        }
        # With the supervisor starting it again (as compose does), a second job goes through.
        stack.supervise()
        stack.wait_ready("analysis")
        second = stack.submit(tiny_suite(), branch="mid-analysis")
        jobs = stack.wait_final([job_id, second], 90, "mid-analysis")
        audit = _audit_jobs(stack, [job_id, second], jobs)
        out.update(restarts=stack.restarts, back_to_check_s=round(now_s() - t_back, 1), **audit)
        out["ok"] = audit["done"] == 2 and not audit["stored_twice"]
        say(
            f"  [mid-analysis] worker alive while Redis was down: {alive_while_down}; exited after: "
            f"{out['worker_exited']} ({out['unrecoverable_error'] or 'no error'}); {audit['done']}/2 done"
        )
        return out


def scenario_redis(args: argparse.Namespace) -> dict[str, Any]:
    cases: dict[str, Any] = {}
    runs: tuple[tuple[str, Callable[[], dict[str, Any]]], ...] = (
        ("kill_without_aof", lambda: _redis_kill_case(args, aof=False, down_s=3.0)),
        ("kill_with_aof", lambda: _redis_kill_case(args, aof=True, down_s=3.0)),
        ("down_30s_during_submissions", lambda: _redis_down_during_submissions(args, down_s=30.0)),
        ("kill_mid_analysis", lambda: _redis_kill_mid_analysis(args)),
    )
    for key, run in runs:
        try:
            cases[key] = run()
        except (TimeoutError, RuntimeError) as exc:
            cases[key] = {"ok": False, "error": str(exc)}
            say(f"  [{key}] {exc}")
    return {"cases": cases, "jobs_per_kill": args.redis_jobs}


# --- 4. Postgres stopped and started under submissions ---------------------------------------------------------


def _answer_kind(r: httpx.Response) -> str:
    """How an answer reads: ``accepted``, ``503 json`` (the unavailable error with Retry-After), or what else."""
    if r.status_code == 202:
        return "accepted"
    ctype = r.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        try:
            body = r.json()
        except ValueError:
            return f"{r.status_code} bad json"
        if r.status_code == 503 and body.get("error") == "unavailable" and r.headers.get("Retry-After", "").isdigit():
            return "503 json"
        return f"{r.status_code} json {body.get('error')}"
    return f"{r.status_code} {ctype.split(';')[0] or 'no content-type'}"


def _storm(stack: Stack, cluster: Cluster, n: int, restart_after: int, down_s: float) -> dict[str, Any]:
    """``n`` submissions from 4 threads (each pausing 0.25 s between its own), Postgres stopped once ``restart_after``
    have been answered and started again ``down_s`` later; every answer recorded, nothing retried."""
    tenant = stack.tenants["a"]
    spec = small_suite(0.1)
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()
    todo = list(range(n))
    outage: dict[str, float] = {}

    def one(i: int, http: httpx.Client) -> None:
        commit = f"storm{i:04d}"
        t0 = now_s()
        row: dict[str, Any] = {"i": i, "commit": commit, "key": f"storm-{i}-{uuid.uuid4().hex[:8]}", "t": t0}
        try:
            r = http.post(
                f"/api/v1/projects/{tenant.name}/jobs",
                data={"testbed": PARKED, "branch": "storm", "commit": commit},
                files={"spec": ("attnprof.toml", spec.encode())},
                headers={"Idempotency-Key": row["key"]},
            )
            row.update(status=r.status_code, kind=_answer_kind(r), body=r.text[:200])
            if r.status_code == 202:
                row["job"] = r.json()["id"]
        except httpx.HTTPError as exc:
            row.update(status=None, kind=f"transport {type(exc).__name__}", body=str(exc)[:200])
        row["seconds"] = round(now_s() - t0, 3)
        with lock:
            answers.append(row)

    def sender() -> None:
        with stack.http(tenant.tokens["submit"], timeout_s=30) as http:
            while True:
                with lock:
                    if not todo:
                        return
                    i = todo.pop(0)
                one(i, http)
                time.sleep(0.25)

    def restarter() -> None:
        wait_for("submissions before the restart", lambda: len(answers) >= restart_after, 120, 0.05)
        outage["stop"] = now_s()
        cluster.stop("fast")
        outage["stopped"] = now_s()
        time.sleep(down_s)
        cluster.start()
        outage["started"] = now_s()

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(4)]
    pg = threading.Thread(target=restarter, daemon=True)
    pg.start()
    for t in threads:
        t.start()
    for t in [*threads, pg]:
        t.join(timeout=240)
    answers.sort(key=lambda a: a["i"])
    during = [a for a in answers if outage and outage["stop"] <= a["t"] <= outage.get("started", 0) + 1]
    kinds: dict[str, int] = {}
    for a in answers:
        kinds[a["kind"]] = kinds.get(a["kind"], 0) + 1
    # What the database holds, once it is back: each accepted job, and nothing of a refused one.
    commits = [a["commit"] for a in answers]
    stored: dict[str, list[str]] = {}
    for job_id, commit in stack.sql("SELECT id, commit FROM jobs WHERE commit = ANY(%s)", commits):
        stored.setdefault(commit, []).append(str(job_id))
    accepted = [a for a in answers if a["kind"] == "accepted"]
    refused = [a for a in answers if a["kind"] != "accepted"]
    lost = [a["commit"] for a in accepted if a["job"] not in stored.get(a["commit"], [])]
    stored_refused = [{"commit": a["commit"], "kind": a["kind"]} for a in refused if a["commit"] in stored]
    doubled = [c for c, ids in stored.items() if len(ids) > 1]
    # The client's way out: each refused submission sent again with its Idempotency-Key gets one job, never two.
    retried: dict[str, int] = {}
    with stack.http(tenant.tokens["submit"]) as http:
        for a in refused:
            r = http.post(
                f"/api/v1/projects/{tenant.name}/jobs",
                data={"testbed": PARKED, "branch": "storm", "commit": a["commit"]},
                files={"spec": ("attnprof.toml", spec.encode())},
                headers={"Idempotency-Key": a["key"]},
            )
            retried[str(r.status_code)] = retried.get(str(r.status_code), 0) + 1
            if r.status_code in (200, 202):
                a["retry_job"] = r.json()["id"]
    after_retry = {c: len(ids) for c, ids in _stored_by_commit(stack, commits).items()}
    # Every accepted job must still be on its way to a worker: queued, and either waiting in the database for the
    # dispatcher (a testbed with no live worker is offered one job at a time) or offered with its message in the
    # broker. An offered job without a message is the sweep's to send again (queued_stale_s): it is given that long.
    accepted_ids = {a["job"] for a in accepted} | {a["retry_job"] for a in refused if a.get("retry_job")}
    stranded: set[str] = set()
    states: dict[str, int] = {}

    def on_their_way() -> bool:
        in_broker = _offered(stack, PARKED)
        rows = stack.sql("SELECT id, status, offered_at FROM jobs WHERE id = ANY(%s)", sorted(accepted_ids))
        stranded.clear()
        states.clear()
        for job_id, status, offered_at in rows:
            kind = "offered" if offered_at else "waiting"
            states[f"{status}, {kind}"] = states.get(f"{status}, {kind}", 0) + 1
            if status != "queued" or (offered_at and str(job_id) not in in_broker):
                stranded.add(str(job_id))
        stranded.update(accepted_ids - {str(r[0]) for r in rows})
        return not stranded

    with contextlib.suppress(TimeoutError):
        wait_for(
            "every accepted job on its way", on_their_way, float(SWEEP["ATTNPROF_SWEEP__QUEUED_STALE_S"]) * 3 + 10, 1.0
        )
    return {
        "submissions": n,
        "threads": 4,
        "outage": {k: round(v - answers[0]["t"], 2) for k, v in outage.items()} if answers else outage,
        "down_s": round(outage.get("started", 0) - outage.get("stop", 0), 2) if outage else None,
        "answers_by_kind": kinds,
        "answers_during_outage_by_kind": {
            k: sum(1 for a in during if a["kind"] == k) for k in {a["kind"] for a in during}
        },
        "accepted": len(accepted),
        "refused": len(refused),
        "accepted_lost": lost,
        "refused_but_stored": stored_refused,
        "stored_twice": doubled,
        "retries_of_refused_by_status": retried,
        "rows_per_commit_after_retries": sorted(set(after_retry.values())),
        "commits_without_row_after_retries": [c for c in commits if c not in after_retry],
        "accepted_by_state": states,
        "accepted_stranded": sorted(stranded),
        "plain_text_500": [a for a in answers if a["status"] == 500 and not a["kind"].startswith("500 json")],
        "not_503_json_refusals": [a for a in refused if a["kind"] != "503 json"][:20],
        "slowest_answer_s": max((a["seconds"] for a in answers), default=None),
    }


def _stored_by_commit(stack: Stack, commits: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for job_id, commit in stack.sql("SELECT id, commit FROM jobs WHERE commit = ANY(%s)", commits):
        found.setdefault(commit, []).append(str(job_id))
    return found


def _offered(stack: Stack, testbed: str) -> set[str]:
    """Job ids with a ``profile.run`` message waiting on the testbed's queue."""
    import redis

    r = redis.Redis.from_url(stack.broker_url)
    try:
        raw = r.lrange(f"profile.{testbed}", 0, -1)
    finally:
        r.close()
    return {str(json.loads(base64.b64decode(json.loads(m)["body"]))[0][0]) for m in raw}


def _submit_wait_across_restart(stack: Stack, cluster: Cluster, when: str, down_s: float) -> dict[str, Any]:
    """``attnprof submit --wait`` with Postgres stopped for ``down_s``: ``when`` = ``submit`` (stopped before the
    command starts: its POST meets the outage) or ``wait`` (stopped once the job runs: its polls meet it)."""
    suite = stack.workdir / "attnprof.toml"
    suite.write_text(small_suite(0.1))
    argv = [*pipeline.attnprof_command(), "submit", str(suite), "--server", stack.url]
    argv += [
        "--token",
        stack.tenants["a"].tokens["submit"],
        "--testbed",
        TESTBED,
        "--source",
        str(pipeline.BUNDLE_SOURCE),
    ]
    commit = f"wait-{when}-{uuid.uuid4().hex[:6]}"
    argv += ["--branch", "main", "--commit", commit, "--base-commit", commit, "--wait", "--timeout", "240"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNPROF_")}
    t0 = now_s()
    outage: dict[str, float] = {}
    if when == "submit":
        outage["stop"] = now_s() - t0
        cluster.stop("fast")
    with (stack.workdir / f"submit-{when}.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=env, cwd=stack.workdir, stdout=log, stderr=subprocess.STDOUT)
    try:
        if when == "submit":
            time.sleep(down_s)
        else:
            wait_for(
                "the job to run",
                lambda: stack.sql("SELECT status FROM jobs WHERE commit = %s", commit) in ([("running",)],),
                120,
                0.1,
            )
            outage["stop"] = now_s() - t0
            cluster.stop("fast")
            time.sleep(down_s)
        cluster.start()
        outage["start"] = now_s() - t0
        code = proc.wait(timeout=300)
    except (subprocess.TimeoutExpired, TimeoutError) as exc:
        proc.kill()
        proc.wait()
        if not cluster.running():
            cluster.start()
        code = None
        outage["error"] = str(exc)  # type: ignore[assignment]
    text = (stack.workdir / f"submit-{when}.log").read_text(errors="replace")
    rows = stack.sql("SELECT id, status, verdict FROM jobs WHERE commit = %s", commit)
    return {
        "when": when,
        "exit_code": code,
        "seconds": round(now_s() - t0, 1),
        "outage": {k: round(v, 2) if isinstance(v, float) else v for k, v in outage.items()},
        "jobs_stored": len(rows),
        "job_status": [f"{r[1]} {r[2]}" for r in rows],
        "output_tail": text[-1200:],
        "ok": code in (0, 1) and len(rows) == 1,
    }


def scenario_postgres(args: argparse.Namespace) -> dict[str, Any]:
    with stack_infra(args, "postgres") as (stack, cluster, _redis):
        stack.start_service()
        stack.start_analysis()
        stack.start_profile("profile-1")
        stack.wait_ready("analysis", "profile-1")
        say(f"  {args.pg_submissions} submissions, Postgres stopped after {args.pg_submissions // 4} answers")
        storm = _storm(stack, cluster, args.pg_submissions, args.pg_submissions // 4, args.pg_down_s)
        say(
            f"  answers {storm['answers_by_kind']} (during the outage {storm['answers_during_outage_by_kind']}); "
            f"accepted lost {len(storm['accepted_lost'])}, refused but stored {len(storm['refused_but_stored'])}, "
            f"stored twice {len(storm['stored_twice'])}, accepted but stranded (offered, no message) "
            f"{len(storm['accepted_stranded'])}"
        )
        waits = []
        for when in ("submit", "wait"):
            found = _submit_wait_across_restart(stack, cluster, when, args.pg_down_s)
            waits.append(found)
            say(f"  submit --wait, Postgres stopped at its {when}: exit {found['exit_code']} in {found['seconds']} s")
        storm["ok"] = not (
            storm["accepted_lost"]
            or storm["refused_but_stored"]
            or storm["stored_twice"]
            or storm["plain_text_500"]
            or storm["accepted_stranded"]
        )
        return {
            "storm": storm,
            "submit_wait": waits,
            "server_tracebacks": stack.procs["service"].text().count("Traceback"),
        }


# --- 5. Schemathesis over HTTP ----------------------------------------------------------------------------------

# Answers that a schema-valid request may still get: the schema cannot say what a valid suite file, result document
# or bundle holds, which cursor the API gave, or that a named object exists (as tests/server/test_schemathesis.py).
PUBLIC_EXPECTED = ["2xx", "400", "401", "403", "404", "409", "413", "422", "429"]
INTERNAL_EXPECTED = ["2xx", "400", "404", "409", "413", "422"]


def _fuzz(
    schema: Any,
    prepare: Callable[[Any, bool], dict[str, str]],
    url: str,
    examples: dict[Any, int],
    budget_s: float,
    label: str,
) -> dict[str, Any]:
    """Every operation of ``schema``, ``examples[mode]`` generated cases per mode, sent over HTTP until ``budget_s``
    is spent; ``prepare(case, positive)`` fills in what exists (ids, a claim) and returns the request's headers.
    Returns the cases sent, the server errors and the other check failures, by operation."""
    started = time.monotonic()
    ops: dict[str, dict[str, Any]] = {}
    totals = {"cases": 0, "server_errors": 0, "check_failures": 0, "skipped_for_time": 0, "transport_errors": 0}
    examples_5xx: list[dict[str, Any]] = []

    def send(case: Any, positive: bool, name: str) -> None:
        if time.monotonic() - started > budget_s:
            totals["skipped_for_time"] += 1
            return
        op = ops.setdefault(name, {"cases": 0, "statuses": {}, "server_errors": 0, "failures": {}})
        try:
            headers = prepare(case, positive)
            response = case.call(base_url=url, headers=headers, timeout=30)
        except Exception as exc:  # a refused connection, a timeout: counted, never hidden
            totals["transport_errors"] += 1
            op["failures"][f"transport: {type(exc).__name__}"] = (
                op["failures"].get(f"transport: {type(exc).__name__}", 0) + 1
            )
            return
        op["cases"] += 1
        totals["cases"] += 1
        code = str(response.status_code)
        op["statuses"][code] = op["statuses"].get(code, 0) + 1
        if response.status_code >= 500:
            op["server_errors"] += 1
            totals["server_errors"] += 1
            if len(examples_5xx) < 10:
                examples_5xx.append(
                    {
                        "operation": name,
                        "status": response.status_code,
                        "body": response.text[:300],
                        "curl": case.as_curl_command(headers=headers)[:600],
                    }
                )
        try:
            case.validate_response(response, headers=headers)
        except BaseExceptionGroup as group:
            for failure in group.exceptions:
                title = getattr(failure, "title", type(failure).__name__)
                op["failures"][title] = op["failures"].get(title, 0) + 1
                totals["check_failures"] += 1
        except AssertionError as failure:
            title = getattr(failure, "title", type(failure).__name__)
            op["failures"][title] = op["failures"].get(title, 0) + 1
            totals["check_failures"] += 1

    from schemathesis import GenerationMode

    for result in schema.get_all_operations():
        operation = result.ok()
        name = f"{operation.method.upper()} {operation.path}"
        for mode, n in examples.items():
            if n <= 0 or time.monotonic() - started > budget_s:
                continue
            run = _generated(
                operation.as_strategy(generation_mode=mode), n, send, mode == GenerationMode.POSITIVE, name
            )
            try:
                run()
            except Exception as exc:  # hypothesis could not generate: the operation shows fewer cases, and why
                ops.setdefault(name, {"cases": 0, "statuses": {}, "server_errors": 0, "failures": {}})
                ops[name]["failures"][f"generation: {type(exc).__name__}: {str(exc)[:120]}"] = 1
        say(
            f"  [{label}] {name}: {ops.get(name, {}).get('cases', 0)} cases, "
            f"{ops.get(name, {}).get('server_errors', 0)} 5xx"
        )
    return {
        **totals,
        "seconds": round(time.monotonic() - started, 1),
        "operations": ops,
        "server_error_examples": examples_5xx,
    }


def _clear_testbed(stack: Stack, testbed: str) -> None:
    """Cancel every open job of ``testbed`` (by its project's submit token): a testbed with no live worker is
    offered one job at a time, so one left offered would hold back the next."""
    tokens = {t.name: t.tokens["submit"] for t in stack.tenants.values()}
    rows = stack.sql(
        "SELECT j.id, p.name FROM jobs j JOIN projects p ON p.id = j.project_id JOIN testbeds t ON t.id = j.testbed_id"
        " WHERE t.name = %s AND j.status IN ('queued', 'running')",
        testbed,
    )
    for job_id, project in rows:
        if project in tokens:
            with stack.http(tokens[project]) as http:
                http.post(f"/api/v1/jobs/{job_id}/cancel")


def _generated(strategy: Any, n: int, send: Callable[[Any, bool, str], None], positive: bool, name: str) -> Any:
    """A hypothesis test sending ``n`` cases of ``strategy`` (derandomized: the same cases each run; no shrinking:
    nothing raises, every answer is counted)."""
    from hypothesis import HealthCheck, Phase, given, settings

    @settings(
        max_examples=n,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        send(case, positive, name)

    return run


def scenario_schemathesis(args: argparse.Namespace) -> dict[str, Any]:
    import schemathesis
    from schemathesis import GenerationMode

    from tests.claiming import claim_secret
    from tests.profiling_support import tar_gz
    from tests.server import documents as docs

    # Trace uploads are raw gzip bytes: the generated bytes are sent as they are.
    schemathesis.serializer.alias("application/gzip", "application/octet-stream")
    with stack_infra(args, "schemathesis") as (stack, _cluster, redis_server):
        stack.start_service()
        a = stack.tenants["a"]
        document = docs.h200()
        with stack.http(a.tokens["admin"]) as http:
            uploaded = http.post(f"/api/v1/projects/{a.name}/results", json=docs.upload_body(document))
            uploaded.raise_for_status()
        # On a testbed of its own: with no live worker, a testbed is offered one job at a time (the dispatcher),
        # and the worker routes' cases below need each of theirs offered.
        job_id = stack.submit(small_suite(0.1), testbed=TESTBED)
        case0 = document["cases"][0]
        known_path = {
            "project": a.name,
            "run_id": uploaded.json()["run_id"],
            "comparison_id": uploaded.json()["comparison_id"],
            "job_id": job_id,
            "name": case0["trace"],
        }
        known_query = {"case": case0["id"], "kernel": case0["kernels"][0]["key"]}
        # A read token to revoke in place of the admin token the run is authenticated with.
        spare = a.token_ids["read"]

        def public_prepare(case: Any, positive: bool) -> dict[str, str]:
            if case.path_parameters is not None and "project" in case.path_parameters and positive:
                case.path_parameters["project"] = a.name
            if positive:
                for params, known in ((case.path_parameters, known_path), (case.query, known_query)):
                    for key in set(params or ()) & set(known):
                        params[key] = known[key]
            if case.path_parameters and str(case.path_parameters.get("token_id")) == str(a.token_ids["admin"]):
                case.path_parameters["token_id"] = spare
            return {"Authorization": f"Bearer {a.tokens['admin']}"}

        config = schemathesis.Config.from_dict(
            {
                "parameters": {"path.project": a.name},
                "checks": {"positive_data_acceptance": {"expected-statuses": PUBLIC_EXPECTED}},
            }
        )
        public = schemathesis.openapi.from_url(f"{stack.url}/openapi.json", config=config)
        budget = args.schemathesis_s
        modes = {GenerationMode.POSITIVE: args.st_examples, GenerationMode.NEGATIVE: max(1, args.st_examples // 2)}
        say(f"  public API: {budget * 0.7:.0f} s at most")
        found_public = _fuzz(public, public_prepare, stack.url, modes, budget * 0.7, "public")

        worker_token = stack.worker_tokens[PARKED]
        submit_token = stack.tenants["b"].tokens["submit"]
        _clear_testbed(stack, PARKED)

        made: list[str] = []

        def queued_job() -> tuple[str, str]:
            """A new job (its id, the claim secret of its message); the earlier cases' jobs are cancelled first, so
            that this one is offered (as tests/server/test_schemathesis.py does)."""
            with stack.http(submit_token) as http:
                for earlier in made:
                    http.post(f"/api/v1/jobs/{earlier}/cancel")  # 409 once it ended
                made.clear()
                r = http.post(
                    f"/api/v1/projects/{stack.tenants['b'].name}/jobs",
                    files={
                        "spec": ("attnprof.toml", small_suite(0.1).encode()),
                        "bundle": ("src.tar.gz", tar_gz({"pkg/m.py": b"x = 1\n"})),
                    },
                    data={"testbed": PARKED, "branch": "main", "commit": uuid.uuid4().hex[:12]},
                )
            r.raise_for_status()
            new_id = str(r.json()["id"])
            made.append(new_id)
            secret = claim_secret(stack.broker_url, PARKED, new_id)
            redis_client = redis_server.client()
            try:
                redis_client.delete(f"profile.{PARKED}", "analysis")
            finally:
                redis_client.close()
            return new_id, secret

        def internal_prepare(case: Any, positive: bool) -> dict[str, str]:
            token = worker_token
            if "{job_id}" in case.operation.path:
                new_id, secret = queued_job()
                if case.operation.path.endswith("/claim"):
                    if positive and isinstance(case.body, dict):
                        case.body.update(secret=secret, attempt=1)
                else:
                    with stack.http(worker_token) as http:
                        claimed = http.post(
                            f"/internal/jobs/{new_id}/claim", json={"attempt": 1, "worker": "fuzz", "secret": secret}
                        )
                    claimed.raise_for_status()
                    token = claimed.json()["token"]
                if positive:
                    case.path_parameters["job_id"] = new_id
            return {"Authorization": f"Bearer {token}"}

        internal_config = schemathesis.Config.from_dict(
            {"checks": {"positive_data_acceptance": {"expected-statuses": INTERNAL_EXPECTED}}}
        )
        internal = schemathesis.openapi.from_url(f"{stack.url}/internal/openapi.json", config=internal_config)
        left = max(30.0, budget - found_public["seconds"])
        say(f"  worker routes: {left:.0f} s at most")
        found_internal = _fuzz(internal, internal_prepare, stack.url, modes, left, "internal")
        service_log = stack.procs["service"].text()
        return {
            "public": found_public,
            "internal": found_internal,
            "examples_per_operation": {m.value: n for m, n in modes.items()},
            "budget_s": budget,
            "server_tracebacks": service_log.count("Traceback"),
            "ok": found_public["server_errors"] == 0 and found_internal["server_errors"] == 0,
        }


# --- 6. hand-made hostile inputs ----------------------------------------------------------------------------

DEEP = 5000  # deeper than Python's recursion limit: a recursive parser or serialiser fails on it
MIB = 1024 * 1024


def tar_members(*members: tuple[str, str, bytes | str | None]) -> bytes:
    """A tar.gz of ``(name, kind, data)``: kind ``file`` (data: bytes), ``dir``, ``symlink`` / ``hardlink`` (data: the
    target), ``chardev``, ``fifo``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            payload = None
            if kind == "file":
                assert isinstance(data, bytes)
                info.size, payload = len(data), io.BytesIO(data)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind in ("symlink", "hardlink"):
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = str(data)
            elif kind == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info, payload)
    return buf.getvalue()


def gzip_bomb(unpacked_bytes: int) -> bytes:
    """A tar.gz of one file of ``unpacked_bytes`` zeros: about a thousandth of that on the wire."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        info = tarfile.TarInfo("pkg/zeros.bin")
        info.size = unpacked_bytes

        class Zeros(io.RawIOBase):
            left = unpacked_bytes

            def readable(self) -> bool:
                return True

            def readinto(self, b: Any) -> int:
                n = min(len(b), self.left)
                b[:n] = bytes(n)
                self.left -= n
                return n

        tar.addfile(info, io.BufferedReader(Zeros(), 4 * MIB))
    return buf.getvalue()


def many_members(n: int) -> bytes:
    return tar_members(*((f"pkg/m{i}.py", "file", b"") for i in range(n)))


def streamed(url: str, method: str, path: str, headers: dict[str, str], total: int, *, chunked: bool) -> dict[str, Any]:
    """``total`` bytes sent as the body over a raw socket, 1 MiB at a time, stopping as soon as the server answers
    (a body limit must answer before the body is read); the answer and how much was sent by then."""
    import select
    import socket

    u = httpx.URL(url)
    head = [f"{method} {path} HTTP/1.1", f"Host: {u.host}:{u.port}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}")
    sock = socket.create_connection((u.host, int(u.port or 80)), timeout=30)
    sent = 0
    t0 = time.perf_counter()
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        block = b"7" * MIB
        while sent < total:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            piece = block[: min(MIB, total - sent)]
            try:
                sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
        else:
            if chunked:
                with contextlib.suppress(OSError):
                    sock.sendall(b"0\r\n\r\n")
        raw = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                raw += chunk
    finally:
        sock.close()
    seconds = round(time.perf_counter() - t0, 3)
    if not raw:
        return {"status": None, "ctype": "", "body": "", "sent_bytes": sent, "seconds": seconds}
    head_raw, _, body = raw.partition(b"\r\n\r\n")
    lines = head_raw.decode("latin-1").split("\r\n")
    found = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if found.get("transfer-encoding", "").lower() == "chunked":
        plain, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            plain, rest = plain + rest[:size], rest[size + 2 :]
        body = plain
    return {
        "status": int(lines[0].split()[1]),
        "ctype": found.get("content-type", ""),
        "body": body.decode(errors="replace"),
        "sent_bytes": sent,
        "seconds": seconds,
    }


@dataclass
class BadInput:
    name: str
    group: str
    send: Callable[[], dict[str, Any]]
    statuses: tuple[int, ...]
    words: tuple[str, ...]  # one of these (case-insensitive) must be in the error's detail: the field it names


def _answer(r: httpx.Response) -> dict[str, Any]:
    return {"status": r.status_code, "ctype": r.headers.get("content-type", ""), "body": r.text[:20_000]}


def _with_literal(body: dict[str, Any], place: tuple[str | int, ...], literal: str) -> str:
    """``body`` as JSON text with ``literal`` (NaN, Infinity, 1e309: not JSON, but what Python's json reads) at
    ``place``."""
    node: Any = body
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = "__literal__"
    return json.dumps(body).replace('"__literal__"', literal)


def _special_tokens(stack: Stack) -> dict[str, str]:
    """A revoked token and an expired one of project ``a``, made by the service's own code."""
    from datetime import timedelta

    from attnprof.server.auth import service as auth
    from attnprof.server.db import make_engine, make_sessionmaker
    from attnprof.server.projects import repository as projects

    engine = make_engine(stack.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            project = projects.get_by_name(session, stack.tenants["a"].name)
            assert project is not None
            revoked, revoked_secret = auth.create_project_token(session, project_id=project.id, role="read")
            expiring = auth.create_project_token(
                session, project_id=project.id, role="read", expires_in=timedelta(seconds=1)
            )[1]
            session.flush()
            auth.revoke(session, project_id=project.id, token_id=revoked.id)
            session.commit()
    finally:
        engine.dispose()
    time.sleep(1.2)
    return {"revoked": revoked_secret, "expired": expiring}


def catalogue(stack: Stack, run_id: str, trace_name: str, job: tuple[str, str]) -> list[BadInput]:
    """The hostile inputs, each with the refusal it must get."""
    from tests.server import documents as docs

    a = stack.tenants["a"]
    base = f"/api/v1/projects/{a.name}"
    spec = small_suite(0.1)
    special = _special_tokens(stack)
    job_id, job_token = job

    def client(token: str | None = None, headers: dict[str, str] | None = None) -> httpx.Client:
        h = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=stack.url, headers={**h, **(headers or {})}, timeout=60)

    def post_job(
        *,
        spec_text: str | bytes | None = spec,
        bundle: bytes | None = None,
        headers: dict[str, str] | None = None,
        **fields: str,
    ) -> Callable[[], dict[str, Any]]:
        def send() -> dict[str, Any]:
            files: dict[str, Any] = {}
            if spec_text is not None:
                files["spec"] = ("attnprof.toml", spec_text.encode() if isinstance(spec_text, str) else spec_text)
            if bundle is not None:
                files["bundle"] = ("src.tar.gz", bundle)
            data = {"testbed": PARKED, "branch": "main", "commit": "abc123", **fields}
            with client(a.tokens["submit"], headers) as http:
                return _answer(http.post(f"{base}/jobs", data=data, files=files))

        return send

    def post_json(path: str, text: str, token: str, ctype: str = "application/json") -> Callable[[], dict[str, Any]]:
        def send() -> dict[str, Any]:
            with client(token, {"Content-Type": ctype}) as http:
                return _answer(http.post(path, content=text))

        return send

    def request(method: str, path: str, token: str | None, **kw: Any) -> Callable[[], dict[str, Any]]:
        def send() -> dict[str, Any]:
            with client(token, kw.pop("headers", None)) as http:
                return _answer(http.request(method, path, **kw))

        return send

    def upload_with(place: tuple[str | int, ...], literal: str) -> Callable[[], dict[str, Any]]:
        return post_json(
            f"{base}/results", _with_literal(docs.upload_body(docs.h200()), place, literal), a.tokens["submit"]
        )

    def upload_doc(change: Callable[[dict[str, Any]], None]) -> Callable[[], dict[str, Any]]:
        body = docs.upload_body(docs.h200())
        change(body)
        return post_json(f"{base}/results", json.dumps(body), a.tokens["submit"])

    def deep_params(body: dict[str, Any]) -> None:
        deep: Any = 1
        for _ in range(300):
            deep = [deep]
        body["result"]["cases"][0]["params"]["deep"] = deep

    def negative_samples(body: dict[str, Any]) -> None:
        lat = body["result"]["cases"][0]["latency_us"]
        lat["samples"] = [-abs(v) for v in lat["samples"]]

    def grid(n_batch: int, n_seq: int) -> str:
        return spec.replace(
            "batch = 1\nq_heads = 2\nseq_q = 64",
            f"batch = {list(range(1, n_batch + 1))}\nq_heads = 2\nseq_q = {list(range(16, 16 + n_seq))}",
            1,
        )

    submit_tok = a.tokens["submit"]
    json_ct = {"Content-Type": "application/json", "Authorization": f"Bearer {submit_tok}"}
    multipart_ct = {"Content-Type": "multipart/form-data; boundary=x0x0x0", "Authorization": f"Bearer {submit_tok}"}
    trace_ct = {"Content-Type": "application/gzip", "Authorization": f"Bearer {submit_tok}"}
    gz = gzip.compress(b'{"traceEvents": []}')
    items = [
        # bundles
        BadInput(
            "bundle: path traversal (../evil.py)",
            "bundle",
            post_job(bundle=tar_members(("../evil.py", "file", b"x"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: absolute path (/etc/cron.d/evil)",
            "bundle",
            post_job(bundle=tar_members(("/etc/cron.d/evil", "file", b"x"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: symbolic link to /etc/shadow",
            "bundle",
            post_job(bundle=tar_members(("pkg/s", "symlink", "/etc/shadow"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: hard link to /etc/passwd",
            "bundle",
            post_job(bundle=tar_members(("pkg/h", "hardlink", "/etc/passwd"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: character device (/dev/null's numbers)",
            "bundle",
            post_job(bundle=tar_members(("pkg/null", "chardev", None))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: FIFO", "bundle", post_job(bundle=tar_members(("pkg/fifo", "fifo", None))), (422,), ("bundle",)
        ),
        BadInput(
            "bundle: the same member twice",
            "bundle",
            post_job(bundle=tar_members(("pkg/m.py", "file", b"1"), ("pkg/m.py", "file", b"2"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: the same member spelt two ways (./pkg//m.py)",
            "bundle",
            post_job(bundle=tar_members(("pkg/m.py", "file", b"1"), ("./pkg//m.py", "file", b"2"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: a file, then a member under it",
            "bundle",
            post_job(bundle=tar_members(("pkg", "file", b"1"), ("pkg/m.py", "file", b"2"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: a directory, then a file of its name",
            "bundle",
            post_job(bundle=tar_members(("pkg", "dir", None), ("pkg", "file", b"1"))),
            (422,),
            ("bundle",),
        ),
        BadInput(
            "bundle: gzip bomb (600 MiB of zeros in ~0.6 MB)",
            "bundle",
            post_job(bundle=gzip_bomb(600 * MIB)),
            (413,),
            ("bundle",),
        ),
        BadInput("bundle: 10,001 members", "bundle", post_job(bundle=many_members(10_001)), (422,), ("bundle",)),
        BadInput("bundle: not gzip", "bundle", post_job(bundle=secrets.token_bytes(4096)), (422,), ("bundle",)),
        BadInput("bundle: empty archive", "bundle", post_job(bundle=tar_members()), (422,), ("bundle",)),
        BadInput(
            "bundle: 60 MB (limit 50 MiB)",
            "bundle",
            post_job(bundle=secrets.token_bytes(60 * 10**6)),
            (413,),
            ("bundle", "bytes"),
        ),
        # bodies
        BadInput(
            "200 MB multipart body, Content-Length declared",
            "body",
            lambda: streamed(stack.url, "POST", f"{base}/jobs", multipart_ct, 200 * 10**6, chunked=False),
            (413,),
            ("bytes", "limit", "body"),
        ),
        BadInput(
            "200 MB JSON upload, Content-Length declared",
            "body",
            lambda: streamed(stack.url, "POST", f"{base}/results", json_ct, 200 * 10**6, chunked=False),
            (413,),
            ("bytes", "limit", "body"),
        ),
        BadInput(
            "200 MB JSON upload, chunked (no length)",
            "body",
            lambda: streamed(stack.url, "POST", f"{base}/results", json_ct, 200 * 10**6, chunked=True),
            (413,),
            ("bytes", "limit", "body"),
        ),
        BadInput(
            "200 MB trace upload (limit 64 MiB)",
            "body",
            lambda: streamed(
                stack.url, "PUT", f"{base}/runs/{run_id}/traces/{trace_name}", trace_ct, 200 * 10**6, chunked=False
            ),
            (413,),
            ("bytes", "limit", "trace"),
        ),
        # suite files
        BadInput(
            "suite: a 10,000-case grid (100 batches x 100 lengths)",
            "suite",
            post_job(spec_text=grid(100, 100)),
            (422,),
            ("cases",),
        ),
        BadInput(
            "suite: arrays nested 5,000 deep",
            "suite",
            post_job(spec_text=spec + f"\nargs = {'[' * DEEP}{']' * DEEP}\n"),
            (422,),
            ("nested",),
        ),
        BadInput(
            "suite: inline tables nested 5,000 deep",
            "suite",
            post_job(spec_text=spec + "\nargs = " + "{a = " * DEEP + "}" * DEEP + "\n"),
            (422,),
            ("nested",),
        ),
        BadInput(
            "suite: a key dotted 20,000 deep",
            "suite",
            post_job(spec_text=spec + "\n" + ".".join(["k"] * 20_000) + " = 1\n"),
            (422,),
            ("nested",),
        ),
        BadInput(
            "suite: negative sequence length",
            "suite",
            post_job(spec_text=spec.replace("seq_q = 64", "seq_q = -64", 1)),
            (422,),
            ("seq_q",),
        ),
        BadInput(
            "suite: NaN threshold",
            "suite",
            post_job(
                spec_text=spec.replace(
                    'name = "pipeline-small"', 'name = "pipeline-small"\nthresholds = { latency = nan }', 1
                )
            ),
            (422,),
            ("thresholds", "latency"),
        ),
        BadInput(
            "suite: infinite threshold",
            "suite",
            post_job(
                spec_text=spec.replace(
                    'name = "pipeline-small"', 'name = "pipeline-small"\nthresholds = { latency = inf }', 1
                )
            ),
            (422,),
            ("thresholds", "latency"),
        ),
        BadInput("suite: not UTF-8", "suite", post_job(spec_text=b"\xff\xfe[suite]\n"), (422,), ("spec",)),
        BadInput("suite: missing", "suite", post_job(spec_text=None), (422,), ("spec",)),
        BadInput(
            "suite: 2 MB file (limit 1 MiB)",
            "suite",
            post_job(spec_text=spec + "#" * (2 * 10**6) + "\n"),
            (413, 422),
            ("spec", "bytes", "suite"),
        ),
        # job fields
        BadInput(
            "ancestors nested 5,000 deep", "fields", post_job(ancestors="[" * DEEP + "]" * DEEP), (422,), ("ancestors",)
        ),
        BadInput(
            "ancestors: 51 commits (limit 50)",
            "fields",
            post_job(ancestors=json.dumps([f"{i:040x}" for i in range(51)])),
            (422,),
            ("ancestors",),
        ),
        BadInput("branch of 10,000 characters", "fields", post_job(branch="b" * 10_000), (422,), ("branch",)),
        BadInput("commit with a NUL byte", "fields", post_job(commit="abc\x00def"), (422,), ("commit",)),
        BadInput("testbed ../../etc", "fields", post_job(testbed="../../etc"), (422,), ("testbed",)),
        BadInput("pull request number -5", "fields", post_job(pr="-5"), (422,), ("pr",)),
        BadInput(
            "Idempotency-Key of 1,000 characters",
            "fields",
            post_job(headers={"Idempotency-Key": "k" * 1000}),
            (422,),
            ("idempotency",),
        ),
        # result documents
        BadInput(
            "upload: median NaN",
            "documents",
            upload_with(("result", "cases", 0, "latency_us", "median"), "NaN"),
            (422,),
            ("median",),
        ),
        BadInput(
            "upload: median Infinity",
            "documents",
            upload_with(("result", "cases", 0, "latency_us", "median"), "Infinity"),
            (422,),
            ("median",),
        ),
        BadInput(
            "upload: kernel tflops 1e309",
            "documents",
            upload_with(("result", "cases", 1, "kernels", 0, "tflops"), "1e309"),
            (422,),
            ("tflops",),
        ),
        BadInput(
            "upload: params -Infinity",
            "documents",
            upload_with(("result", "cases", 0, "params", "scale"), "-Infinity"),
            (422,),
            ("params",),
        ),
        BadInput("upload: negative samples", "documents", upload_doc(negative_samples), (422,), ("samples",)),
        BadInput("upload: params nested 300 deep", "documents", upload_doc(deep_params), (422,), ("params",)),
        BadInput(
            "upload: JSON nested 5,000 deep",
            "documents",
            post_json(f"{base}/results", "[" * DEEP + "]" * DEEP, submit_tok),
            (400, 422),
            ("nest", "deep", "depth"),
        ),
        BadInput(
            "upload: result nested 5,000 deep",
            "documents",
            post_json(
                f"{base}/results",
                '{"result": ' + "[" * DEEP + "]" * DEEP + ', "branch": "main", "commit": "a1"}',
                submit_tok,
            ),
            (400, 422),
            ("nest", "deep", "depth"),
        ),
        BadInput(
            "upload: no result",
            "documents",
            post_json(f"{base}/results", '{"branch": "main", "commit": "a1"}', submit_tok),
            (422,),
            ("result",),
        ),
        BadInput(
            "upload: unknown schema version",
            "documents",
            upload_doc(lambda b: b["result"].update(schema="attnprof.result/v999")),
            (422,),
            ("schema",),
        ),
        BadInput(
            "upload: sent as text/plain",
            "documents",
            post_json(f"{base}/results", json.dumps(docs.upload_body(docs.h200())), submit_tok, "text/plain"),
            (415, 422),
            ("body", "content-type", "json"),
        ),
        # traces
        BadInput(
            "trace name ../../etc/passwd",
            "traces",
            request(
                "PUT",
                f"{base}/runs/{run_id}/traces/..%2F..%2Fetc%2Fpasswd",
                submit_tok,
                content=gz,
                headers={"Content-Type": "application/gzip"},
            ),
            (404, 422),
            ("trace", "name", "not found"),
        ),
        BadInput(
            "trace that is not gzip",
            "traces",
            request(
                "PUT",
                f"{base}/runs/{run_id}/traces/{trace_name}",
                submit_tok,
                content=b"not gzip",
                headers={"Content-Type": "application/gzip"},
            ),
            (422,),
            ("gzip", "trace"),
        ),
        # queries
        BadInput(
            "query: NUL byte in branch",
            "queries",
            request("GET", f"{base}/runs", a.tokens["read"], params={"branch": "a\x00b"}),
            (422,),
            ("branch",),
        ),
        BadInput(
            "query: limit 100,000",
            "queries",
            request("GET", f"{base}/runs", a.tokens["read"], params={"limit": "100000"}),
            (422,),
            ("limit",),
        ),
        BadInput(
            "query: a cursor the API never gave",
            "queries",
            request("GET", f"{base}/runs", a.tokens["read"], params={"cursor": "AAAA%%%"}),
            (400, 422),
            ("cursor",),
        ),
        BadInput(
            "query: trends since after until",
            "queries",
            request(
                "GET",
                f"{base}/trends",
                a.tokens["read"],
                params={"case": "x", "since": "2026-06-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
            ),
            (422,),
            ("since", "until"),
        ),
        BadInput(
            "query: trends of an unknown metric",
            "queries",
            request("GET", f"{base}/trends", a.tokens["read"], params={"case": "x", "metric": "vibes"}),
            (422,),
            ("metric",),
        ),
        BadInput(
            "path: token id past INTEGER",
            "queries",
            request("DELETE", f"{base}/tokens/2147483648", a.tokens["admin"]),
            (422,),
            ("token_id",),
        ),
        # tokens
        BadInput("token: none", "tokens", request("GET", f"{base}/runs", None), (401,), ("authorization",)),
        BadInput(
            "token: not one of ours",
            "tokens",
            request("GET", f"{base}/runs", "ap_" + secrets.token_urlsafe(32)),
            (401,),
            ("token",),
        ),
        BadInput(
            "token: Basic scheme",
            "tokens",
            request("GET", f"{base}/runs", None, headers={"Authorization": "Basic dXNlcjpwYXNz"}),
            (401,),
            ("bearer", "authorization"),
        ),
        BadInput(
            "token: 10,000 characters",
            "tokens",
            request("GET", f"{base}/runs", "ap_" + "x" * 10_000),
            (401,),
            ("token",),
        ),
        BadInput(
            "token: revoked", "tokens", request("GET", f"{base}/runs", special["revoked"]), (401,), ("revoked", "token")
        ),
        BadInput("token: expired", "tokens", request("GET", f"{base}/runs", special["expired"]), (401,), ("expired",)),
        BadInput(
            "token: a new one of role root",
            "tokens",
            request("POST", f"{base}/tokens", a.tokens["admin"], json={"role": "root"}),
            (422,),
            ("role",),
        ),
        BadInput(
            "token: expires in -1d",
            "tokens",
            request("POST", f"{base}/tokens", a.tokens["admin"], json={"role": "read", "expires_in": "-1d"}),
            (422,),
            ("expires_in",),
        ),
        BadInput(
            "token: rotation grace 'forever'",
            "tokens",
            request(
                "POST", f"{base}/tokens/{a.token_ids['read']}/rotate", a.tokens["admin"], json={"grace": "forever"}
            ),
            (422,),
            ("grace",),
        ),
        # worker routes (a claimed job's token)
        BadInput(
            "worker result: median NaN",
            "worker",
            post_json(
                f"/internal/jobs/{job_id}/result",
                _with_literal(
                    {"attempt": 1, "result": docs.h200()}, ("result", "cases", 0, "latency_us", "median"), "NaN"
                ),
                job_token,
            ),
            (422,),
            ("median",),
        ),
        BadInput(
            "worker result: JSON nested 5,000 deep",
            "worker",
            post_json(
                f"/internal/jobs/{job_id}/result",
                '{"attempt": 1, "result": ' + "[" * DEEP + "]" * DEEP + "}",
                job_token,
            ),
            (400, 422),
            ("nest", "deep", "depth"),
        ),
        BadInput(
            "worker heartbeat: attempt -1",
            "worker",
            request("POST", f"/internal/jobs/{job_id}/heartbeat", job_token, json={"attempt": -1}),
            (409, 422),
            ("attempt",),
        ),
        BadInput(
            "worker trace: name ../../x",
            "worker",
            request(
                "PUT",
                f"/internal/jobs/{job_id}/traces/..%2F..%2Fx",
                job_token,
                content=gz,
                headers={"Content-Type": "application/gzip"},
            ),
            (404, 409, 422),
            ("trace", "name", "not found"),
        ),
        # baselines
        BadInput(
            "baseline pin of a run id that is not one",
            "baselines",
            request("POST", f"{base}/baselines/pins", a.tokens["admin"], json={"run_id": "../../x"}),
            (404, 422),
            ("run",),
        ),
        BadInput(
            "baseline exclusion without a reason",
            "baselines",
            request("POST", f"{base}/baselines/exclusions", a.tokens["admin"], json={"run_id": run_id}),
            (422,),
            ("reason",),
        ),
    ]
    return items


def _queued(stack: Stack) -> int:
    import redis

    r = redis.Redis.from_url(stack.broker_url)
    try:
        return int(r.llen(f"profile.{PARKED}"))
    finally:
        r.close()


def scenario_bad_inputs(args: argparse.Namespace) -> dict[str, Any]:
    from tests.claiming import claim_secret
    from tests.server import documents as docs

    with stack_infra(args, "bad-inputs") as (stack, _cluster, _redis):
        stack.start_service()
        a = stack.tenants["a"]
        document = docs.h200()
        with stack.http(a.tokens["submit"]) as http:
            uploaded = http.post(f"/api/v1/projects/{a.name}/results", json=docs.upload_body(document))
            uploaded.raise_for_status()
        run_id = uploaded.json()["run_id"]
        trace_name = document["cases"][0]["trace"]
        # A job claimed the way a worker claims it, for the worker routes; its message then taken off the queue.
        job_id = stack.submit(small_suite(0.1), testbed=PARKED)
        with stack.http(stack.worker_tokens[PARKED]) as http:
            claimed = http.post(
                f"/internal/jobs/{job_id}/claim",
                json={"attempt": 1, "worker": "bench", "secret": claim_secret(stack.broker_url, PARKED, job_id)},
            )
        claimed.raise_for_status()
        r = _redis.client()
        r.delete(f"profile.{PARKED}")
        r.close()
        say("  building the catalogue (the gzip bomb and the 60 MB bundle take a few seconds)")
        items = catalogue(stack, run_id, trace_name, (job_id, claimed.json()["token"]))
        results = []
        for item in items:
            before, queued_before = stack.counts(), _queued(stack)
            t0 = time.perf_counter()
            try:
                answer = item.send()
            except httpx.HTTPError as exc:
                answer = {"status": None, "ctype": "", "body": f"{type(exc).__name__}: {exc}"}
            seconds = round(time.perf_counter() - t0, 3)
            after, queued_after = stack.counts(), _queued(stack)
            detail = ""
            error = None
            if answer["ctype"].startswith("application/json"):
                with contextlib.suppress(ValueError):
                    body = json.loads(answer["body"]) if answer["body"].startswith("{") else {}
                    detail, error = str(body.get("detail", "")), body.get("error")
            changed = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
            if queued_after != queued_before:
                changed["queued messages"] = queued_after - queued_before
            row = {
                "input": item.name,
                "group": item.group,
                "status": answer["status"],
                "error": error,
                "detail": detail[:400],
                "seconds": seconds,
                "sent_bytes": answer.get("sent_bytes"),
                "expected": list(item.statuses),
                "words": list(item.words),
                "refused": answer["status"] is not None and 400 <= answer["status"] < 500,
                "expected_status": answer["status"] in item.statuses,
                "names_the_field": any(w.lower() in detail.lower() for w in item.words),
                "changed": changed,
            }
            if not row["detail"] and answer["body"]:
                row["body"] = answer["body"][:300]
            row["clear"] = row["refused"] and row["names_the_field"]
            row["ok"] = row["refused"] and row["names_the_field"] and not changed
            results.append(row)
            mark = "ok " if row["ok"] else "NOT"
            say(
                f"  {mark} {answer['status']} {item.name}: {detail[:110] or answer['body'][:110]}"
                + (f" CHANGED {changed}" if changed else "")
            )
        service_log = stack.procs["service"].text()
        return {
            "inputs": len(results),
            "refused_clearly": sum(r["ok"] for r in results),
            "refused": sum(r["refused"] for r in results),
            "refused_unclear": [r["input"] for r in results if r["refused"] and not r["clear"]],
            "not_refused": [r["input"] for r in results if not r["refused"]],
            "changed_something": [r["input"] for r in results if r["changed"]],
            "unexpected_status": [r["input"] for r in results if not r["expected_status"]],
            "not_ok": [r for r in results if not r["ok"]],
            "rows": results,
            "server_tracebacks": service_log.count("Traceback"),
            "ok": all(r["ok"] for r in results),
        }


# --- 7. isolation: other tenants' tokens, other roles, worker and job tokens -----------------------------------


@dataclass
class Probe:
    what: str
    kind: str  # cross-project, cross-reference, role, worker, job-token, no-token
    token: str | None
    method: str
    path: str
    body: Any = None
    files: Any = None
    data: Any = None
    twin: str | None = None  # the same request for an object that does not exist: the answer must not differ


def _b_objects(stack: Stack) -> dict[str, str]:
    """Project ``b``'s objects an intruder aims at: a run with a comparison and a trace, a queued job, a pin."""
    from tests.server import documents as docs

    b = stack.tenants["b"]
    document = docs.h200()
    trace = document["cases"][0]["trace"]
    with stack.http(b.tokens["submit"]) as http:
        up = http.post(f"/api/v1/projects/{b.name}/results", json=docs.upload_body(document))
        up.raise_for_status()
        run_id, comparison_id = up.json()["run_id"], up.json()["comparison_id"]
        http.put(
            f"/api/v1/projects/{b.name}/runs/{run_id}/traces/{trace}",
            content=gzip.compress(b'{"traceEvents": []}'),
            headers={"Content-Type": "application/gzip"},
        ).raise_for_status()
    with stack.http(b.tokens["admin"]) as http:
        http.post(f"/api/v1/projects/{b.name}/baselines/pins", json={"run_id": run_id}).raise_for_status()
    job_id = stack.submit(small_suite(0.1), tenant="b", testbed=PARKED)
    return {
        "run": run_id,
        "comparison": comparison_id,
        "trace": trace,
        "job": job_id,
        "token": str(b.token_ids["read"]),
        "case": document["cases"][0]["id"],
        "kernel": document["cases"][0]["kernels"][0]["key"],
    }


def probes(stack: Stack, bo: dict[str, str], a_objects: dict[str, str]) -> list[Probe]:
    a, b = stack.tenants["a"], stack.tenants["b"]
    body: Any  # a request's JSON body, its files and form fields: each loop below binds them
    files: Any
    data: Any
    nowhere = "rel-nowhere"
    ghost = str(uuid.uuid4())
    spec_files = {"spec": ("attnprof.toml", small_suite(0.1).encode())}
    job_form = {"testbed": PARKED, "branch": "main", "commit": "intruder1"}
    upload = {"result": {"schema": "attnprof.result/v1"}, "branch": "main", "commit": "x"}
    out: list[Probe] = []
    # Project b's routes with project a's tokens of each role: each as for a project that does not exist.
    project_routes: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "jobs", {}),
        ("POST", "jobs", {"files": spec_files, "data": job_form}),
        ("GET", "runs", {}),
        ("GET", f"runs/{bo['run']}", {}),
        ("GET", f"runs/{bo['run']}/traces/{bo['trace']}", {}),
        ("PUT", f"runs/{bo['run']}/traces/{bo['trace']}", {}),
        ("POST", "results", {"body": upload}),
        ("GET", f"trends?case={bo['case']}", {}),
        ("GET", f"trends/kernels?case={bo['case']}&kernel={bo['kernel']}", {}),
        ("GET", "baselines", {}),
        ("POST", "baselines/pins", {"body": {"run_id": bo["run"]}}),
        ("POST", "baselines/exclusions", {"body": {"run_id": bo["run"], "reason": "intruder"}}),
        ("POST", "baselines/accepted", {"body": {"run_id": bo["run"]}}),
        ("DELETE", f"baselines/pins/{bo['run']}", {}),
        ("GET", "alerts", {}),
        ("GET", f"comparisons/{bo['comparison']}", {}),
        ("GET", "tokens", {}),
        ("POST", "tokens", {"body": {"role": "admin", "name": "intruder"}}),
        ("DELETE", f"tokens/{bo['token']}", {}),
        ("POST", f"tokens/{bo['token']}/rotate", {"body": {"grace": "1h"}}),
        ("GET", "audit", {}),
    ]
    for role in ROLES:
        for method, route, kw in project_routes:
            out.append(
                Probe(
                    f"a's {role} token: {method} b/{route.split('?')[0]}",
                    "cross-project",
                    a.tokens[role],
                    method,
                    f"/api/v1/projects/{b.name}/{route}",
                    kw.get("body"),
                    kw.get("files"),
                    kw.get("data"),
                    twin=f"/api/v1/projects/{nowhere}/{route}",
                )
            )
        # b's jobs by id alone
        for method, route in (("GET", ""), ("GET", "/comparison"), ("GET", "/comment"), ("POST", "/cancel")):
            out.append(
                Probe(
                    f"a's {role} token: {method} b's job{route}",
                    "cross-project",
                    a.tokens[role],
                    method,
                    f"/api/v1/jobs/{bo['job']}{route}",
                    twin=f"/api/v1/jobs/{ghost}{route}",
                )
            )
        out.append(
            Probe(
                f"a's {role} token: resend b's job feedback",
                "cross-project",
                a.tokens[role],
                "POST",
                f"/api/v1/github/jobs/{bo['job']}/resend",
                twin=f"/api/v1/github/jobs/{ghost}/resend",
            )
        )
        # b's objects named through a's own project
        for method, route, body in (
            ("GET", f"runs/{bo['run']}", None),
            ("GET", f"runs/{bo['run']}/traces/{bo['trace']}", None),
            ("PUT", f"runs/{bo['run']}/traces/{bo['trace']}", None),
            ("GET", f"comparisons/{bo['comparison']}", None),
            ("POST", "baselines/pins", {"run_id": bo["run"]}),
            ("POST", "baselines/exclusions", {"run_id": bo["run"], "reason": "intruder"}),
            ("POST", "baselines/accepted", {"run_id": bo["run"]}),
            ("DELETE", f"tokens/{bo['token']}", None),
            ("POST", f"tokens/{bo['token']}/rotate", {"grace": "1h"}),
        ):
            twin_route = (
                route.replace(bo["run"], ghost)
                .replace(bo["comparison"], ghost)
                .replace(f"tokens/{bo['token']}", "tokens/2000000000")
            )
            twin_body = {k: (ghost if v == bo["run"] else v) for k, v in (body or {}).items()} or None
            if (role == "read" and method != "GET") or (role == "submit" and route.startswith(("baselines", "tokens"))):
                continue  # a role refusal at a's own route: counted below
            out.append(
                Probe(
                    f"a's {role} token: {method} a/{route.split('/')[0]} naming b's object",
                    "cross-reference",
                    a.tokens[role],
                    method,
                    f"/api/v1/projects/{a.name}/{route}",
                    body,
                    twin=f"/api/v1/projects/{a.name}/{twin_route}" + ("|" + json.dumps(twin_body) if twin_body else ""),
                )
            )
    # Roles on a's own project.
    own = f"/api/v1/projects/{a.name}"
    writes = [
        ("POST", f"{own}/jobs", None, spec_files, job_form),
        ("POST", f"{own}/results", upload, None, None),
        ("PUT", f"{own}/runs/{a_objects['run']}/traces/{a_objects['trace']}", None, None, None),
        ("POST", f"/api/v1/jobs/{a_objects['job']}/cancel", None, None, None),
    ]
    admin_only = [
        ("GET", f"{own}/tokens", None, None, None),
        ("POST", f"{own}/tokens", {"role": "admin"}, None, None),
        ("DELETE", f"{own}/tokens/{a.token_ids['admin']}", None, None, None),
        ("POST", f"{own}/tokens/{a.token_ids['admin']}/rotate", {"grace": "1h"}, None, None),
        ("GET", f"{own}/audit", None, None, None),
        ("POST", f"{own}/baselines/pins", {"run_id": a_objects["run"]}, None, None),
        ("POST", f"{own}/baselines/exclusions", {"run_id": a_objects["run"], "reason": "x"}, None, None),
        ("POST", f"{own}/baselines/accepted", {"run_id": a_objects["run"]}, None, None),
        ("DELETE", f"{own}/baselines/pins/{a_objects['run']}", None, None, None),
        ("POST", f"/api/v1/github/jobs/{a_objects['job']}/resend", None, None, None),
    ]
    for method, path, body, files, data in [*writes, *admin_only]:
        out.append(
            Probe(
                f"a's read token: {method} {path.replace(own, 'a')}",
                "role",
                a.tokens["read"],
                method,
                path,
                body,
                files,
                data,
            )
        )
    for method, path, body, files, data in admin_only:
        out.append(
            Probe(
                f"a's submit token: {method} {path.replace(own, 'a')}",
                "role",
                a.tokens["submit"],
                method,
                path,
                body,
                files,
                data,
            )
        )
    # Worker tokens on project routes, and on job routes without a claim.
    worker = stack.worker_tokens[PARKED]
    for method, path, body, files, data in [
        ("GET", f"{own}/runs", None, None, None),
        ("GET", f"{own}/jobs", None, None, None),
        ("GET", f"/api/v1/jobs/{a_objects['job']}", None, None, None),
        ("POST", f"{own}/jobs", None, spec_files, job_form),
        ("POST", f"{own}/results", upload, None, None),
        ("GET", f"{own}/tokens", None, None, None),
        ("GET", f"{own}/audit", None, None, None),
    ]:
        out.append(
            Probe(f"worker token: {method} {path.replace(own, 'a')}", "worker", worker, method, path, body, files, data)
        )
    job = bo["job"]
    for what, body in (
        ("no secret", {"attempt": 1, "worker": "intruder"}),
        ("a wrong secret", {"attempt": 1, "worker": "intruder", "secret": secrets.token_urlsafe(32)}),
    ):
        out.append(
            Probe(
                f"worker token + b's job id, {what}: claim",
                "worker",
                worker,
                "POST",
                f"/internal/jobs/{job}/claim",
                body,
            )
        )
    out.append(
        Probe(
            "another testbed's worker token + b's job id and its secret: claim",
            "worker",
            stack.worker_tokens[TESTBED],
            "POST",
            f"/internal/jobs/{job}/claim",
            {"attempt": 1, "worker": "intruder", "secret": bo["secret"]},
        )
    )
    for method, route, body in (
        ("GET", "bundle", None),
        ("POST", "heartbeat", {"attempt": 1}),
        ("POST", "result", {"attempt": 1, "result": {}}),
        ("POST", "failure", {"attempt": 1, "reason": "intruder"}),
        ("PUT", "traces/x.json.gz?attempt=1", None),
    ):
        out.append(
            Probe(
                f"worker token without a claim: {method} b's job {route}",
                "worker",
                worker,
                method,
                f"/internal/jobs/{job}/{route}",
                body,
            )
        )
        out.append(
            Probe(
                f"a's job token on b's job: {method} {route}",
                "job-token",
                a_objects["job_token"],
                method,
                f"/internal/jobs/{job}/{route}",
                body,
            )
        )
    for method, path in (
        ("GET", f"{own}/runs"),
        ("GET", f"/api/v1/jobs/{a_objects['job']}"),
        ("GET", "/internal/testbed"),
    ):
        out.append(
            Probe(f"a job token: {method} {path.replace(own, 'a')}", "job-token", a_objects["job_token"], method, path)
        )
    for role in ROLES:
        out.append(
            Probe(
                f"a's {role} token: claim b's job with its secret",
                "role",
                a.tokens[role],
                "POST",
                f"/internal/jobs/{job}/claim",
                {"attempt": 1, "worker": "x", "secret": bo["secret"]},
            )
        )
    for method, path in (
        ("GET", f"/api/v1/projects/{b.name}/runs"),
        ("GET", f"/api/v1/jobs/{job}"),
        ("GET", "/internal/testbed"),
    ):
        out.append(Probe(f"no token: {method} {path}", "no-token", None, method, path))
    return out


def _send_probe(stack: Stack, p: Probe, path: str | None = None, body: Any = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {p.token}"} if p.token else {}
    with httpx.Client(base_url=stack.url, headers=headers, timeout=30) as http:
        target = path or p.path
        if p.method == "PUT":
            return http.put(target, content=gzip.compress(b"{}"), headers={"Content-Type": "application/gzip"})
        if p.files is not None:
            return http.request(p.method, target, files=p.files, data=p.data)
        sent = body if body is not None else p.body
        return http.request(p.method, target, json=sent) if sent is not None else http.request(p.method, target)


def _b_state(stack: Stack) -> dict[str, Any]:
    b = stack.tenants["b"]
    pid = stack.sql("SELECT id FROM projects WHERE name = %s", b.name)[0][0]
    state: dict[str, Any] = {}
    for table in ("jobs", "runs", "comparisons", "baseline_rules", "tokens"):
        state[table] = stack.sql(f"SELECT count(*) FROM {table} WHERE project_id = %s", pid)[0][0]
    state["job_states"] = sorted(str(s) for (s,) in stack.sql("SELECT status FROM jobs WHERE project_id = %s", pid))
    state["token_hashes"] = sorted(
        str(h)
        for (h,) in stack.sql("SELECT secret_sha256 FROM tokens WHERE project_id = %s AND revoked_at IS NULL", pid)
    )
    state["traces"] = stack.sql(
        "SELECT count(*) FROM run_traces t JOIN runs r ON r.id = t.run_id WHERE r.project_id = %s", pid
    )[0][0]
    return state


def scenario_isolation(args: argparse.Namespace) -> dict[str, Any]:
    from tests.claiming import claim_secret
    from tests.server import documents as docs

    with stack_infra(args, "isolation") as (stack, _cluster, _redis):
        stack.start_service()
        bo = _b_objects(stack)
        bo["secret"] = claim_secret(stack.broker_url, PARKED, bo["job"])
        a = stack.tenants["a"]
        document = docs.h200()
        with stack.http(a.tokens["submit"]) as http:
            up = http.post(f"/api/v1/projects/{a.name}/results", json=docs.upload_body(document))
            up.raise_for_status()
        # a's job on another testbed: b's job holds the one offer a testbed with no live worker gets.
        a_job = stack.submit(small_suite(0.1), testbed=TESTBED)
        a_secret = claim_secret(stack.broker_url, TESTBED, a_job)
        with stack.http(stack.worker_tokens[TESTBED]) as http:
            claimed = http.post(f"/internal/jobs/{a_job}/claim", json={"attempt": 1, "worker": "a", "secret": a_secret})
        claimed.raise_for_status()
        a_objects = {
            "run": up.json()["run_id"],
            "trace": document["cases"][0]["trace"],
            "job": a_job,
            "job_token": claimed.json()["token"],
        }
        before = _b_state(stack)
        rows = []
        for p in probes(stack, bo, a_objects):
            r = _send_probe(stack, p)
            row: dict[str, Any] = {"probe": p.what, "kind": p.kind, "method": p.method, "status": r.status_code}
            with contextlib.suppress(ValueError):
                row["error"] = r.json().get("error")
                row["detail"] = str(r.json().get("detail", ""))[:200]
            row["refused"] = r.status_code in (401, 403, 404) or (r.status_code in (409, 422) and p.kind == "worker")
            if p.twin:
                path, _, twin_body = p.twin.partition("|")
                t = _send_probe(stack, p, path, json.loads(twin_body) if twin_body else None)
                same = t.status_code == r.status_code
                with contextlib.suppress(ValueError):
                    same = same and t.json().get("error") == r.json().get("error")
                row["twin_status"] = t.status_code
                row["same_as_missing"] = same
            # Something that existed must not be described to an intruder beyond "not found".
            leaked = [k for k in ("run", "comparison", "job") if bo[k] in r.text and p.kind != "no-token"]
            row["mentions_b_ids"] = [k for k in leaked if r.status_code < 400]
            row["ok"] = row["refused"] and not row["mentions_b_ids"] and row.get("same_as_missing", True)
            rows.append(row)
        after = _b_state(stack)
        # Each of b's tokens still works, and b's job still waits for a worker.
        with stack.http() as http:
            b_tokens_work = all(
                http.get("/api/v1/token", headers={"Authorization": f"Bearer {t}"}).status_code == 200
                for t in stack.tenants["b"].tokens.values()
            )
        a_job_state = _row(stack, a_job)["status"]
        by_kind: dict[str, dict[str, int]] = {}
        for row in rows:
            k = by_kind.setdefault(row["kind"], {"probes": 0, "refused": 0, "ok": 0})
            k["probes"] += 1
            k["refused"] += int(row["refused"])
            k["ok"] += int(row["ok"])
        statuses: dict[str, int] = {}
        for row in rows:
            statuses[str(row["status"])] = statuses.get(str(row["status"]), 0) + 1
        for row in rows:
            if not row["ok"]:
                say(
                    f"  NOT {row['status']} {row['probe']}: {row.get('detail', '')[:100]} "
                    f"(for a missing object: {row.get('twin_status')})"
                )
        say(f"  {sum(r['ok'] for r in rows)} of {len(rows)} refused as they must be; answers {statuses}")
        return {
            "probes": len(rows),
            "refused": sum(r["refused"] for r in rows),
            "ok": all(r["ok"] for r in rows) and before == after and b_tokens_work,
            "refused_as_designed": sum(r["ok"] for r in rows),
            "by_kind": by_kind,
            "statuses": statuses,
            "not_ok": [r for r in rows if not r["ok"]],
            "b_unchanged": before == after,
            "b_before": {k: v for k, v in before.items() if k != "token_hashes"},
            "b_after": {k: v for k, v in after.items() if k != "token_hashes"},
            "b_tokens_still_work": b_tokens_work,
            "a_claimed_job_state_after": a_job_state,
            "rows": rows,
            "server_tracebacks": stack.procs["service"].text().count("Traceback"),
        }


# --- 8. hostile jobs: the jail's own tests ------------------------------------------------------------------

HOSTILE_TESTS = ("tests/worker/test_jail.py", "tests/worker/test_hostile_jobs.py")


def scenario_hostile_jobs(args: argparse.Namespace) -> dict[str, Any]:
    """The jail's tests and the hostile job through the real stack, run by pytest against this scenario's own
    Postgres and Redis (``ATTNPROF_TEST_PG``, ``ATTNPROF_TEST_WORKER_REDIS``); their outcome, test by test."""
    import xml.etree.ElementTree as ET

    workdir = Path(tempfile.mkdtemp(prefix="attnprof-rel-hostile-"))
    redis_server = OwnRedis(workdir / "redis", aof=False)
    try:
        redis_server.start()
        with own_postgres() as cluster:
            junit = workdir / "junit.xml"
            env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNPROF_")}
            env.update(
                ATTNPROF_TEST_PG=admin_url(cluster),
                ATTNPROF_TEST_WORKER_REDIS=redis_server.url(12),
                ATTNPROF_TEST_REDIS=redis_server.url(11),
                PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]),
            )
            # The venv by its real path: the jail binds the interpreter's installation, not a link to it.
            python = Path(sys.prefix).resolve() / "bin" / Path(sys.executable).name
            argv = [
                str(python if python.exists() else sys.executable),
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={junit}",
                *HOSTILE_TESTS,
            ]
            t0 = time.monotonic()
            try:
                done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.hostile_s)
                code, output = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired as exc:
                code, output = None, f"pytest ran past {args.hostile_s:.0f} s: {exc}"
            seconds = round(time.monotonic() - t0, 1)
            tests: list[dict[str, Any]] = []
            if junit.is_file():
                for case in ET.parse(junit).getroot().iter("testcase"):
                    outcome = "passed"
                    for tag in ("failure", "error", "skipped"):
                        found = case.find(tag)
                        if found is not None:
                            outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                            outcome += f": {(found.get('message') or '')[:200]}"
                    tests.append(
                        {
                            "test": f"{case.get('classname')}::{case.get('name')}",
                            "outcome": outcome,
                            "seconds": float(case.get("time") or 0),
                        }
                    )
            for t in tests:
                say(f"  {t['outcome'][:60]:<10} {t['test']}")
            passed = sum(1 for t in tests if t["outcome"] == "passed")
            return {
                "command": " ".join(["pytest -q", *HOSTILE_TESTS]),
                "exit_code": code,
                "seconds": seconds,
                "tests": tests,
                "passed": passed,
                "total": len(tests),
                "summary": output.strip().splitlines()[-1] if output.strip() else "",
                "output_tail": output[-3000:] if code != 0 else "",
                "ok": code == 0 and passed == len(tests) and bool(tests),
            }
    finally:
        redis_server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# --- main ---------------------------------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "profile-kill": scenario_profile_kill,
    "analysis-kill": scenario_analysis_kill,
    "redis": scenario_redis,
    "postgres": scenario_postgres,
    "schemathesis": scenario_schemathesis,
    "bad-inputs": scenario_bad_inputs,
    "isolation": scenario_isolation,
    "hostile-jobs": scenario_hostile_jobs,
}


def host() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": pipeline._cpu_model(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "load": pipeline.load_average(),
        "platform": platform.platform(),
    }


def versions() -> dict[str, str]:
    """The pipeline benchmark's list (Python, the platform, Celery, kombu, FastAPI, ...), the fuzzers, and the
    servers this benchmark starts."""
    import importlib.metadata as md

    found = pipeline.versions()
    for name in ("schemathesis", "hypothesis", "httpx", "redis"):
        with contextlib.suppress(md.PackageNotFoundError):
            found[name] = md.version(name)
    for key, argv in (
        ("redis-server", ["redis-server", "--version"]),
        ("postgres", [str(_bindir() / "postgres"), "--version"]),
        ("bubblewrap", ["bwrap", "--version"]),
    ):
        with contextlib.suppress(OSError):
            found[key] = subprocess.run(argv, capture_output=True, text=True).stdout.strip()
    return found


def code_commit() -> dict[str, Any]:
    """The commit of the code measured: the checkout's HEAD (and whether its code folders had edits), or, for an
    export of one commit (``git archive``), the hash written beside it in ``.commit``."""
    marker = ROOT / ".commit"
    if marker.is_file():
        return {"commit": marker.read_text().strip(), "tree": "export of the commit"}
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "service", "worker", "attnprof.core", "attnprof"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {"commit": head, "tree": "checkout with uncommitted edits" if dirty else "clean checkout"}


def run_scenario(name: str, args: argparse.Namespace) -> dict[str, Any]:
    say(f"[{name}] start; load average {pipeline.load_average()}")
    started = time.monotonic()
    data: dict[str, Any] = {
        "scenario": name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([pipeline._interpreter(), "bench/reliability.py", name, *_passed_options()]),
        "invoked_as": " ".join([pipeline._interpreter(), *sys.argv]),
        "code": code_commit(),
        "versions": versions(),
        "host_before": host(),
        "settings": SWEEP,
    }
    try:
        data["result"] = RUNNERS[name](args)
    except Exception as exc:  # a scenario that broke is recorded as such; the others still run
        data["result"] = {"error": f"{type(exc).__name__}: {exc}"}
        say(f"[{name}] broke: {type(exc).__name__}: {exc}")
    data["wall_s"] = round(time.monotonic() - started, 1)
    data["host_after"] = host()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, default=str))
    say(f"[{name}] done in {data['wall_s']} s: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return data


def _passed_options() -> list[str]:
    """The options this run was given (``all`` runs each scenario with them): the scenario alone, run again."""
    return sys.argv[2:]


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> None:
    # SIGTERM stops the benchmark as Ctrl-C does: its processes, clusters and folders are removed on the way out.
    signal.signal(signal.SIGTERM, _interrupt)
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("scenario", choices=(*SCENARIOS, "all", "report"))
    ap.add_argument("--tries", type=int, default=3, help="kills per kill scenario")
    ap.add_argument("--kill-after-s", type=float, default=2.0, help="profile-kill: seconds into the profiling")
    ap.add_argument("--redis-jobs", type=int, default=8, help="redis: jobs in flight when Redis is killed")
    ap.add_argument("--redis-wait-s", type=float, default=180.0, help="redis: the longest wait for the jobs")
    ap.add_argument("--pg-submissions", type=int, default=200, help="postgres: submissions under the restart")
    ap.add_argument("--pg-down-s", type=float, default=5.0, help="postgres: seconds the database stays stopped")
    ap.add_argument("--schemathesis-s", type=float, default=150.0, help="schemathesis: the time budget, both documents")
    ap.add_argument("--st-examples", type=int, default=30, help="schemathesis: positive cases per operation")
    ap.add_argument("--hostile-s", type=float, default=420.0, help="hostile-jobs: the longest the tests may run")
    ap.add_argument("--out", type=Path, default=OUT, help="raw JSON, one file per scenario")
    ap.add_argument("--report", type=Path, default=REPORT)
    ap.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=None,
        help="report: the results to read, a folder of raw JSON (default: --out) or a summary.json a report wrote",
    )
    ap.add_argument("--cache-dir", type=Path, default=None, help="the profile workers' peaks cache (default: --out's)")
    ap.add_argument("--keep", action="store_true", help="keep each scenario's work folder (logs, database files)")
    args = ap.parse_args()
    args.cache_dir = (args.cache_dir or args.out / "peaks-cache").resolve()
    if args.scenario == "report":
        write_report(args)
        return
    names = SCENARIOS if args.scenario == "all" else (args.scenario,)
    for name in names:
        run_scenario(name, args)
    if args.scenario == "all":
        write_report(args)


# --- the report ---------------------------------------------------------------------------------------------

TITLES = {
    "profile-kill": "1. A profile worker killed mid-job",
    "analysis-kill": "2. The analysis worker killed mid-analysis",
    "redis": "3. Redis killed, Redis down",
    "postgres": "4. Postgres stopped and started under submissions",
    "schemathesis": "5. Schemathesis: the public API and the worker routes",
    "bad-inputs": "6. Hand-made hostile inputs",
    "isolation": "7. Isolation: other tenants, other roles, worker and job tokens",
    "hostile-jobs": "8. Hostile jobs: the jail's tests",
}


def _f(x: Any, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def _med(xs: list[Any]) -> float | None:
    import statistics

    ys = [x for x in xs if x is not None]
    return statistics.median(ys) if ys else None


def _span(xs: list[Any], digits: int = 1) -> str:
    ys = [x for x in xs if x is not None]
    if not ys:
        return "–"
    return f"{_f(min(ys), digits)}–{_f(max(ys), digits)}" if len(ys) > 1 else _f(ys[0], digits)


def load_results(source: Path) -> dict[str, dict[str, Any]]:
    """Each scenario's JSON, in the order of ``SCENARIOS``: from a folder of raw files (``NAME.json``), or from a
    summary a report wrote (``summary.json``, every scenario in one file)."""
    if source.is_file():
        summary = json.loads(source.read_text())
        return {name: summary[name] for name in SCENARIOS if name in summary}
    found = {}
    for name in SCENARIOS:
        path = source / f"{name}.json"
        if path.is_file():
            found[name] = json.loads(path.read_text())
    return found


def _counts(found: dict[str, int], between: str = " ") -> str:
    return ", ".join(f"{v}{between}{k}" for k, v in found.items()) or "–"


def _verdict(ok: bool | None) -> str:
    return "–" if ok is None else ("holds" if ok else "**found**")


def summary_rows(data: dict[str, dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """(scenario, the figure in words, whether the rule held) for the summary table."""
    rows: list[tuple[str, str, bool | None]] = []
    for name in SCENARIOS:
        if name not in data:
            rows.append((TITLES[name], "not run", None))
            continue
        r = data[name]["result"]
        if "error" in r:
            rows.append((TITLES[name], f"the scenario broke: {r['error']}", False))
            continue
        if name == "profile-kill":
            t = r["tries"]
            good = [x for x in t if x.get("ok")]
            rows.append(
                (
                    TITLES[name],
                    f"{len(good)} of {len(t)} kills: one run per job (by the second attempt), one "
                    "comparison; takeover (kill → claimed by the other worker) "
                    f"{_span([x.get('kill_to_claimed_s') for x in t])} s",
                    len(good) == len(t),
                )
            )
        elif name == "analysis-kill":
            t = r["tries"]
            good = [x for x in t if x.get("ok")]
            rows.append(
                (
                    TITLES[name],
                    f"{len(good)} of {len(t)} kills: done {_span([x.get('kill_to_done_s') for x in t])} s "
                    "after the kill, one comparison (also after the dead worker's delivery ran again)",
                    len(good) == len(t),
                )
            )
        elif name == "redis":
            parts, ok = [], True
            for key, c in r["cases"].items():
                if "error" in c:
                    parts.append(f"{key}: broke ({c['error'][:80]})")
                    ok = False
                    continue
                parts.append(
                    f"{key.replace('_', ' ')}: {c['done']}/{c['jobs']} done, {len(c['stored_twice'])} stored twice"
                    + (f", {len(c['restarts'])} worker exit(s)" if c.get("restarts") else "")
                )
                ok = ok and bool(c["ok"]) and not c.get("restarts")
            rows.append((TITLES[name], "; ".join(parts), ok))
        elif name == "postgres":
            st = r["storm"]
            waits = ", ".join(f"at its {w['when']}: exit {w['exit_code']}" for w in r["submit_wait"])
            ok = bool(st["ok"]) and all(w["ok"] for w in r["submit_wait"])
            rows.append(
                (
                    TITLES[name],
                    f"{st['submissions']} submissions: {st['accepted']} accepted, {st['refused']} refused "
                    f"({', '.join(f'{v} {k}' for k, v in st['answers_by_kind'].items() if k != 'accepted')}); "
                    f"accepted lost {len(st['accepted_lost'])}, refused but stored {len(st['refused_but_stored'])}; "
                    f"`submit --wait` {waits}",
                    ok,
                )
            )
        elif name == "schemathesis":
            pub, internal = r["public"], r["internal"]
            rows.append(
                (
                    TITLES[name],
                    f"{pub['cases']} cases on /openapi.json, {internal['cases']} on /internal/openapi.json; "
                    f"server errors {pub['server_errors'] + internal['server_errors']}; other check failures "
                    f"{pub['check_failures'] + internal['check_failures']}",
                    bool(r["ok"]),
                )
            )
        elif name == "bad-inputs":
            rows.append(
                (
                    TITLES[name],
                    f"{r['refused_clearly']} of {r['inputs']} refused with a 4xx naming the field and "
                    f"nothing stored; {r['refused']} of {r['inputs']} refused; {len(r['changed_something'])} changed "
                    "something",
                    bool(r["ok"]),
                )
            )
        elif name == "isolation":
            rows.append(
                (
                    TITLES[name],
                    f"{r['refused_as_designed']} of {r['probes']} requests refused (and answered as for an "
                    f"object that does not exist, where one was named); project b "
                    f"{'unchanged' if r['b_unchanged'] else 'CHANGED'}",
                    bool(r["ok"]),
                )
            )
        elif name == "hostile-jobs":
            rows.append((TITLES[name], f"{r['passed']} of {r['total']} tests passed ({r['summary']})", bool(r["ok"])))
    return rows


def _section_profile_kill(r: dict[str, Any]) -> list[str]:
    lines = [
        "Two profile workers serve the testbed. Each try submits a job (the small CPU suite with 1 s of timing per "
        f"case), waits until the worker that claimed it has started the profiling subprocess, lets it run "
        f"{r['kill_after_s']} s, and sends SIGKILL to that worker alone. Then: the jailed subprocess must die with it, "
        "the lease on the row runs out (no heartbeat renews it), the sweep re-queues the job for attempt 2 with a "
        "new claim secret, the other worker claims and profiles it; the job must end `done` with exactly one run "
        "(attempt 2) and one comparison. The killed worker is started again before the next try.",
        "",
        "| try | lease left at the kill | kill → re-queued (sweep) | kill → claimed by the other worker | kill → done "
        "| subprocess gone after | runs (attempt) | comparisons | status |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, t in enumerate(r["tries"], 1):
        if "error" in t:
            lines.append(f"| {i} | – | – | – | – | – | – | – | broke: {t['error'][:120]} |")
            continue
        runs = ", ".join(f"1 ({x['attempt']})" for x in t["runs"]) if len(t["runs"]) == 1 else f"**{len(t['runs'])}**"
        lines.append(
            f"| {i} | {_f(t['lease_left_at_kill_s'], 2)} s | {_f(t['kill_to_requeued_s'], 2)} s "
            f"| **{_f(t['kill_to_claimed_s'], 2)} s** | {_f(t['kill_to_done_s'], 2)} s "
            f"| {_f(t['kill_to_orphans_gone_s'], 2)} s | {runs} | {t['comparisons']} | {t['status']}, {t['verdict']} |"
        )
    lines += [
        "",
        "*Re-queued* is the time of the sweep's log line, written once its message is sent, hence a few "
        "milliseconds after the other worker's claim at times. The takeover is the lease left at the kill (at most "
        "`ATTNPROF_SWEEP__HEARTBEAT_STALE_S`, here "
        f"{SWEEP['ATTNPROF_SWEEP__HEARTBEAT_STALE_S']} s, renewed every heartbeat) plus up to one sweep interval "
        f"({SWEEP['ATTNPROF_SWEEP__INTERVAL_S']} s here) plus the claim. With the production settings (60 s lease, "
        "10 s heartbeat, 10 s sweep) the same parts give 50–70 s.",
    ]
    return lines


def _section_analysis_kill(r: dict[str, Any]) -> list[str]:
    lines = [
        "One profile worker; per try an analysis worker (with beat) that holds each analysis "
        f"`ATTNPROF_ANALYSIS__PAUSE_S={r['pause_s']}` s after making the comparison and before recording it "
        "(the test knob of `tests/worker/test_analysis_takeover.py`). A job is submitted and profiled; once its "
        "analysis is paused the worker gets SIGKILL, and a fresh analysis worker (no pause) is started at once, as a "
        "supervisor would. Its sweep must send `analysis.run` again when the lease runs out, whatever the broker's "
        "`unacked` hash holds; the job must be done within a minute with one comparison. Then the dead worker's "
        "delivery is put back on the queue (as kombu restores it after `visibility_timeout`): it must change nothing.",
        "",
        "| try | lease left at the kill | kill → fresh worker ready | kill → analysis sent again | kill → done "
        "| comparisons | after the restored delivery | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, t in enumerate(r["tries"], 1):
        if "error" in t:
            lines.append(f"| {i} | – | – | – | – | – | – | broke: {t['error'][:120]} |")
            continue
        after = t["after_restore"]
        lines.append(
            f"| {i} | {_f(t.get('lease_left_at_kill_s'), 2)} s | {_f(t['kill_to_fresh_ready_s'], 2)} s "
            f"| {_f(t['kill_to_resent_s'], 2)} s | **{_f(t['kill_to_done_s'], 2)} s** | {t['comparisons']} "
            f"| {t['restored_deliveries']} delivery ran: {after['comparisons']} comparison, "
            f"{'finished_at unchanged' if after['finished_at_unchanged'] else 'finished_at CHANGED'} "
            f"| {t['status']}, {t['verdict']} |"
        )
    lines += [
        "",
        f"Here the analyzing lease is {SWEEP['ATTNPROF_SWEEP__ANALYZING_STALE_S']} s (renewed every third of it while "
        "the analysis works); in production it is 120 s, so the same kill is answered after up to about 130 s.",
    ]
    return lines


def _section_redis(r: dict[str, Any]) -> list[str]:
    lines = [
        "Two profile workers, the analysis worker with beat, and a Redis server of this benchmark's own "
        '(a password, `--save ""`; with or without `--appendonly yes --appendfsync everysec`). The figure: every '
        "job ends `done`, with one run and one comparison (none lost, none stored twice). Where a process of the "
        "stack exits by itself, the benchmark starts it again, as the deployment's `restart: unless-stopped` does, "
        "and the exit is listed. *Messages waiting* are the `profile.run` messages on the testbed's queue: the "
        "dispatcher keeps the other queued jobs in the database and offers one per free live worker (at least one).",
        "",
        "| case | jobs | at the kill | messages waiting → after the restart | done | stored twice | profile / analysis "
        "messages sent again by the sweep | all final after Redis was back | worker exits |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, c in r["cases"].items():
        if "error" in c:
            lines.append(f"| {key} | – | – | – | – | – | – | – | broke: {c['error'][:150]} |")
            continue
        at = ", ".join(f"{v} {k}" for k, v in (c.get("at_kill") or {}).items()) or "–"
        waiting = (
            f"{c['messages_waiting_at_kill']} → {c['messages_after_restart']}"
            if "messages_waiting_at_kill" in c
            else "–"
        )
        if "submissions_while_down" in c:
            answers = [a["status"] for a in c["submissions_while_down"]]
            each = _span([a["seconds"] for a in c["submissions_while_down"]], 2)
            at = f"{len(answers)} submitted while down ({answers.count(202)} accepted, {each} s each)"
        exits = (
            "; ".join(
                f"{x['process']} (exit {x['exit_code']}: `{x['last_error'].split('] ', 1)[-1][:110]}`)"
                for x in c.get("restarts", [])
            )
            or "none"
        )
        lines.append(
            f"| {key.replace('_', ' ')} | {c['jobs']} | {at} | {waiting} | {c['done']} | {len(c['stored_twice'])} "
            f"| {c['profile_resent']} / {c['analysis_resent']} | {_f(c.get('back_to_all_final_s'))} s | {exits} |"
        )
    mid = r["cases"].get("kill_mid_analysis")
    if mid and "error" not in mid:
        lines += [
            "",
            "*kill mid analysis*: the analysis worker holds an analysis (paused 8 s) when Redis is killed; Redis is "
            "back "
            f"3 s later. Worker alive while Redis was down: {mid['alive_while_down']}; it exited afterwards: "
            f"{mid['worker_exited']} (exit code {mid['exit_code']}); its log: "
            f"`{(mid['unrecoverable_error'] or 'nothing')[:160]}`.",
        ]
    down = r["cases"].get("down_30s_during_submissions")
    if down and "readyz_while_down" in down and down["readyz_while_down"]:
        lines += [
            "",
            f"`/readyz` while Redis was down: {down['readyz_while_down'][0]['status']} "
            f"`{down['readyz_while_down'][0]['body'][:160]}`.",
        ]
    return lines


_STATES = {"queued, waiting": "waiting in the database", "queued, offered": "offered (its message sent)"}


def _section_postgres(r: dict[str, Any]) -> list[str]:
    st = r["storm"]
    out = st["outage"]
    lines = [
        f"A Postgres cluster of this benchmark's own (`initdb`, its own port, as in `tests/pgcluster.py`). "
        f"{st['submissions']} job submissions from {st['threads']} threads (each pausing 0.25 s between its own, to "
        f"a testbed with no worker, each with its own commit and `Idempotency-Key`, never retried); once "
        f"{st['submissions'] // 4} were answered the cluster was stopped (`pg_ctl stop -m fast`) and started "
        f"{_f(st['down_s'])} s later (stop at {_f(out.get('stop'))} s, started at {_f(out.get('started'))} s of the "
        "storm).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| answers | {', '.join(f'{v} {k}' for k, v in st['answers_by_kind'].items())} |",
        f"| answers sent during the outage | {_counts(st['answers_during_outage_by_kind'])} |",
        f"| plain-text 500 | {len(st['plain_text_500'])} |",
        f"| refusals other than the 503 JSON error | {len(st['not_503_json_refusals'])} |",
        f"| accepted (202) but not stored | **{len(st['accepted_lost'])}** |",
        f"| refused but stored | **{len(st['refused_but_stored'])}** |",
        f"| stored twice | {len(st['stored_twice'])} |",
        "| accepted jobs afterwards (the testbed has no worker: the dispatcher offers it one job at a time) "
        f"| {_counts({_STATES.get(k, k): v for k, v in st.get('accepted_by_state', {}).items()})} |",
        "| accepted but stranded (not queued, or offered with no message once the sweep had its turn) "
        f"| {len(st['accepted_stranded'])} |",
        f"| each refused one sent again with its key | {_counts(st['retries_of_refused_by_status'], ' × ')}; "
        f"rows per commit afterwards: {st['rows_per_commit_after_retries']} |",
        f"| slowest answer | {_f(st['slowest_answer_s'], 3)} s |",
        f"| tracebacks in the server's log | {r['server_tracebacks']} |",
        "",
        "`attnprof submit --wait` (the small suite, a real profile worker) with the database stopped for "
        f"{_f(st['down_s'])} s: before the command starts (its POST meets the outage), and once the job runs (its "
        "polls meet it). It must end with a verdict (exit 0 or 1), never 2 (bad input) or 3 (no verdict):",
        "",
        "| Postgres stopped at | exit code | seconds | jobs stored | job | last line |",
        "|---|---|---|---|---|---|",
    ]
    for w in r["submit_wait"]:
        last = [ln for ln in w["output_tail"].strip().splitlines() if ln.strip()][-1:] or [""]
        lines.append(
            f"| its {w['when']} | **{w['exit_code']}** | {_f(w['seconds'])} | {w['jobs_stored']} "
            f"| {', '.join(w['job_status'])} | `{last[0][:100]}` |"
        )
    return lines


def _section_schemathesis(r: dict[str, Any]) -> list[str]:
    lines = [
        "Schemathesis reads each document from the running server and generates requests per operation "
        f"(derandomized, {r['examples_per_operation']} positive/negative cases an operation at most, no shrinking), "
        "sent over HTTP. Public API: the admin token of a project that holds an uploaded run, its comparison and a "
        "queued job (positive cases name them). Worker routes: the worker token for `/internal/testbed` and the claim "
        "(positive cases carry a fresh job's claim secret); for the job routes, a fresh job is claimed and its job "
        "token used, as `tests/server/test_schemathesis.py` does in process. Every answer is checked with "
        "Schemathesis' default checks (server error, status code, content type and body against the document, "
        f"schema-valid data refused beyond the statuses the schema cannot rule out). Budget {r['budget_s']:.0f} s.",
        "",
        "| document | operations | cases | server errors (5xx) | other check failures | transport errors | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, doc in (("public", "/openapi.json"), ("internal", "/internal/openapi.json")):
        x = r[key]
        lines.append(
            f"| `{doc}` | {len(x['operations'])} | {x['cases']} | **{x['server_errors']}** | {x['check_failures']} "
            f"| {x['transport_errors']} | {_f(x['seconds'])} |"
        )
    notes = []
    for key in ("public", "internal"):
        for name, op in r[key]["operations"].items():
            fails = {k: v for k, v in op["failures"].items() if not k.startswith("generation")}
            if fails:
                notes.append(f"- {name}: {fails}")
    for key in ("public", "internal"):
        for ex in r[key].get("server_error_examples", []):
            notes.append(f"- 5xx: {ex['operation']} → {ex['status']} `{ex['body'][:160]}`")
    if notes:
        lines += ["", "Failures:", "", *notes]
    skipped = [name for key in ("public", "internal") for name, op in r[key]["operations"].items() if op["cases"] == 0]
    if skipped:
        lines += [
            "",
            f"Operations with no case sent: {', '.join(f'`{n}`' for n in skipped)} "
            "(Schemathesis cannot serialise the gzip bodies these take).",
        ]
    return lines


def _section_bad_inputs(r: dict[str, Any]) -> list[str]:
    lines = [
        "Each input is sent to the running server with a token allowed to make the request; the rows of every table "
        "an input could add to (projects, testbeds, jobs, runs, cases, traces, comparisons, alerts, artifacts, "
        "tokens, baseline rules) and the queue's length are counted before and after. An input passes when it gets "
        "a 4xx whose `detail` names the field (one of the words listed) and nothing changed. The 200 MB bodies are "
        "sent 1 MiB at a time over a raw socket that stops as soon as an answer arrives: *sent* is how much went out "
        "before the refusal.",
        "",
        "| input | answer | detail | changed |",
        "|---|---|---|---|",
    ]
    for row in r["rows"]:
        mark = "" if row["ok"] else " **✗**"
        sent = f" (after {row['sent_bytes'] / 1e6:.0f} MB sent)" if row.get("sent_bytes") else ""
        detail = (row["detail"] or row.get("body", ""))[:150].replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {row['input']}{mark} | {row['status']} {row['error'] or ''}{sent} | {detail} "
            f"| {row['changed'] or 'nothing'} |"
        )
    lines += [
        "",
        f"{r['refused_clearly']} of {r['inputs']} pass. Refused without naming the field: "
        f"{', '.join(r['refused_unclear']) or 'none'}. Not refused: {', '.join(r['not_refused']) or 'none'}. "
        f"Changed something: {', '.join(r['changed_something']) or 'none'}. Tracebacks in the server's log: "
        f"{r['server_tracebacks']}.",
    ]
    return lines


def _section_isolation(r: dict[str, Any]) -> list[str]:
    kinds = {
        "cross-project": "project a's admin, submit and read tokens on project b's routes and b's jobs by id",
        "cross-reference": "a's tokens on a's own routes naming b's run, comparison or token",
        "role": "a read token on write routes, a submit token on admin routes, project tokens on the worker claim",
        "worker": "a worker token on project routes; on b's job without the claim secret, with a wrong one, "
        "from another testbed with the right one, and on the job routes without a claim",
        "job-token": "a's job token (a claimed job of a's) on b's job routes and on project routes",
        "no-token": "no Authorization header",
    }
    lines = [
        "Two projects, a and b, each with a token of each role; b holds an uploaded run with its comparison and a "
        "trace, a pin, a queued job. Each probe must be refused (401, 403 or 404; a worker request to a job may also "
        "be 409 or 422) and, where it names one of b's objects, answered exactly as the same request naming an "
        "object that does not exist (a project that is not there, a random id), so that nothing tells an intruder "
        "what exists.",
        "",
        "| probes | what | refused as they must be |",
        "|---|---|---|",
    ]
    for kind, counts in r["by_kind"].items():
        lines.append(f"| {counts['probes']} | {kinds.get(kind, kind)} | {counts['ok']} of {counts['probes']} |")
    lines += [
        "",
        f"Answers: {', '.join(f'{v} × {k}' for k, v in sorted(r['statuses'].items()))}. Project b after the probes: "
        f"{'unchanged' if r['b_unchanged'] else 'CHANGED'} ({r['b_after']}); b's tokens all still work: "
        f"{r['b_tokens_still_work']}; a's claimed job still `{r['a_claimed_job_state_after']}`.",
    ]
    if r["not_ok"]:
        lines += ["", "Not refused as they must be:", ""]
        lines += [f"- {x['probe']}: {x['status']} {x.get('detail', '')[:160]}" for x in r["not_ok"]]
    return lines


def _section_hostile(r: dict[str, Any]) -> list[str]:
    lines = [
        f"`{r['command']}`, against this scenario's own Postgres cluster and Redis (`ATTNPROF_TEST_PG`, "
        f"`ATTNPROF_TEST_WORKER_REDIS`): exit {r['exit_code']} in {_f(r['seconds'])} s.",
        "",
        "| test | outcome | seconds |",
        "|---|---|---|",
    ]
    for t in r["tests"]:
        lines.append(f"| `{t['test'].split('.')[-1]}` | {t['outcome']} | {_f(t['seconds'])} |")
    return lines


SECTIONS = {
    "profile-kill": _section_profile_kill,
    "analysis-kill": _section_analysis_kill,
    "redis": _section_redis,
    "postgres": _section_postgres,
    "schemathesis": _section_schemathesis,
    "bad-inputs": _section_bad_inputs,
    "isolation": _section_isolation,
    "hostile-jobs": _section_hostile,
}


def findings(data: dict[str, dict[str, Any]]) -> list[str]:
    """The defects a run showed, in words: what, and how to see it again."""
    out = []
    redis = data.get("redis", {}).get("result", {}).get("cases", {})
    exits = [(k, x) for k, c in redis.items() for x in c.get("restarts", [])]
    if exits:
        v = data["redis"].get("versions", {})
        out.append(
            f"**An analysis worker exits when Redis goes away while it holds a message** ({len(exits)} exit(s) in "
            f"this run: {', '.join(sorted({k.replace('_', ' ') for k, _ in exits}))}). Celery "
            f"{v.get('celery', '?')} / kombu {v.get('kombu', '?')}, `--pool=threads`: the consumer sees the lost "
            "connection, restores its unacknowledged message while closing the channel, and the channel's client "
            "is already gone: `Unrecoverable error: AttributeError(\"'NoneType' object has no attribute "
            "'hostname'\")` (kombu `redis.py` `_connparams`, from `restore_unacked_once`). The running task still "
            "finishes (the job is not lost), then the process exits, **with exit code 0**, and beat (the sweeper) "
            "with it: nothing is resent until the worker is started again. docker-compose's `restart: "
            "unless-stopped` starts it again; a supervisor that restarts only on failure (systemd "
            "`Restart=on-failure`) "
            "would not. The profile workers (`--pool=solo`) rode out every Redis kill. To see it: "
            "`.venv/bin/python bench/reliability.py redis` (case *kill mid analysis*: an analysis held 8 s by "
            "`ATTNPROF_ANALYSIS__PAUSE_S`, Redis killed, its log ends with the line above)."
        )
    bad = data.get("bad-inputs", {}).get("result", {})
    for row in bad.get("not_ok", []):
        what = (
            "was not refused"
            if not row["refused"]
            else (
                "changed " + str(row["changed"])
                if row["changed"]
                else f"is refused ({row['status']}) but the message does not name the field: "
                f"`{(row['detail'] or row.get('body', ''))[:140]}`"
            )
        )
        out.append(f"Bad input *{row['input']}* {what}.")
    iso = data.get("isolation", {}).get("result", {})
    for row in iso.get("not_ok", []):
        out.append(f"Isolation probe *{row['probe']}* answered {row['status']}: `{row.get('detail', '')[:140]}`.")
    for key in ("public", "internal"):
        for ex in data.get("schemathesis", {}).get("result", {}).get(key, {}).get("server_error_examples", []):
            out.append(
                f"Schemathesis: {ex['operation']} answered {ex['status']}: `{ex['body'][:140]}`; `{ex['curl'][:300]}`."
            )
    pg = data.get("postgres", {}).get("result", {})
    if pg:
        st = pg["storm"]
        for key, words in (
            ("accepted_lost", "accepted and not stored"),
            ("refused_but_stored", "refused and stored"),
            ("stored_twice", "stored twice"),
            ("plain_text_500", "answered a plain-text 500"),
        ):
            if st.get(key):
                out.append(f"Postgres restart: {len(st[key])} submission(s) {words}: {st[key][:3]}.")
        for w in pg["submit_wait"]:
            if not w["ok"]:
                out.append(
                    f"`attnprof submit --wait` with Postgres stopped at its {w['when']} exited {w['exit_code']}."
                )
    for name in ("profile-kill", "analysis-kill"):
        for i, t in enumerate(data.get(name, {}).get("result", {}).get("tries", []), 1):
            if not t.get("ok"):
                out.append(
                    f"{TITLES[name]}, try {i}: "
                    f"{t.get('error') or {k: t.get(k) for k in ('status', 'runs', 'comparisons', 'kill_to_done_s')}}."
                )
    hj = data.get("hostile-jobs", {}).get("result", {})
    for t in hj.get("tests", []):
        if t["outcome"] != "passed":
            out.append(f"Hostile jobs: `{t['test']}` {t['outcome'][:200]}.")
    return out


def _plot(data: dict[str, dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    bars: list[tuple[str, list[tuple[float, float, str]]]] = []
    colours = {"lease": "#c6dbef", "sweep": "#6baed6", "claim": "#2171b5", "work": "#bdbdbd", "resent": "#fd8d3c"}
    for i, t in enumerate(data.get("profile-kill", {}).get("result", {}).get("tries", []), 1):
        if t.get("kill_to_claimed_s") is None:
            continue
        lease = max(0.0, t.get("lease_left_at_kill_s") or 0.0)
        req = t.get("kill_to_requeued_s") or lease
        parts = [
            (0.0, lease, "lease"),
            (lease, max(0.0, req - lease), "sweep"),
            (req, max(0.0, t["kill_to_claimed_s"] - req), "claim"),
        ]
        if t.get("kill_to_done_s"):
            parts.append((t["kill_to_claimed_s"], t["kill_to_done_s"] - t["kill_to_claimed_s"], "work"))
        bars.append((f"profile worker, try {i}", parts))
    for i, t in enumerate(data.get("analysis-kill", {}).get("result", {}).get("tries", []), 1):
        if t.get("kill_to_done_s") is None:
            continue
        lease = max(0.0, t.get("lease_left_at_kill_s") or 0.0)
        resent = t.get("kill_to_resent_s") or lease
        parts = [
            (0.0, lease, "lease"),
            (lease, max(0.0, resent - lease), "sweep"),
            (resent, t["kill_to_done_s"] - resent, "resent"),
        ]
        bars.append((f"analysis worker, try {i}", parts))
    for key, c in data.get("redis", {}).get("result", {}).get("cases", {}).items():
        if c.get("kill_to_all_final_s"):
            bars.append(
                (
                    f"Redis {key.replace('kill_', 'kill, ').replace('_', ' ')}: all 8 final",
                    [(0.0, c["kill_to_all_final_s"], "work")],
                )
            )
    if not bars:
        return False
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(bars) + 1.6))
    labels = {
        "lease": "lease left at the kill",
        "sweep": "until the sweep acts",
        "claim": "until the other worker claims",
        "work": "profiling / jobs finishing",
        "resent": "analysis again until done",
    }
    seen: set[str] = set()
    for y, (_, parts) in enumerate(bars):
        for left, width, kind in parts:
            ax.barh(y, width, left=left, color=colours[kind], label=None if kind in seen else labels[kind])
            seen.add(kind)
    ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(60, color="0.5", lw=0.8, ls="--")
    ax.set_xlabel("seconds after the kill (leases shortened: running 8 s, analyzing 10 s, sweep every 2 s)")
    ax.set_title("attnprof: takeover after SIGKILL, and Redis kills, on 2 CPU cores")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# The fields of a bad input's row the report's table shows: the summary keeps them for every input.
ROW_FIELDS = ("input", "group", "status", "error", "detail", "body", "sent_bytes", "expected", "words", "changed", "ok")


def _small(data: Any) -> Any:
    """The raw figures without logs, per-job lists, per-request rows or long texts (a command's output keeps its
    end): what the committed summary keeps."""
    if isinstance(data, dict):
        return {
            k: ("…" + v[-400:] if k == "output_tail" and isinstance(v, str) and len(v) > 400 else _small(v))
            for k, v in data.items()
            if k not in ("logs", "per_job", "rows")
        }
    if isinstance(data, list):
        return [_small(v) for v in data[:60]]
    if isinstance(data, str) and len(data) > 400:
        return data[:400] + "…"
    return data


def summary(data: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The committed summary of a run's raw JSON: ``_small`` of each scenario, and the bad-inputs rows with the
    fields the report's table shows, so that the report can be written again from the summary alone."""
    found = {name: _small(d) for name, d in data.items()}
    rows = data.get("bad-inputs", {}).get("result", {}).get("rows")
    if rows is not None:
        found["bad-inputs"]["result"]["rows"] = [{k: _small(row[k]) for k in ROW_FIELDS if k in row} for row in rows]
    return found


def write_report(args: argparse.Namespace) -> None:
    source = args.source or args.out
    data = load_results(source)
    if not data:
        raise SystemExit(f"no scenario results in {source}: run a scenario first")
    first = min(d["date"] for d in data.values())
    day = first[:10]
    report = args.report
    report.parent.mkdir(parents=True, exist_ok=True)
    plot = report.with_suffix(".png")
    any_run = next(iter(data.values()))
    v = any_run.get("versions", {})
    commits = {json.dumps(d.get("code", {}), sort_keys=True) for d in data.values()}
    code = "; ".join(f"{c.get('commit', '?')[:12]} ({c.get('tree', '?')})" for c in map(json.loads, commits))
    hosts = [(n, d["host_before"], d["host_after"]) for n, d in data.items()]
    h0 = hosts[0][1]
    invoked = sorted({d.get("invoked_as", d["command"]) for d in data.values()})
    lines = [
        f"# Reliability and security of the stack: kills, outages, fuzzing, hostile inputs, tenants ({day})",
        "",
        "Each scenario starts the real stack as docs/service.md says (`attnprof serve`, `attnprof worker --analysis` "
        "with beat, CPU profile workers `attnprof worker --testbed rel-cpu --device cpu` with their bubblewrap "
        "jail), on loopback, with a Postgres cluster and a Redis server of its own (free ports, temporary folders, "
        "removed afterwards), then breaks something and counts what the database holds. Leases and the sweep are "
        "shortened so that a takeover takes seconds: "
        + ", ".join(f"`{k}={val}`" for k, val in SWEEP.items())
        + " (production: 10 s sweep, 60 s running lease, 120 s analyzing lease, 10 s heartbeat); each takeover is "
        "split into its parts, so the production figure follows.",
        "",
        f"**Host**: {h0['cpus']} cores ({h0['cpu_model']}), {h0['memory_gib']} GiB, {h0['platform']}; shared with "
        "other engineers' work: 1/5/15-minute load average per scenario, before → after: "
        + "; ".join(f"{n} {b['load']} → {a['load']}" for n, b, a in hosts)
        + ". Times include waiting for a core.",
        "",
        f"**Code**: commit {code}. **Versions**: "
        + ", ".join(f"{k} {val}" for k, val in v.items() if k != "platform")
        + ".",
        "",
        "Produced by (each scenario also runs alone: `bench/reliability.py SCENARIO`, then `bench/reliability.py "
        "report`):",
        "",
        "```bash",
        *invoked,
        "```",
        "",
        f"Raw figures: `out/reliability/*.json` (logs included, not committed); their summary without logs: "
        f"`bench/reports/data/reliability-{day}/summary.json`. Scenario wall times: "
        + ", ".join(f"{n} {d['wall_s']:.0f} s" for n, d in data.items())
        + f"; {sum(d['wall_s'] for d in data.values()) / 60:.1f} min in all.",
        "",
        "## Summary",
        "",
        "| scenario | figure | the rule |",
        "|---|---|---|",
    ]
    for title, figure, ok in summary_rows(data):
        lines.append(f"| {title} | {figure} | {_verdict(ok)} |")
    lines += [
        "",
        "To compare a later run: the counts must stay as they are here (every job done once, no answer other than the "
        "503 JSON error during an outage, every hostile input and probe refused); the times follow the lease and "
        "sweep settings above and the load of the host.",
    ]
    found = findings(data)
    lines += ["", "## Found", ""]
    lines += [f"{i}. {text}" for i, text in enumerate(found, 1)] or ["Nothing: every rule held."]
    if _plot(data, plot):
        lines += ["", f"![takeover times]({plot.name})"]
    for name in SCENARIOS:
        if name not in data:
            continue
        d = data[name]
        lines += ["", f"## {TITLES[name]}", "", f"`{d['command']}` ({d['date']}, {d['wall_s']:.0f} s).", ""]
        if "error" in d["result"]:
            lines.append(f"The scenario broke: {d['result']['error']}")
            continue
        lines += SECTIONS[name](d["result"])
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines) + "\n")
    folder = report.parent / "data" / f"reliability-{day}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary(data), indent=1, default=str) + "\n")
    say(f"report: {report}; summary: {folder / 'summary.json'}")


if __name__ == "__main__":
    main()
