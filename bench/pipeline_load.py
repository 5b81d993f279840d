"""Benchmark of the worker pipeline: the real stack (service, Celery workers, broker, database) on one host.

    .venv/bin/python -m bench.pipeline_load --jobs 40                 # CPU: Postgres, Redis, 2 profile workers
    .venv/bin/python -m bench.pipeline_load --jobs 6 --quick          # a smoke run
    python3 -m bench.pipeline_load compare --embedded --device cuda --testbed h200 \\
        --suite examples/llama7b.toml --budget-s 420 --out $OUT/pipeline   # GPU host (bench/pipeline_h200.sh)
    python3 -m bench.pipeline_load compare-report --data DIR [--data DIR2] \\
        --context bench/reports/data/h200-2026-11-29 --out bench/reports/pipeline-h200.md
    .venv/bin/python -m bench.pipeline_load load-report --data FIGURES.json --out REPORT.md   # write a report again

``load`` (the default), on this machine:
1. the suite is profiled directly (``python -m attnprof.core profile``, the worker's own command line) a few
   times: the first run fills the peaks cache that the workers then share, the others give the direct time;
2. the stack is started: a fresh Postgres database migrated with Alembic (or SQLite with ``--embedded``),
   Redis (or kombu's folder broker), ``attnprof serve``, ``attnprof worker --analysis`` (with beat) and
   ``--profile-workers`` processes of ``attnprof worker --testbed NAME --device cpu``;
3. burst: ``--jobs`` jobs submitted at once: jobs per minute, and where each job's time went;
4. paced: ``--paced`` jobs (default ``--jobs``) submitted one at a time, each once the previous one is done,
   so a profile worker is always idle: the queue-to-start latency of an idle pipeline and the overhead of
   one job without contention;
5. the report (markdown), a plot beside it, and the raw figures (JSON).

``compare`` (GPU host): the same stack with one profile worker on the GPU, then, in turn, the suite submitted
as a job (waited for until done) and the same suite profiled directly, until the time budget is spent; every
result document is kept, and ``compare-report`` puts the two sets side by side, per case.

Timestamps of one job, all read on this host's clock: ``created_at``, ``started_at`` (the claim) and
``finished_at`` (the verdict) from the job, the start and wall time of the profiling from the result
document (``run.created_at``, ``run.wall_s``: taken inside the subprocess, after its imports), the moment the
run row was written from the run, and the moment the worker started the subprocess from its log line
("profiling in"). Server-side request times (claim, bundle, result) come from the service's ``/metrics``.
CPU seconds of every process of the stack are read from ``/proc`` (own, live descendants, and reaped
children: a profile worker's children are its profiling subprocesses).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import quick

ROOT = Path(__file__).resolve().parents[1]

PG_ADMIN = os.environ.get("ATTNPROF_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("ATTNPROF_BENCH_REDIS", "redis://127.0.0.1:6379/15")
PROJECT = "pipeline-bench"
# The profile workers never touch a database: give them a URL that cannot work, so any access fails loudly.
NO_DATABASE = "postgresql+psycopg://nobody@127.0.0.1:9/none"
REPORT = ROOT / "bench" / "reports" / "pipeline-cpu.md"

# A small CPU suite: two SDPA backends and the eager path at a tiny shape, short timing loops.
SMALL_SUITE = """# pipeline benchmark: a small CPU suite (bench/pipeline_load.py)
[suite]
name = "pipeline-small"

[suite.timing]
warmup = 2
min_samples = 5
max_samples = 30
budget_s = 0.1
trace_iters = 1

[[cases]]
name = "sdpa"
target = "sdpa"
backends = ["math", "flash"]
batch = 1
q_heads = 2
seq_q = 64
head_dim = 32
dtype = "fp32"
causal = true

[[cases]]
name = "naive"
target = "naive"
batch = 1
q_heads = 2
seq_q = 64
head_dim = 32
dtype = "fp32"
causal = true

# The user's own code, from the job's bundle: the demo project's attention (examples/demo/project/demo_attn).
[[cases]]
name = "bundled"
target = "demo_attn.attention:make_case"
batch = 1
q_heads = 2
seq_q = 64
head_dim = 32
dtype = "fp32"
causal = true
"""
# The source the small suite's custom case imports, sent with every job as its bundle.
BUNDLE_SOURCE = ROOT / "examples" / "demo" / "project"
BUNDLE_PACKAGE = "demo_attn"

PHASES = (
    ("queue_wait_s", "queue wait (created → claimed)"),
    ("claim_to_spawn_s", "claim answer, bundle download and unpack, scratch (claimed → subprocess started)"),
    ("spawn_to_profile_s", "subprocess start, imports, device and environment setup"),
    ("profiling_s", "profiling (the document's run.wall_s)"),
    ("upload_s", "subprocess exit, result upload until the run row is written"),
    ("analysis_s", "analysis: message, baseline, comparison, change points, verdict"),
)


def say(text: str) -> None:
    print(text, flush=True)


def utc(value: str | None) -> datetime | None:
    """An ISO timestamp from the API or a document (naive ones, from SQLite, are UTC)."""
    if not value:
        return None
    found = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- CPU time from /proc ---------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, own CPU seconds, reaped children's CPU seconds) of a live process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ppid, (utime + stime) / _TICK, (cutime + cstime) / _TICK


def tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds of a process: its own, its live descendants' own, and its reaped children's."""
    table: dict[int, tuple[int, float, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found = _stat(int(entry.name))
            if found:
                table[int(entry.name)] = found
    if root not in table:
        return {"own": 0.0, "children": 0.0}
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    own, reaped, todo = 0.0, 0.0, [root]
    while todo:
        pid = todo.pop()
        own += table[pid][1]
        reaped += table[pid][2]
        todo.extend(kids.get(pid, []))
    return {"own": round(own, 2), "children": round(reaped, 2)}


# --- the stack -------------------------------------------------------------------------------------------


def attnprof_command() -> list[str]:
    script = Path(sys.executable).parent / "attnprof"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from attnprof.cli import main; sys.argv[0] = 'attnprof'; main()"]


@dataclass
class Stack:
    url: str
    workdir: Path
    env: dict[str, str]
    submit_token: str
    testbed: str
    database: str
    broker: str
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.submit_token}"}, timeout=60)

    def log(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = self.log(name).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with code {proc.returncode}:\n{tail}")

    def cpu(self) -> dict[str, dict[str, float]]:
        return {name: tree_cpu(proc.pid) for name, proc in self.procs.items()}


def _wait_ready(stack: Stack, name: str, ready: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stack.check_alive()
        if ready in stack.log(name).read_text(errors="replace"):
            return
        time.sleep(0.3)
    raise RuntimeError(f"{name} was not ready within {timeout_s:.0f} s:\n{stack.log(name).read_text()[-3000:]}")


def _wait_healthy(stack: Stack, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stack.check_alive()
        try:
            if httpx.get(f"{stack.url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the service did not answer within {timeout_s:.0f} s")


@contextmanager
def running_stack(args: argparse.Namespace, workdir: Path) -> Iterator[Stack]:
    """The whole deployment on this host, stopped (and its database dropped) on the way out."""
    from attnprof.server import migrate
    from attnprof.server.auth import service as auth
    from attnprof.server.db import make_engine, make_sessionmaker
    from attnprof.server.projects import service as projects
    from attnprof.server.testbeds import service as testbeds

    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    pg_name = None
    if args.embedded:
        database_url = f"sqlite:///{workdir / 'attnprof.db'}"
        broker = "filesystem://"
    else:
        import redis

        # service_seed (psycopg) is imported here: the GPU host's compare mode has neither Postgres nor psycopg.
        from bench import service_seed as seeding

        pg_name = f"attnprof_pipeline_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        database_url = seeding.create_database(PG_ADMIN, pg_name)
        broker = REDIS_URL
        r = redis.Redis.from_url(REDIS_URL)
        r.flushdb()
        r.close()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stack: Stack | None = None
    try:
        migrate.upgrade(database_url)
        engine = make_engine(database_url)
        with make_sessionmaker(engine)() as session:
            project = projects.create(session, name=PROJECT)
            submit = auth.create_project_token(session, project_id=project.id, role="submit", name="bench")[1]
            testbed = testbeds.ensure(session, args.testbed)
            worker_token = auth.create_worker_token(session, testbed_id=testbed.id, name="bench")[1]
            session.commit()
        engine.dispose()
        keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "PYTHONPATH")
        env = {k: v for k, v in os.environ.items() if k in keep or k.startswith(("NCCL_", "NVIDIA_", "CUDA_"))}
        env.update(
            PYTHONUNBUFFERED="1",
            ATTNPROF_DATABASE_URL=database_url,
            ATTNPROF_BROKER_URL=broker,
            ATTNPROF_BROKER_FOLDER=str(workdir / "queue"),
            ATTNPROF_PUBLIC_URL=url,
            ATTNPROF_SERVICE_URL=url,
            ATTNPROF_WORKER__CACHE_DIR=str(args.cache_dir),
            ATTNPROF_RATE_LIMIT__REQUESTS_PER_MINUTE="600000",
            ATTNPROF_RATE_LIMIT__BURST="100000",
        )
        # The operator's worker settings (the jail's extra read-only paths, its strategy) reach the workers as given.
        env.update({k: v for k, v in os.environ.items() if k.startswith("ATTNPROF_WORKER__")})
        if args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        if args.pass_env:
            # Passed to the profile workers and, through their sandbox's allow-list, to the profiling subprocess.
            env.update({k: os.environ[k] for k in args.pass_env if k in os.environ})
            env["ATTNPROF_WORKER__PASS_ENV"] = json.dumps(args.pass_env)
        stack = Stack(
            url=url,
            workdir=workdir,
            env=env,
            submit_token=submit,
            testbed=args.testbed,
            database="SQLite" if args.embedded else "Postgres",
            broker="filesystem" if args.embedded else "Redis",
        )
        cmd = attnprof_command()
        specs: list[tuple[str, list[str], dict[str, str]]] = [
            ("service", [*cmd, "serve", "--port", str(port)], env),
            ("analysis", [*cmd, "worker", "--analysis", "--beat-schedule", str(workdir / "beat-schedule")], env),
        ]
        for i in range(args.profile_workers):
            wenv = {
                **env,
                "ATTNPROF_WORKER_TOKEN": worker_token,
                "ATTNPROF_WORKER__SCRATCH_DIR": str(workdir / "scratch"),
            }
            if not args.embedded:
                wenv["ATTNPROF_DATABASE_URL"] = NO_DATABASE
            argv = [*cmd, "worker", "--testbed", args.testbed, "--device", args.device]
            specs.append((f"profile-{i + 1}", argv, wenv))
        for name, argv, penv in specs:
            with stack.log(name).open("wb") as out:
                stack.procs[name] = subprocess.Popen(
                    argv, env=penv, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            if name == "service":
                _wait_healthy(stack)
        for name in stack.procs:
            if name != "service":
                _wait_ready(stack, name, " ready.")
        yield stack
    finally:
        if stack is not None:
            for proc in stack.procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 20
            for proc in stack.procs.values():
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        if pg_name:
            seeding.drop_database(PG_ADMIN, pg_name)


# --- jobs ------------------------------------------------------------------------------------------------


def bundle_bytes(source: Path, package: str) -> bytes:
    """``package`` of ``source`` as a gzipped tar, the form ``attnprof submit --source`` sends."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted((source / package).rglob("*.py")):
            tar.add(path, arcname=str(path.relative_to(source)), recursive=False)
    return buf.getvalue()


def submit(stack: Stack, http: httpx.Client, spec: str, commit: str, bundle: bytes | None = None) -> str:
    files = {"spec": ("attnprof.toml", spec.encode())}
    if bundle is not None:
        files["bundle"] = ("src.tar.gz", bundle)
    r = http.post(
        f"/api/v1/projects/{PROJECT}/jobs",
        data={"testbed": stack.testbed, "branch": "main", "commit": commit},
        files=files,
    )
    if r.status_code != 202:
        raise RuntimeError(f"job submission refused: {r.status_code} {r.text}")
    return str(r.json()["id"])


FINAL = ("done", "failed", "timed_out", "cancelled")


def statuses(http: httpx.Client) -> dict[str, str]:
    r = http.get(f"/api/v1/projects/{PROJECT}/jobs", params={"limit": 1000})
    r.raise_for_status()
    return {j["id"]: j["status"] for j in r.json()["jobs"]}


class Progress:
    """One status line while jobs run: rewritten in place on a terminal, a line every 10 s otherwise."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.tty = sys.stdout.isatty()
        self.started = time.monotonic()
        self.last = 0.0

    def show(self, counts: dict[str, int], total: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and not self.tty and now - self.last < 10:
            return
        self.last = now
        parts = " ".join(f"{k} {counts.get(k, 0)}" for k in ("queued", "running", "analyzing", "done"))
        bad = sum(counts.get(k, 0) for k in FINAL if k != "done")
        line = f"[{self.label}] {parts} failed {bad} of {total}  {now - self.started:5.0f} s  load {load_average()[0]}"
        if self.tty:
            print("\r" + line.ljust(110), end="\n" if final else "", flush=True)
        else:
            print(line, flush=True)


def wait_final(stack: Stack, http: httpx.Client, ids: list[str], timeout_s: float, progress: Progress) -> None:
    """Poll until every job in ``ids`` is final: one job by its own GET each second, several by the project's
    list every 3 s (the polling is the benchmark's own load on the service: its requests are counted apart)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stack.check_alive()
        found = {ids[0]: http.get(f"/api/v1/jobs/{ids[0]}").json()["status"]} if len(ids) == 1 else statuses(http)
        mine = [found.get(i, "?") for i in ids]
        counts: dict[str, int] = {}
        for s in mine:
            counts[s] = counts.get(s, 0) + 1
        done = all(s in FINAL for s in mine)
        progress.show(counts, len(ids), final=done)
        if done:
            return
        if time.monotonic() > deadline:
            progress.show(counts, len(ids), final=True)
            raise RuntimeError(f"jobs not finished after {timeout_s:.0f} s: {counts}")
        time.sleep(1.0 if len(ids) == 1 else 3.0)


_LOG_LINE = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): \w+/[^\]]*\] job (\S+) attempt (\d+): profiling in "
)


def spawn_times(stack: Stack) -> dict[str, datetime]:
    """When each job's profiling subprocess was started, from the profile workers' logs (local time)."""
    found: dict[str, datetime] = {}
    for name in stack.procs:
        if not name.startswith("profile-"):
            continue
        for line in stack.log(name).read_text(errors="replace").splitlines():
            m = _LOG_LINE.match(line)
            if m:
                local = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone()
                found[m.group(2)] = local.astimezone(UTC)
    return found


def request_times(stack: Stack) -> dict[str, dict[str, float]]:
    """Server-side request time per route (count, sum of seconds), from the service's Prometheus metrics."""
    text = httpx.get(f"{stack.url}/metrics", timeout=30).text
    out: dict[str, dict[str, float]] = {}
    pattern = r'^attnprof_http_request_duration_seconds_(sum|count)\{method="(\w+)",route="([^"]+)"\} (\S+)$'
    for m in re.finditer(pattern, text, re.M):
        key = f"{m.group(2)} {m.group(3)}"
        out.setdefault(key, {})[m.group(1)] = float(m.group(4))
    return out


def job_timings(
    stack: Stack, http: httpx.Client, ids: list[str], *, documents: Path | None = None
) -> list[dict[str, Any]]:
    """The timestamps of each job and the phases between them (seconds)."""
    spawned = spawn_times(stack)
    rows = []
    for job_id in ids:
        job = http.get(f"/api/v1/jobs/{job_id}").json()
        row: dict[str, Any] = {
            "job": job_id,
            "status": job["status"],
            "verdict": job["verdict"],
            "attempts": job["attempts"],
            "reason": job["reason"],
            "run_id": job["run_id"],
        }
        created, claimed, finished = utc(job["created_at"]), utc(job["started_at"]), utc(job["finished_at"])
        prof_start = stored = None
        wall = None
        if job["run_id"]:
            run = http.get(f"/api/v1/projects/{PROJECT}/runs/{job['run_id']}").json()
            doc = run["document"]
            stored = utc(run["created_at"])
            prof_start = utc(doc["run"]["created_at"])
            wall = doc["run"].get("wall_s")
            row["suspect"] = doc["run"].get("suspect")
            if documents is not None:
                (documents / f"job-{job_id}.json").write_text(json.dumps(doc))
        spawn = spawned.get(job_id)

        def gap(a: datetime | None, b: datetime | None) -> float | None:
            return round((b - a).total_seconds(), 4) if a and b else None

        prof_end = datetime.fromtimestamp(prof_start.timestamp() + wall, UTC) if prof_start and wall else None
        row.update(
            created_at=job["created_at"],
            queue_wait_s=gap(created, claimed),
            claim_to_spawn_s=gap(claimed, spawn),
            spawn_to_profile_s=gap(spawn, prof_start),
            profiling_s=wall,
            upload_s=gap(prof_end, stored),
            analysis_s=gap(stored, finished),
            total_s=gap(created, finished),
            t_created=created.timestamp() if created else None,
            t_finished=finished.timestamp() if finished else None,
        )
        row["overhead_s"] = round(row["total_s"] - wall, 4) if row["total_s"] is not None and wall else None
        rows.append(row)
    return rows


# --- direct runs -----------------------------------------------------------------------------------------


def direct_run(
    args: argparse.Namespace, suite: Path, out: Path, trace_dir: Path, src: Path | None = None
) -> dict[str, Any]:
    """The suite profiled directly with the worker's own command line; wall and CPU seconds of the process.
    ``src``: the unpacked bundle, the working directory and ``PYTHONPATH`` (as the worker runs it)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    argv = [sys.executable, "-m", "attnprof.core", "profile", str(suite), "--device", args.device]
    argv += ["--out", str(out), "--trace-dir", str(trace_dir), "--cache-dir", str(args.cache_dir), "--quiet"]
    before = os.times()
    t0, started = time.perf_counter(), time.time()
    done = subprocess.run(argv, env=env, cwd=src or ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = os.times()
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(f"direct profile failed ({done.returncode}):\n{done.stderr[-3000:]}")
    doc = json.loads(out.read_text())
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    prof_start = utc(doc["run"]["created_at"])
    profiling = doc["run"].get("wall_s")
    startup = prof_start.timestamp() - started if prof_start else None
    return {
        "process_wall_s": round(wall, 3),
        "process_cpu_s": round(cpu, 2),
        "profiling_s": profiling,
        "startup_s": round(startup, 3) if startup is not None else None,
        "exit_s": round(wall - startup - profiling, 3) if startup is not None and profiling else None,
        "suspect": doc["run"].get("suspect"),
        "started": datetime.fromtimestamp(started, UTC).isoformat(),
    }


# --- statistics ------------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """Percentile with linear interpolation (numpy's default), without numpy."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(rows: list[dict[str, Any]], key: str) -> dict[str, float] | None:
    xs = [r[key] for r in rows if r.get(key) is not None]
    if not xs:
        return None
    return {
        "n": len(xs),
        "p50": round(pct(xs, 50), 4),
        "p90": round(pct(xs, 90), 4),
        "p99": round(pct(xs, 99), 4),
        "mean": round(statistics.fmean(xs), 4),
        "max": round(max(xs), 4),
    }


def cpu_delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        name: {k: round(after[name][k] - before.get(name, {}).get(k, 0.0), 2) for k in after[name]} for name in after
    }


def versions() -> dict[str, str]:
    import importlib.metadata as md

    found = {"python": platform.python_version(), "platform": platform.platform()}
    names = ("torch", "triton", "nvidia-ml-py", "celery", "kombu", "fastapi", "uvicorn", "sqlalchemy", "pydantic")
    for name in (*names, "redis", "psycopg"):
        with contextlib.suppress(md.PackageNotFoundError):
            found[name] = md.version(name)
    return found


# --- load (CPU) ------------------------------------------------------------------------------------------


def phase(
    stack: Stack,
    http: httpx.Client,
    spec: str,
    n: int,
    label: str,
    *,
    paced: bool,
    timeout_s: float,
    bundle: bytes | None,
) -> dict[str, Any]:
    cpu0, req0, load0 = stack.cpu(), request_times(stack), load_average()
    t0, p0 = time.perf_counter(), time.process_time()
    progress = Progress(label)
    ids: list[str] = []
    if paced:
        for i in range(n):
            ids.append(submit(stack, http, spec, f"{label}{i:04d}", bundle))
            wait_final(stack, http, ids[-1:], timeout_s, progress)
            progress.label = f"{label} {i + 1}/{n}"
    else:
        ids = [submit(stack, http, spec, f"{label}{i:04d}", bundle) for i in range(n)]
        wait_final(stack, http, ids, timeout_s, progress)
    wall = time.perf_counter() - t0
    time.sleep(1.0)  # the last trace uploads and the analysis worker's log line
    req1, cpu1 = request_times(stack), stack.cpu()  # before reading the jobs back: that is the benchmark's work
    rows = job_timings(stack, http, ids)
    requests = {
        k: {
            "count": v.get("count", 0) - req0.get(k, {}).get("count", 0),
            "sum": v.get("sum", 0) - req0.get(k, {}).get("sum", 0),
        }
        for k, v in req1.items()
    }
    makespan = None
    created = [r["t_created"] for r in rows if r["t_created"]]
    finished = [r["t_finished"] for r in rows if r["t_finished"]]
    if created and finished:
        makespan = max(finished) - min(created)
    return {
        "label": label,
        "paced": paced,
        "jobs": n,
        "done": sum(1 for r in rows if r["status"] == "done"),
        "wall_s": round(wall, 2),
        "makespan_s": round(makespan, 2) if makespan else None,
        "jobs_per_min": round(n / makespan * 60, 2) if makespan else None,
        "bench_cpu_s": round(time.process_time() - p0, 2),
        "load_before": load0,
        "load_after": load_average(),
        "cpu": cpu_delta(cpu0, cpu1),
        "requests": {k: v for k, v in requests.items() if v["count"] > 0},
        "summary": {key: summary(rows, key) for key, _ in (*PHASES, ("total_s", ""), ("overhead_s", ""))},
        "rows": rows,
    }


def run_load(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="attnprof-pipeline-"))
    suite_text = args.suite.read_text() if args.suite else SMALL_SUITE
    # The small suite's custom case comes with its bundle; a suite given by --suite is sent alone.
    bundle = bundle_bytes(BUNDLE_SOURCE, BUNDLE_PACKAGE) if args.suite is None else None
    src = None
    if bundle is not None:
        src = workdir / "src"
        shutil.copytree(BUNDLE_SOURCE / BUNDLE_PACKAGE, src / BUNDLE_PACKAGE)
    suite = workdir / "attnprof.toml"
    suite.write_text(suite_text)
    args.cache_dir = args.cache_dir or workdir / "cache"
    data: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([_interpreter(), *sys.argv]),
        "host": {"cpus": os.cpu_count(), "cpu_model": _cpu_model(), "load_start": load_average()},
        "versions": versions(),
        "config": {
            "jobs": args.jobs,
            "paced": args.paced,
            "profile_workers": args.profile_workers,
            "device": args.device,
            "threads": args.threads,
            "embedded": args.embedded,
            "suite": str(args.suite) if args.suite else "built-in small CPU suite",
            "bundle_bytes": len(bundle) if bundle is not None else None,
        },
        "suite": suite_text,
    }
    say(f"workdir {workdir}; load average {data['host']['load_start']}")
    direct: list[dict[str, Any]] = []
    data["direct"] = direct

    def direct_runs(first: int, n: int, when: str) -> None:
        """Direct runs before the stack starts (the first a warm-up) and after it stops, so that a change of the
        machine's load over the session weighs on both sides of the comparison."""
        for i in range(first, first + n):
            out = workdir / "direct" / f"run{i}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            found = direct_run(args, suite, out, workdir / "direct" / f"traces{i}", src)
            found.update(warmup=i == 0, when=when, load=load_average())
            direct.append(found)
            what = "warm-up (fills the peaks cache)" if i == 0 else f"{when} {i}"
            say(f"[direct {what}] process {found['process_wall_s']} s, profiling {found['profiling_s']} s")

    try:
        direct_runs(0, args.direct + 1, "before")
        with running_stack(args, workdir) as stack, stack.http() as http:
            data["stack"] = {"database": stack.database, "broker": stack.broker}
            say(f"stack up at {stack.url}: {stack.database}, {stack.broker}, {args.profile_workers} profile workers")
            # One job first, unmeasured: the first analysis and the first claim of each worker warm their paths.
            warm = [submit(stack, http, suite_text, f"warm{i}", bundle) for i in range(args.profile_workers)]
            wait_final(stack, http, warm, args.timeout_s, Progress("warm-up"))
            data["burst"] = phase(
                stack, http, suite_text, args.jobs, "burst", paced=False, timeout_s=args.timeout_s, bundle=bundle
            )
            b = data["burst"]
            say(f"burst: {b['done']}/{b['jobs']} done, {b['jobs_per_min']} jobs/min")
            data["paced"] = phase(
                stack,
                http,
                suite_text,
                args.paced or args.jobs,
                "paced",
                paced=True,
                timeout_s=args.timeout_s,
                bundle=bundle,
            )
            p = data["paced"]
            say(f"paced: {p['done']}/{p['jobs']} done; queue wait p50 {p['summary']['queue_wait_s']}")
        direct_runs(len(direct), args.direct, "after")
        data["host"]["load_end"] = load_average()
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    out_json = args.out.with_suffix(".json") if args.data is None else args.data[-1]
    if args.data is not None or args.out.suffix == ".md":
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(data, indent=1, default=str))
        say(f"figures: {out_json}")
    write_load_report(data, args.out, out_json)


def _interpreter() -> str:
    """The interpreter as the command was typed from the repository root (``.venv/bin/python``, ``python3``)."""
    exe = Path(sys.executable)
    return str(exe.relative_to(ROOT)) if exe.is_relative_to(ROOT) else exe.name


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _fmt(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def write_load_report(data: dict[str, Any], out: Path, data_path: Path) -> None:
    """The CPU pipeline report (markdown) and its plot."""
    b, p = data["burst"], data["paced"]
    direct = [d for d in data["direct"] if not d["warmup"]]
    when = {d.get("when", "before") for d in direct}
    d_wall = statistics.median(d["process_wall_s"] for d in direct)
    d_prof = statistics.median(d["profiling_s"] for d in direct)
    d_cpu = statistics.median(d["process_cpu_s"] for d in direct)
    cfg, host = data["config"], data["host"]
    lines = [
        f"# Worker pipeline on CPU: throughput, queue latency, overhead ({data['date'][:10]})",
        "",
        f"The real stack on one host: `attnprof serve` (uvicorn, 1 process), {data['stack']['database']}, "
        f"{data['stack']['broker']} as the Celery broker, `attnprof worker --analysis` (threads, with beat) and "
        f"{cfg['profile_workers']} × `attnprof worker --testbed bench-cpu --device cpu` (`--pool=solo`), each "
        "profiling in its sandboxed subprocess (`python -m attnprof.core profile`), "
        f"`OMP_NUM_THREADS={cfg['threads']}`. "
        "Suite: "
        + (
            "the built-in small CPU suite of `bench/pipeline_load.py` (4 cases: SDPA with the math and the flash "
            "backend, the eager matmul-softmax-matmul, and a custom target from the job's bundle, the demo "
            f"project's `demo_attn` ({cfg.get('bundle_bytes')} bytes gzipped); B=1, 2 heads, S=64, d=32, fp32, "
            "causal, forward; 2 warm-up iterations, 5–30 samples, a 0.1 s budget per case)"
            if cfg["suite"].startswith("built-in")
            else f"`{cfg['suite']}`"
        )
        + ".",
        "",
        "**The machine is shared.** It has "
        f"{host['cpus']} cores ({host['cpu_model']}), which the stack, the benchmark and whatever else ran on the host "
        "shared; "
        f"1/5/15-minute load average {host['load_start']} at the start, {host.get('load_end')} at the end "
        f"(burst phase: {b['load_before']} → {b['load_after']}; paced phase: {p['load_before']} → {p['load_after']}). "
        "Wall times include waiting for a core; the CPU seconds below do not.",
        "",
        "Produced by:",
        "",
        "```bash",
        data["command"],
        "```",
        "",
        f"Raw figures: `{_show(data_path)}`.",
        "",
        "## Results",
        "",
        "| figure | value |",
        "|---|---|",
        f"| throughput, burst of {b['jobs']} jobs submitted at once | **{_fmt(b['jobs_per_min'])} jobs/min** "
        f"({b['done']}/{b['jobs']} done; {_fmt(b['makespan_s'], 1)} s from the first submission to the last verdict) |",
        f"| queue-to-start latency, idle pipeline (paced, n={p['summary']['queue_wait_s']['n']}) | "
        f"p50 **{_fmt(p['summary']['queue_wait_s']['p50'] * 1000, 0)} ms**, "
        f"p99 **{_fmt(p['summary']['queue_wait_s']['p99'] * 1000, 0)} ms** "
        f"(max {_fmt(p['summary']['queue_wait_s']['max'] * 1000, 0)} ms) |",
        f"| queue-to-start latency, burst (n={b['summary']['queue_wait_s']['n']}: includes the backlog) | "
        f"p50 {_fmt(b['summary']['queue_wait_s']['p50'], 1)} s, p99 {_fmt(b['summary']['queue_wait_s']['p99'], 1)} s |",
        f"| job created → verdict, idle pipeline (paced) | p50 {_fmt(p['summary']['total_s']['p50'])} s, "
        f"p99 {_fmt(p['summary']['total_s']['p99'])} s |",
        f"| of which profiling (the document's `run.wall_s`) | p50 {_fmt(p['summary']['profiling_s']['p50'])} s |",
        f"| **overhead of service and queue** (created → verdict − profiling), paced | "
        f"p50 **{_fmt(p['summary']['overhead_s']['p50'])} s**, p99 {_fmt(p['summary']['overhead_s']['p99'])} s |",
        f"| the same suite run directly (`python -m attnprof.core profile`, {len(direct)} runs "
        f"{' and '.join(sorted(when, reverse=True))} the stack ran) | process "
        f"{_fmt(d_wall)} s wall ({_fmt(d_cpu)} CPU s), of which profiling {_fmt(d_prof)} s |",
        "",
        "### Where a job's time goes (seconds)",
        "",
        "Each phase is the gap between two timestamps of the same job, all on this host's clock (see the script's "
        "docstring). Paced: one job at a time, so a profile worker is always idle; burst: all jobs at once, 2 "
        "workers, so queue wait is mostly the backlog.",
        "",
        "| phase | paced p50 | paced p99 | paced mean | burst p50 | burst p99 |",
        "|---|---|---|---|---|---|",
    ]
    for key, what in (
        *PHASES,
        ("total_s", "total (created → verdict)"),
        ("overhead_s", "overhead (total − profiling)"),
    ):
        ps, bs = p["summary"].get(key), b["summary"].get(key)
        lines.append(
            f"| {what} | {_fmt(ps and ps['p50'], 3)} | {_fmt(ps and ps['p99'], 3)} | {_fmt(ps and ps['mean'], 3)} "
            f"| {_fmt(bs and bs['p50'], 3)} | {_fmt(bs and bs['p99'], 3)} |"
        )
    lines += [
        "",
        "Server-side request time (mean over the phase, from the service's `/metrics`), which splits the lumps above:",
        "",
        "| request | paced: count, mean ms | burst: count, mean ms |",
        "|---|---|---|",
    ]
    routes = sorted(set(p["requests"]) | set(b["requests"]))
    for route in routes:
        if route.startswith(("GET /api/v1/", "GET /metrics")):
            continue  # the benchmark's own polling and reading, counted below
        cells = []
        for ph in (p, b):
            r = ph["requests"].get(route)
            cells.append(f"{int(r['count'])}, {r['sum'] / r['count'] * 1000:.1f}" if r and r["count"] else "–")
        lines.append(f"| `{route}` | {cells[0]} | {cells[1]} |")
    polls = []
    for ph in (p, b):
        mine = [v for k, v in ph["requests"].items() if k.startswith(("GET /api/v1/", "GET /metrics"))]
        polls.append((int(sum(v["count"] for v in mine)), sum(v["sum"] for v in mine)))
    lines += [
        "",
        f"Not in the table: the benchmark's own requests (status polling, reading the jobs and runs, `/metrics`): "
        f"paced {polls[0][0]} requests, {polls[0][1]:.1f} s of server time; burst {polls[1][0]} requests, "
        f"{polls[1][1]:.1f} s. They are part of the service's CPU seconds below.",
        "",
        "### CPU seconds per job, by process (from /proc)",
        "",
        "The profile workers' *children* are their profiling subprocesses; *own* is the Celery worker process "
        "itself (claim, heartbeats, download, upload). The analysis worker includes its beat process.",
        "",
        "| process | paced: own | paced: children | burst: own | burst: children |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(p["cpu"]):
        pc, bc = p["cpu"][name], b["cpu"].get(name, {})
        lines.append(
            f"| {name} | {pc['own'] / p['jobs']:.3f} | {pc['children'] / p['jobs']:.3f} "
            f"| {bc.get('own', 0) / b['jobs']:.3f} | {bc.get('children', 0) / b['jobs']:.3f} |"
        )
    stack_own = sum(v["own"] for v in p["cpu"].values()) / p["jobs"]
    prof_children = sum(v["children"] for k, v in p["cpu"].items() if k.startswith("profile-")) / p["jobs"]
    lines += [
        "",
        f"Paced, per job: the stack's own processes used {stack_own:.2f} CPU s, the profiling subprocesses "
        f"{prof_children:.2f} CPU s (the direct run: {d_cpu:.2f} CPU s per process). Not counted: Postgres and Redis.",
        "",
        "## Reading",
        "",
    ]
    lines += _load_reading(data, d_wall, d_prof, d_cpu)
    plot = out.with_suffix(".png")
    try:
        _plot_load(data, plot)
        lines += ["", f"![pipeline phases]({plot.name})", ""]
    except ImportError:
        pass
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    say(f"report: {out}")


def _load_reading(data: dict[str, Any], d_wall: float, d_prof: float, d_cpu: float) -> list[str]:
    b, p = data["burst"], data["paced"]
    ps = p["summary"]
    parts = {key: ps[key]["p50"] for key, _ in PHASES if ps.get(key) and key != "profiling_s"}
    ranked = sorted(parts.items(), key=lambda kv: -kv[1])
    names = dict(PHASES)
    jobs = p["jobs"]
    stack_own = sum(v["own"] for v in p["cpu"].values()) / jobs
    service_own = p["cpu"].get("service", {}).get("own", 0.0) / jobs
    prof_children = sum(v["children"] for k, v in p["cpu"].items() if k.startswith("profile-")) / jobs
    polls = int(sum(v["count"] for k, v in p["requests"].items() if k.startswith(("GET /api/v1/", "GET /metrics"))))
    load = p["load_before"][0], p["load_after"][0]
    out = [
        f"- **Overhead, wall time.** On an idle pipeline a job takes {_fmt(ps['total_s']['p50'])} s from creation to "
        f"verdict (p50) for {_fmt(ps['profiling_s']['p50'])} s of profiling: {_fmt(ps['overhead_s']['p50'])} s on "
        f"top. Most of it is not the service: the largest parts are {names[ranked[0][0]].split(' (')[0]} "
        f"({_fmt(ranked[0][1])} s) and {names[ranked[1][0]].split(' (')[0]} ({_fmt(ranked[1][1])} s), the profiler "
        f"process's own start and end, which a direct run pays as well: a direct process takes {_fmt(d_wall)} s of "
        f"wall time for {_fmt(d_prof)} s of profiling. Against that direct process a job takes "
        f"{_fmt(abs(ps['total_s']['p50'] - d_wall))} s {'more' if ps['total_s']['p50'] >= d_wall else 'less'} "
        "(p50 total − direct process: medians of different processes under the machine's varying load). "
        f"Queue wait, claim, bundle download and the analysis together: "
        f"{_fmt(sum(v for k, v in parts.items() if k in ('queue_wait_s', 'claim_to_spawn_s', 'analysis_s')))} s.",
        f"- **Overhead, CPU time** (not disturbed by waiting for a core): per paced job the stack's own processes used "
        f"{stack_own:.2f} CPU s, of which the service {service_own:.2f} s (it also served the benchmark's {polls} "
        f"polling and reading requests), against {prof_children:.2f} CPU s in the profiling subprocess (a direct "
        f"process: {d_cpu:.2f} CPU s).",
        f"- **The profiling itself**: a paced job's subprocess used {prof_children:.2f} CPU s and profiled for "
        f"{_fmt(ps['profiling_s']['p50'])} s (p50); the direct processes {d_cpu:.2f} CPU s and {_fmt(d_prof)} s "
        f"(run {', '.join(sorted({d.get('when', 'before') for d in data['direct'] if not d['warmup']}, reverse=True))}"
        " the stack, loads in the raw figures). CPU timings move by ±20% between processes on a shared host "
        "(`examples/cpu.toml` says so), so nothing about the pipeline's effect on a measurement is read from "
        "these: that comparison is made on the H200 (`pipeline-h200.md`).",
        f"- **Queue-to-start latency**, idle pipeline: p50 {_fmt(ps['queue_wait_s']['p50'] * 1000, 0)} ms, p99 "
        f"{_fmt(ps['queue_wait_s']['p99'] * 1000, 0)} ms over {ps['queue_wait_s']['n']} jobs (with so few, the p99 is "
        "close to the largest): the job row is committed, the message goes to Redis, the `--pool=solo` worker that "
        "waits on the queue receives it and claims the job in one request. In the burst the wait is the backlog: "
        f"p50 {_fmt(b['summary']['queue_wait_s']['p50'], 1)} s.",
        f"- **Throughput**: {_fmt(b['jobs_per_min'])} jobs/min with {data['config']['profile_workers']} profile "
        f"workers for this suite on this host, whose {data['host']['cpus']} cores the stack shared with whatever "
        "else ran (load "
        f"average {b['load_before'][0]} → {b['load_after'][0]} during the burst, {load[0]} → {load[1]} while paced). "
        "Per worker that is one job every "
        f"{_fmt(60 / b['jobs_per_min'] * data['config']['profile_workers'], 1)} s, against "
        f"{_fmt(ps['total_s']['p50'], 1)} s per job when paced: the two subprocesses, the stack and the other work "
        "share the cores. On a dedicated host the throughput is bounded by the profiling subprocesses, "
        f"{_fmt(prof_children + stack_own)} CPU s per job here: about "
        f"{_fmt(60 * data['host']['cpus'] / (prof_children + stack_own), 1)} jobs/min on {data['host']['cpus']} "
        "cores with nothing else running (an estimate from the CPU seconds, not a measurement).",
    ]
    return out


def _plot_load(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, ph in zip(axes, (data["paced"], data["burst"]), strict=True):
        rows = sorted((r for r in ph["rows"] if r["total_s"] is not None), key=lambda r: r["t_created"])
        left = [0.0] * len(rows)
        for key, what in PHASES:
            vals = [r[key] or 0.0 for r in rows]
            if ph["paced"]:
                ax.barh(range(len(rows)), vals, left=left, label=what.split(" (")[0].split(":")[0])
                left = [a + v for a, v in zip(left, vals, strict=True)]
            else:
                t0 = min(r["t_created"] for r in rows)
                offs = [r["t_created"] - t0 for r in rows]
                starts = [o + lf for o, lf in zip(offs, left, strict=True)]
                ax.barh(range(len(rows)), vals, left=starts, label=what.split(" (")[0].split(":")[0])
                left = [a + v for a, v in zip(left, vals, strict=True)]
        ax.set_xlabel("seconds" + (" since the job was created" if ph["paced"] else " since the first submission"))
        ax.set_ylabel("job (in order of submission)")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.invert_yaxis()
        title = "paced: one job at a time" if ph["paced"] else f"burst: {ph['jobs']} jobs at once"
        ax.set_title(title + (f" ({ph['jobs_per_min']} jobs/min)" if not ph["paced"] else ""))
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"attnprof pipeline on a shared {data['host']['cpus']}-core CPU host ({data['date'][:10]})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- compare (GPU host) ----------------------------------------------------------------------------------


def run_compare(args: argparse.Namespace) -> None:
    """Jobs and direct runs of one suite, in turn, until the budget is spent; everything written under --out."""
    started = time.monotonic()
    out: Path = args.out
    docs = out / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="attnprof-compare-"))
    args.cache_dir = args.cache_dir or workdir / "cache"
    suite: Path = args.suite.resolve()
    suite_text = suite.read_text()
    data: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([_interpreter(), *sys.argv]),
        "host": {"cpus": os.cpu_count(), "cpu_model": _cpu_model(), "load_start": load_average()},
        "versions": versions(),
        "suite": str(args.suite),
        "pass_env": {k: os.environ.get(k) for k in args.pass_env},
        "order": [],
        "direct": [],
        "jobs": [],
    }

    def save() -> None:
        (out / "compare.json").write_text(json.dumps(data, indent=1, default=str))

    try:
        with running_stack(args, workdir) as stack, stack.http() as http:
            data["stack"] = {"database": stack.database, "broker": stack.broker}
            say(f"stack up at {stack.url} after {time.monotonic() - started:.0f} s")
            last_pair = 0.0
            i = 0
            while True:
                spent = time.monotonic() - started
                if i > 0 and spent + last_pair > args.budget_s:
                    say(f"stopping after {i} pairs: {spent:.0f} s spent, a pair takes {last_pair:.0f} s")
                    break
                if i >= args.pairs:
                    break
                t_pair = time.monotonic()
                # ABBA order (direct, job, job, direct, direct, job, ...): neither mode always comes first, and a
                # drift over the session shifts both alike. The first direct run fills the peaks cache.
                for mode in ("direct", "job") if i % 2 == 0 else ("job", "direct"):
                    if mode == "direct":
                        found = direct_run(args, suite, docs / f"direct{i}.json", workdir / f"traces{i}")
                        found["index"] = i
                        data["direct"].append(found)
                        say(f"[direct {i}] process {found['process_wall_s']} s, profiling {found['profiling_s']} s")
                    else:
                        job_id = submit(stack, http, suite_text, f"cmp{i:03d}")
                        wait_final(stack, http, [job_id], args.timeout_s, Progress(f"job {i}"))
                        time.sleep(1.0)
                        row = job_timings(stack, http, [job_id], documents=docs)[0]
                        row["index"] = i
                        cmp = http.get(f"/api/v1/jobs/{job_id}/comparison")
                        if cmp.status_code == 200:
                            c = cmp.json()
                            row["comparison"] = {
                                "verdict": c["verdict"],
                                "baseline": c["baseline"],
                                "noise_floor": c["noise_floor"],
                                "findings": [
                                    {k: f.get(k) for k in ("case", "metric", "status", "change", "detail")}
                                    for f in c["document"].get("findings", [])
                                    if f.get("status") not in (None, "unchanged", "ok")
                                ],
                            }
                        data["jobs"].append(row)
                        say(
                            f"[job {i}] {row['status']} {row['verdict']}: total {row['total_s']} s, "
                            f"profiling {row['profiling_s']} s, overhead {row['overhead_s']} s"
                        )
                    data["order"].append(f"{mode}{i}")
                    save()
                last_pair = time.monotonic() - t_pair
                i += 1
            data["requests"] = request_times(stack)
            data["cpu"] = stack.cpu()
            for name in stack.procs:
                shutil.copy(stack.log(name), out / f"{name}.log")
    finally:
        data["host"]["load_end"] = load_average()
        save()
        shutil.rmtree(workdir, ignore_errors=True)


# --- compare-report --------------------------------------------------------------------------------------


def _read_doc(path: Path) -> dict[str, Any]:
    """A result document saved as ``.json`` or ``.json.gz``."""
    import gzip

    gz = path.with_name(path.name + ".gz")
    if gz.is_file():
        found: dict[str, Any] = json.loads(gzip.decompress(gz.read_bytes()))
        return found
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _case_medians(doc: dict[str, Any]) -> dict[str, float]:
    found = {}
    for c in doc["cases"]:
        lat = c.get("latency_us")
        if c.get("status") == "ok" and lat and lat.get("median"):
            found[c["id"]] = float(lat["median"])
    return found


def _spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / statistics.median(xs) if len(xs) > 1 else float("nan")


def _context_spreads(context: Path | None) -> dict[str, float]:
    """Run-to-run spread per case over the profiler-core H200 data (each set separately; the wider is kept)."""
    out: dict[str, float] = {}
    if context is None or not context.is_dir():
        return out
    for set_dir in sorted(p for p in context.iterdir() if p.is_dir()):
        per_case: dict[str, list[float]] = {}
        for run in sorted(p for p in set_dir.glob("run*") if p.name.endswith((".json", ".json.gz"))):
            raw = run.read_bytes()
            for case, med in _case_medians(json.loads(gzip.decompress(raw) if run.suffix == ".gz" else raw)).items():
                per_case.setdefault(case, []).append(med)
        for case, xs in per_case.items():
            if len(xs) > 1:
                out[case] = max(out.get(case, 0.0), _spread(xs))
    return out


def _exact_p(a: list[float], b: list[float]) -> float:
    """Two-sided exact permutation p-value of the difference of medians (small samples)."""
    from itertools import combinations

    pooled = a + b
    observed = abs(statistics.median(a) - statistics.median(b))
    hits = total = 0
    for idx in combinations(range(len(pooled)), len(a)):
        chosen = set(idx)
        sa = [pooled[i] for i in idx]
        sb = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        if abs(statistics.median(sa) - statistics.median(sb)) >= observed - 1e-12:
            hits += 1
    return hits / total


_STORED = re.compile(r"^\[([\d\- :,]+): \w+/[^\]]*\] job (\S+) attempt \d+: result stored as run \S+ in ([\d.]+) s")


@dataclass
class CompareSet:
    """One ``compare`` output folder: its figures, each run's per-case medians, and the phases of each job."""

    name: str
    data: dict[str, Any]
    direct: dict[int, dict[str, float]]
    jobs: dict[int, dict[str, float]]
    environment: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, folder: Path) -> CompareSet:
        data = json.loads((folder / "compare.json").read_text())
        docs = folder / "docs"
        direct = {d["index"]: _case_medians(_read_doc(docs / f"direct{d['index']}.json")) for d in data["direct"]}
        jobs = {
            j["index"]: _case_medians(_read_doc(docs / f"job-{j['job']}.json")) for j in data["jobs"] if j["run_id"]
        }
        env = _read_doc(docs / f"direct{data['direct'][0]['index']}.json")["environment"]
        # The profile worker's log says how long its subprocess ran ("result stored ... in X s", 0.1 s steps):
        # that splits the gap after profiling into the subprocess's exit and the upload.
        log = folder / "profile-1.log"
        walls = {}
        if log.is_file():
            for line in log.read_text(errors="replace").splitlines():
                m = _STORED.match(line)
                if m:
                    walls[m.group(2)] = float(m.group(3))
        for j in data["jobs"]:
            sub = walls.get(j["job"])
            if sub is not None and j["spawn_to_profile_s"] is not None and j["profiling_s"]:
                j["exit_s"] = round(sub - j["spawn_to_profile_s"] - j["profiling_s"], 2)
                j["upload_only_s"] = round(j["upload_s"] - j["exit_s"], 2)
        return cls(folder.name, data, direct, jobs, env)

    def case_rows(self, context: dict[str, float]) -> list[dict[str, Any]]:
        first = next(iter(self.direct.values()))
        cases = list(first) + sorted({c for m in (*self.direct.values(), *self.jobs.values()) for c in m} - set(first))
        rows = []
        for case in cases:
            d = [self.direct[i][case] for i in sorted(self.direct) if case in self.direct[i]]
            j = [self.jobs[i][case] for i in sorted(self.jobs) if case in self.jobs[i]]
            if not d or not j:
                continue
            md, mj = statistics.median(d), statistics.median(j)
            ref = max(x for x in (_spread(d), context.get(case, 0.0)) if x == x)
            rows.append(
                {
                    "case": case,
                    "direct": md,
                    "direct_spread": _spread(d),
                    "job": mj,
                    "job_spread": _spread(j),
                    "diff": (mj - md) / md,
                    "context": context.get(case),
                    "ref": ref,
                    "p": _exact_p(d, j) if len(d) + len(j) <= 16 else None,
                }
            )
        self.rows = rows
        return rows


_SET_TITLES = {
    "per-job-caches": "A: the default sandbox (each job compiles in caches of its own)",
    "shared-caches": "B: compile caches shared by the jobs and the direct runs (`ATTNPROF_WORKER__PASS_ENV`)",
}


def _range(xs: list[float | None]) -> str:
    vals = [x for x in xs if x is not None]
    return f"{min(vals):.1f}–{max(vals):.1f}" if vals else "–"


def _show(path: Path) -> str:
    """A path as the report shows it: relative to the repository when inside it."""
    full = path.resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(path)


def _med(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def compare_report(args: argparse.Namespace) -> None:
    context = _context_spreads(args.context)
    sets = [CompareSet.read(folder) for folder in args.data]
    for s in sets:
        s.case_rows(context)
    first = sets[0]
    env, v = first.environment, first.data["versions"]
    sw = env.get("software") or {}
    dev = env.get("device") or {}
    out: Path = args.out
    rel = [_show(f) for f in args.data]
    ctx = _show(args.context) if args.context else None
    lines = [
        "# Worker pipeline on the NVIDIA H200: a job against the direct run (2026-11-30)",
        "",
        f"Suite `{first.data['suite']}` (15 cases: one LLaMA-7B attention layer at prefill, B=1, 32 heads of 128, "
        "S=2048, bf16, causal). On one H200 it was profiled alternately as a job through the whole pipeline and "
        "directly with the worker's own command line (`python -m attnprof.core profile SUITE --device cuda --out … "
        "--trace-dir … --cache-dir … --quiet`). The pipeline: `attnprof serve`, "
        f"{first.data['stack']['database']} and kombu's {first.data['stack']['broker']} broker (the embedded mode: "
        "the GPU host has no Postgres or Redis and reaches no registry), `attnprof worker --analysis` with beat, and "
        "one Celery profile worker, `attnprof worker --testbed h200 --device cuda` (`--pool=solo`, NVML check of the "
        "GPU), profiling in its sandboxed subprocess (scrubbed environment, scratch directory, memory watchdog). The "
        "order is ABBA (direct, job, job, direct, direct, job, …) and each job is waited for until its verdict, so "
        "nothing else used the GPU while a run was timing. Two machine leases, one set each:",
        "",
    ]
    for s in sets:
        lines.append(
            f"- **Set {_SET_TITLES.get(s.name, s.name)}**: {len(s.direct)} direct runs, {len(s.jobs)} jobs "
            f"(order {', '.join(s.data['order'])}); started {s.data['date']}."
        )
    lines += [
        "",
        "| | |",
        "|---|---|",
        f"| GPU | {dev.get('name')} (sm_{str(dev.get('compute_capability')).replace('.', '')}, "
        f"{dev.get('sm_count')} SMs), "
        "clocks not locked |",
        f"| driver / CUDA / cuDNN | {env.get('driver')} / {env.get('cuda') or sw.get('cuda')} / "
        f"{env.get('cudnn') or sw.get('cudnn')} |",
        f"| Python / torch / Triton | {v.get('python')} / {env.get('torch') or v.get('torch')} / {v.get('triton')} |",
        f"| testbed key | `{env.get('testbed_key')}` (as in `h200-truth.md`: same GPU model and driver) |",
        f"| stack | celery {v.get('celery')}, kombu {v.get('kombu')}, fastapi {v.get('fastapi')}, uvicorn "
        f"{v.get('uvicorn')}, SQLAlchemy {v.get('sqlalchemy')}, pydantic {v.get('pydantic')}, nvidia-ml-py "
        f"{v.get('nvidia-ml-py')} (carried as wheels, `.whl/`, installed with `pip --target` and put first on the "
        "path by a `.pth` file, so that the sandboxed subprocess sees them too) |",
        "| host | "
        + "; ".join(
            f"set {s.name}: {s.data['host']['cpus']} CPUs, load average {s.data['host']['load_start']} → "
            f"{s.data['host'].get('load_end')}"
            for s in sets
        )
        + " (the GPU host is not shared) |",
        f"| raw data | `{Path(rel[0]).parent}/` (per set: `compare.json` with the job timestamps and phases, "
        "the result documents in `docs/` gzipped, the workers' logs, nvidia-smi before and after) |",
        "",
        "Produced by (on the GPU host through the device tool, from the repository root, `.whl` carried; then here):",
        "",
        "```bash",
        "bash bench/pipeline_h200.sh wheels                                        # here, once: .whl/",
        "BUDGET_S=480 bash bench/pipeline_h200.sh                                  # device call 1: set A",
        "NAME=pipeline-h200-shared SHARED_CACHES=1 BUDGET_S=330 bash bench/pipeline_h200.sh   # call 2: set B",
        "python3 -m bench.pipeline_load compare-report "
        + " ".join(f"--data {r}" for r in rel)
        + f" --context {ctx} --out {_show(out)}",
        "```",
        "",
        "## Result: the pipeline adds no measurement difference",
        "",
        "Per case, Δ is the median over the jobs of the case's median latency against the same over the direct runs "
        "(each run's own median has a 95% CI within ±0.2%). It is compared with the run-to-run spread "
        "((max − min) / median over independent processes): the wider of this set's direct runs and the "
        "profiler-core H200 data of 2026-11-29 (`bench/reports/data/h200-2026-11-29`, 4–5 runs a set, the wider set).",
        "",
        "| set | cases with \\|Δ\\| ≤ run-to-run spread | median \\|Δ\\| | largest \\|Δ\\| | smallest p |",
        "|---|---|---|---|---|",
    ]
    for s in sets:
        diffs = [abs(r["diff"]) for r in s.rows]
        big = max(s.rows, key=lambda r: abs(r["diff"]))
        ps = [r["p"] for r in s.rows if r["p"] is not None]
        lines.append(
            f"| {s.name} | **{sum(abs(r['diff']) <= r['ref'] for r in s.rows)}/{len(s.rows)}** | "
            f"{statistics.median(diffs):.2%} | {abs(big['diff']):.2%} ({big['case']}) | "
            f"{min(ps):.2f} ({len(s.rows)} cases tested) |"
        )
    lines += [
        "",
        "*p* is the exact two-sided permutation test of the difference of medians between the two modes in one set "
        "(all splits of the runs): with 15 cases, a smallest p near 0.05 is what chance alone gives.",
        "",
    ]
    for s in sets:
        lines += [
            f"### Set {_SET_TITLES.get(s.name, s.name)}",
            "",
            "| case | direct µs (median of runs) | direct spread | job µs | job spread | Δ job vs direct "
            "| spread 2026-11-29 | within spread? | p |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in s.rows:
            lines.append(
                f"| {r['case']} | {r['direct']:,.1f} | {r['direct_spread']:.2%} | {r['job']:,.1f} "
                f"| {r['job_spread']:.2%} "
                f"| {r['diff']:+.2%} | {'–' if r['context'] is None else format(r['context'], '.2%')} "
                f"| {'yes' if abs(r['diff']) <= r['ref'] else '**no**'} "
                f"| {'–' if r['p'] is None else format(r['p'], '.2f')} |"
            )
        lines.append("")
    lines += [
        "## Wall time: where a job's time goes on the GPU host",
        "",
        "Medians over the jobs of a set, seconds. The phases are gaps between timestamps of one job on the host's "
        "clock: the job row (created, claimed, verdict), the result document (start and wall time of the profiling, "
        "taken inside the subprocess after its imports), the run row (stored), and the profile worker's log (the "
        "subprocess started; its wall time, logged in 0.1 s steps, which splits exit from upload: those two are "
        "good to ±0.05 s, hence the small negative uploads below).",
        "",
        "| phase | " + " | ".join(s.name for s in sets) + " |",
        "|---|" + "---|" * len(sets),
    ]
    phases = [
        ("queue_wait_s", "queue wait (created → claimed; the folder broker is polled every 0.5 s)"),
        ("claim_to_spawn_s", "claim answer, scratch directory (no bundle: built-in targets) → subprocess started"),
        ("spawn_to_profile_s", "subprocess start: Python, torch, CUDA, environment probe"),
        ("profiling_s", "profiling (the document's `run.wall_s`)"),
        ("exit_s", "subprocess exit (profiling done → process ended)"),
        ("upload_only_s", "result upload until the run row is written"),
        ("analysis_s", "analysis (message, baseline, comparison, change points, verdict)"),
        ("total_s", "**total, created → verdict**"),
        ("overhead_s", "total − profiling"),
    ]
    for key, what in phases:
        lines.append(f"| {what} | " + " | ".join(_fmt(_med([j.get(key) for j in s.data["jobs"]])) for s in sets) + " |")
    lines += [
        "",
        "The direct runs, for comparison (medians; the first direct run of each set is the cold one: empty compile "
        "caches, peaks measured into the shared peaks cache)"
        + "".join(
            f"; set {st.name}'s direct runs recorded the time they ended, their start and exit are derived from it "
            "and the process wall time"
            for st in sets
            if any("note" in d for d in st.data["direct"])
        )
        + ":",
        "",
        "| direct process | " + " | ".join(f"{s.name}: cold run | {s.name}: warm runs" for s in sets) + " |",
        "|---|" + "---|---|" * len(sets),
    ]
    for key, what in (
        ("startup_s", "start (process → profiling starts)"),
        ("profiling_s", "profiling"),
        ("exit_s", "exit (profiling done → process ended)"),
        ("process_wall_s", "**process wall time**"),
    ):
        cells = []
        for s in sets:
            ds = sorted(s.data["direct"], key=lambda d: d["index"])
            cells += [_fmt(ds[0].get(key)), _fmt(_med([d.get(key) for d in ds[1:]]))]
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per job:",
        "",
        "| set | job | verdict | total | queue | start | profiling | exit | upload | analysis |",
    ]
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for s in sets:
        for j in s.data["jobs"]:
            lines.append(
                f"| {s.name} | {j['index']} | {j['status']}, {j['verdict']} | {_fmt(j['total_s'])} "
                f"| {_fmt(j['queue_wait_s'])} "
                f"| {_fmt(j['spawn_to_profile_s'])} | {_fmt(j['profiling_s'])} | {_fmt(j.get('exit_s'))} "
                f"| {_fmt(j.get('upload_only_s'))} | {_fmt(j['analysis_s'])} |"
            )
    lines += ["", "The service's own verdicts (each job on `main`, compared with the jobs before it):", ""]
    for s in sets:
        for j in s.data["jobs"]:
            c = j.get("comparison")
            if c is None:
                lines.append(f"- {s.name}, job {j['index']}: no comparison")
                continue
            finding = "; ".join(f"{f['case']} {f['metric']} {f['status']}" for f in c["findings"]) or "no finding"
            lines.append(
                f"- {s.name}, job {j['index']}: **{c['verdict']}** against {len(c['baseline'])} baseline run(s): "
                f"{finding}"
            )
    lines += ["", "## Reading", ""]
    lines += _compare_reading(sets)
    plot = out.with_suffix(".png")
    try:
        _plot_compare(sets, plot)
        lines += ["", f"![job vs direct, per case]({plot.name})"]
    except ImportError:
        pass
    out.write_text("\n".join(lines) + "\n")
    say(f"report: {out}")


def _compare_reading(sets: list[CompareSet]) -> list[str]:
    by = {s.name: s for s in sets}
    out = []
    n_within = sum(sum(abs(r["diff"]) <= r["ref"] for r in s.rows) for s in sets)
    n_rows = sum(len(s.rows) for s in sets)
    all_diffs = [abs(r["diff"]) for s in sets for r in s.rows]
    out.append(
        f"- **Measurement.** In {n_within} of {n_rows} (set, case) pairs the job's median is within the run-to-run "
        f"spread of the direct one; |Δ| is at most {max(all_diffs):.2%} and its median "
        f"{statistics.median(all_diffs):.2%}, "
        "below every case's spread. The result document a job stores is the profiler's own, produced by the same "
        "command line on the same GPU: the sandbox (scrubbed environment, its own HOME and TMPDIR, the memory "
        "watchdog polling every 0.25 s) and the worker's heartbeats beside it leave the timings alone."
    )
    a, b = by.get("per-job-caches"), by.get("shared-caches")
    if a is not None:
        cold = a.data["direct"][0]
        warm = _med([d["profiling_s"] for d in a.data["direct"][1:]])
        out.append(
            "- **Wall time, set A.** A job's profiling takes "
            f"{_fmt(_med([j['profiling_s'] for j in a.data['jobs']]))} s "
            f"(median) against {_fmt(warm)} s for a warm direct run, and {_fmt(cold['profiling_s'])} s for the cold "
            "direct run: by design each job compiles in caches of its own (the sandbox puts `TORCHINDUCTOR_CACHE_DIR` "
            "and `TRITON_CACHE_DIR` in the job's scratch directory, so one job's code cannot change another's "
            "kernels), so every job pays FlexAttention's and Inductor's compilation, as a first direct run does. The "
            "timed iterations come after compilation and warm-up, so only wall time moves."
        )
    if b is not None:
        warm_exits = [j.get("exit_s") for j in b.data["jobs"]]
        warm_exits += [d.get("exit_s") for s in sets for d in s.data["direct"][1:]]
        out.append(
            f'- **Wall time, set B.** With the caches shared (`ATTNPROF_WORKER__PASS_ENV=\'["TORCHINDUCTOR_CACHE_DIR", '
            f"\"TRITON_CACHE_DIR\"]'`, for an operator who trusts every submitter) a job's profiling takes "
            f"{_fmt(_med([j['profiling_s'] for j in b.data['jobs']]))} s, as a warm direct run "
            f"({_fmt(_med([d['profiling_s'] for d in b.data['direct'][1:]]))} s). But the subprocess then takes "
            f"{_fmt(_med([j.get('exit_s') for j in b.data['jobs']]))} s to exit, against "
            f"{_fmt(_med([j.get('exit_s') for j in a.data['jobs']])) if a else '–'} s in set A: the direct runs "
            "show the "
            f"same (exit {_fmt(_med([d.get('exit_s') for d in b.data['direct'][1:]]))} s warm, "
            f"{_fmt(b.data['direct'][0].get('exit_s'))} s cold). A profiler process that found warm compile caches "
            f"spends {_range(warm_exits)} s "
            "in its exit, in the direct runs as in the jobs: a cost of the profiler process (torch's shutdown with "
            "a warm Inductor cache is the likely place; not investigated here), not of the pipeline."
        )
    overhead = []
    for s in sets:
        js = s.data["jobs"]
        overhead.append(
            f"{s.name}: queue wait {_fmt(_med([j['queue_wait_s'] for j in js]))} s, claim to subprocess "
            f"{_fmt(_med([j['claim_to_spawn_s'] for j in js]))} s, "
            f"upload {_fmt(_med([j.get('upload_only_s') for j in js]))} s, "
            f"analysis {_fmt(_med([j['analysis_s'] for j in js]))} s"
        )
    out.append(
        "- **What the service and queue themselves add** (medians; the subprocess's start and exit are the "
        "profiler process's own, paid by a direct run too): " + "; ".join(overhead) + ". Under a second per job in "
        "all; the queue wait is the folder broker's polling (Redis, in production, delivers at once: see "
        "`pipeline-cpu.md`)."
    )
    verdicts = [(s.name, j) for s in sets for j in s.data["jobs"] if j.get("comparison")]
    warns = [f"{n} job {j['index']}" for n, j in verdicts if j["comparison"]["verdict"] != "pass"]
    out.append(
        f"- **The service's verdicts.** {len(verdicts) - len(warns)} of {len(verdicts)} jobs pass against the jobs "
        f"before them; {', '.join(warns) or 'none'} warn, each against one or two baseline runs, where a variance or "
        "kernel-set change can be named but not confirmed (listed above); no job fails. With three baseline runs "
        "every job passes."
    )
    return out


def _plot_compare(sets: list[CompareSet], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [r["case"] for r in sets[0].rows]
    fig, ax = plt.subplots(figsize=(11, 5.5))
    ys = range(len(cases))
    ref = [max(r["ref"] for s in sets for r in s.rows if r["case"] == c) * 100 for c in cases]
    ax.barh(ys, [2 * x for x in ref], left=[-x for x in ref], color="0.88", label="± run-to-run spread (wider set)")
    for k, s in enumerate(sets):
        by = {r["case"]: r for r in s.rows}
        ax.scatter(
            [by[c]["diff"] * 100 if c in by else float("nan") for c in cases],
            [y + 0.15 * (k - 0.5) for y in ys],
            marker="o" if k == 0 else "s",
            s=28,
            label=f"job vs direct, set {s.name}",
            zorder=3,
        )
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set_yticks(list(ys), cases, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("Δ of the median latency, job vs direct (%)")
    ax.set_title("attnprof on the H200: a job through the pipeline against the direct run (llama7b suite, 2026-11-30)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- main ------------------------------------------------------------------------------------------------


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> None:
    # SIGTERM stops the benchmark as Ctrl-C does: the stack is stopped and its database dropped on the way out.
    signal.signal(signal.SIGTERM, _interrupt)
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("mode", nargs="?", choices=("load", "load-report", "compare", "compare-report"), default="load")
    ap.add_argument("--jobs", type=int, default=40, help="load: jobs in the burst")
    ap.add_argument("--paced", type=int, default=0, help="load: jobs submitted one at a time (default: --jobs)")
    ap.add_argument("--direct", type=int, default=3, help="load: direct runs of the suite (after one warm-up)")
    ap.add_argument("--profile-workers", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--testbed", default="bench-cpu")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the workers and direct runs (0: unset)")
    ap.add_argument("--suite", type=Path, default=None, help="suite file (load: default the built-in small CPU suite)")
    ap.add_argument(
        "--embedded", action="store_true", help="SQLite and the folder broker instead of Postgres and Redis"
    )
    ap.add_argument("--cache-dir", type=Path, default=None, help="the profiler's peaks cache (default: fresh)")
    ap.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="a variable of this environment passed to the workers and their profiling subprocess "
        "(ATTNPROF_WORKER__PASS_ENV), e.g. shared compile caches; repeatable",
    )
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="the longest wait for a phase's jobs")
    ap.add_argument(
        "--out",
        type=Path,
        default=REPORT,
        help="load: the report; compare: the output folder; compare-report: the report",
    )
    ap.add_argument(
        "--data",
        type=Path,
        action="append",
        default=None,
        help="load: the raw figures (JSON); compare-report: a compare output folder (repeatable: one set each)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, database)")
    ap.add_argument("--quick", action="store_true", help="load: a smoke run (1 direct run)")
    ap.add_argument("--pairs", type=int, default=50, help="compare: at most this many (job, direct) pairs")
    ap.add_argument("--budget-s", type=float, default=420.0, help="compare: start no pair that would end later")
    ap.add_argument("--context", type=Path, default=None, help="compare-report: the profiler-core H200 data folder")
    args = ap.parse_args()
    if args.quick:
        args.direct = 1
        quick.refuse_reports(ap, args.data[-1] if args.data else None)
        named = None if args.out == REPORT else args.out
        (args.out,) = quick.place(ap, "pipeline-load", (named, "pipeline-cpu.md"))
    if args.mode == "load":
        run_load(args)
    elif args.mode == "load-report":
        if args.data is None:
            ap.error("load-report needs --data (the figures a load run wrote)")
        write_load_report(json.loads(args.data[-1].read_text()), args.out, args.data[-1])
    elif args.mode == "compare":
        if args.profile_workers != 1:
            args.profile_workers = 1
        if args.suite is None:
            ap.error("compare needs --suite")
        run_compare(args)
    else:
        if args.data is None:
            ap.error("compare-report needs --data")
        compare_report(args)


if __name__ == "__main__":
    main()
