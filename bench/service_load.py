"""Load benchmark of the service: ``attnprof serve`` on loopback, Postgres and a real Redis broker.

    .venv/bin/python -m bench.service_load                      # seed, measure, write the report
    .venv/bin/python -m bench.service_load --reuse --keep       # measure again on the attnprof_bench seeded before
    .venv/bin/python -m bench.service_load --quick              # small seed, short levels: a smoke run

Steps, in order:
1. wait until the machine is quiet (1-minute load average below 1.5, polled every 20 s for up to 10 minutes);
2. seed the database (``bench/service_seed.py``): 10,000 runs with their cases, kernels, samples and documents;
3. start ``attnprof serve`` (one process) with the rate limits raised and ``ATTNPROF_BROKER_URL`` on Redis;
4. job creation, open loop: requests are sent at fixed offered rates whatever the answers do, and each latency
   runs from the moment its request was due (so a late generator or a queue in front of the server counts);
5. result upload of a 100-case document (the H200 run's 15 cases replicated under new ids) with its comparison,
   three default-branch runs uploaded first as the baseline; feature-branch uploads are timed;
6. trend queries over the seeded history: random case, branch and testbed, without and with a time range, and
   the per-kernel trend;
7. in process, without HTTP: the CPU time of a 100-case ``compare``, of a whole upload (rolled back) and of
   publishing one job message;
8. ``EXPLAIN (ANALYZE, BUFFERS)`` of the statements the trend and baseline-selection code really issues
   (captured from the service's repository functions, run with their parameters);
9. the report (``bench/reports/service-load.md``) and the plot of latency against offered load.

Latencies on a shared machine depend on what else runs; the report gives the server's CPU time per request
beside each latency, with the load average, and that is the figure to compare between runs.

The load generator (httpx, asyncio, one process), the server, Postgres and Redis share the machine's cores:
the CPU seconds each used are measured per load level and reported.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import platform
import random
import secrets
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench import quick
from bench import service_seed as seeding

ROOT = Path(__file__).resolve().parents[1]

REPORT = ROOT / "bench" / "reports" / "service-load.md"
PLOT = ROOT / "bench" / "reports" / "service-load.png"
REDIS = "redis://127.0.0.1:6379/13"
TESTBED = "bench-jobs"
SPEC = """[suite]
name = "bench"

[[cases]]
name = "prefill"
target = "sdpa"
q_heads = 32
seq_q = 2048
head_dim = 128
"""
CASES_PER_UPLOAD = 100
TARGETS = {"job_p99_ms_at_200": 50.0, "trend_p95_ms": 50.0, "upload_p95_ms": 500.0}


# --- the machine --------------------------------------------------------------------------------------------


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def wait_quiet(limit: float = 1.5, poll_s: float = 20.0, max_s: float = 600.0) -> dict[str, Any]:
    """Wait for the 1-minute load average to fall under ``limit``; returns what was seen."""
    seen = [loadavg()]
    start = time.monotonic()
    while seen[-1] >= limit and time.monotonic() - start < max_s:
        print(f"load {seen[-1]:.2f} >= {limit}: waiting {poll_s:.0f} s", flush=True)
        time.sleep(poll_s)
        seen.append(loadavg())
    return {"load_1min": seen[-1], "quiet": seen[-1] < limit, "waited_s": time.monotonic() - start, "polls": seen}


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of the processes ``pids`` (and their reaped children)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(fields[i]) for i in (11, 12, 13, 14)) / tick
    return total


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy (all cores, every process), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, str]:
    model = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in ln),
        platform.processor(),
    )
    mem_kb = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines() if "MemTotal" in ln)
    return {"cpu": model, "cores": str(os.cpu_count()), "memory": f"{mem_kb / 1024 / 1024:.1f} GiB"}


def versions(pg: str) -> dict[str, str]:
    import celery  # type: ignore[import-untyped]
    import fastapi
    import psycopg
    import sqlalchemy
    import uvicorn

    with psycopg.connect(pg) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    redis_v = subprocess.run(["redis-cli", "-u", REDIS, "INFO", "server"], capture_output=True, text=True).stdout
    return {
        "python": platform.python_version(),
        "fastapi": fastapi.__version__,
        "uvicorn": uvicorn.__version__,
        "sqlalchemy": sqlalchemy.__version__,
        "psycopg": psycopg.__version__,
        "celery": celery.__version__,
        "httpx": httpx.__version__,
        "postgres": str(row[0]) if row else "?",
        "redis": next((ln.split(":")[1].strip() for ln in redis_v.splitlines() if ln.startswith("redis_version")), "?"),
    }


# --- the server ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]

    @classmethod
    def start(cls, database_url: str, workers: int = 1, env: dict[str, str] | None = None) -> Server:
        """``attnprof serve`` on a free port, once it answers ``/readyz``; ``env`` adds to or overrides its
        environment (the broker is this benchmark's Redis by default)."""
        port = free_port()
        env = {
            **os.environ,
            "ATTNPROF_DATABASE_URL": database_url,
            "ATTNPROF_BROKER_URL": REDIS,
            "ATTNPROF_PUBLIC_URL": f"http://127.0.0.1:{port}",
            # Several server processes sign the dashboard's cookies with one secret, which `serve --workers N`
            # therefore requires.
            "ATTNPROF_DASHBOARD__SESSION_SECRET": secrets.token_urlsafe(32),
            # The benchmark's one token sends far more than a CI token would.
            "ATTNPROF_RATE_LIMIT__REQUESTS_PER_MINUTE": "100000000",
            "ATTNPROF_RATE_LIMIT__BURST": "1000000",
            # and keeps every job it creates queued (no worker takes them): no queue limit either.
            "ATTNPROF_FAIRNESS__MAX_QUEUED": "100000000",
            **(env or {}),
        }
        cmd = [str(ROOT / ".venv" / "bin" / "attnprof"), "serve", "--port", str(port), "--workers", str(workers)]
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    return cls(url=url, proc=proc)
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        proc.kill()
        raise RuntimeError("attnprof serve did not become ready")

    def pids(self) -> list[int]:
        kids = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        return [self.proc.pid, *map(int, kids)]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# --- statistics ---------------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def summary_ms(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {"n": len(ms), "p50": pct(ms, 50), "p95": pct(ms, 95), "p99": pct(ms, 99), "max": max(ms, default=0.0)}


# --- job creation, open loop --------------------------------------------------------------------------------


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, data) in files.items():
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        parts.append(head.encode() + b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


@dataclass
class Level:
    offered_rps: float
    duration_s: float
    sent: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)
    send_lag_s: list[float] = field(default_factory=list)
    achieved_rps: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)
    load_1min: float = 0.0

    def row(self) -> dict[str, Any]:
        s = summary_ms(self.latencies_s)
        return {
            "offered_rps": self.offered_rps,
            "achieved_rps": self.achieved_rps,
            "sent": self.sent,
            "ok": self.ok,
            "errors": sum(self.errors.values()),
            "error_kinds": self.errors,
            "p50_ms": s["p50"],
            "p99_ms": s["p99"],
            "max_ms": s["max"],
            "send_lag_p99_ms": pct([v * 1000 for v in self.send_lag_s], 99),
            "cpu_s": self.cpu_s,
            "load_1min": self.load_1min,
        }


class RawHttp:
    """One keep-alive HTTP/1.1 connection sending one prepared request again and again: far cheaper per request
    than a general client, so that the generator leaves the shared cores to the server."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def send(self, request: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        close = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"connection" and value.strip().lower() == b"close":
                close = True
        await self.reader.readexactly(length)
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def raw_request(url: str, headers: dict[str, str], body: bytes) -> tuple[str, int, bytes, bytes]:
    """(host, port, and the request's bytes before and after its Idempotency-Key's value): every request
    carries a key of its own, as ``attnprof submit`` sends one."""
    u = httpx.URL(url)
    lines = [f"POST {u.raw_path.decode()} HTTP/1.1", f"Host: {u.host}:{u.port}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    head = ("\r\n".join(lines) + "\r\nIdempotency-Key: ").encode()
    return u.host, int(u.port or 80), head, b"\r\n\r\n" + body


async def open_loop(
    url: str, headers: dict[str, str], body: bytes, rate: float, duration_s: float, connections: int = 64
) -> Level:
    """Requests due at ``rate`` per second for ``duration_s``, sent over ``connections`` keep-alive connections
    (wrk2's model): a request waits for a free connection when all are busy, and its latency runs from when it
    was due, so waiting in the generator counts as the server's slowness it is."""
    level = Level(offered_rps=rate, duration_s=duration_s)
    n = max(1, round(rate * duration_s))
    host, port, head, tail = raw_request(url, headers, body)
    run = uuid.uuid4().hex[:12]
    due: asyncio.Queue[tuple[float, int] | None] = asyncio.Queue()
    done_at: list[float] = []

    async def worker() -> None:
        conn = RawHttp(host, port)
        while (item := await due.get()) is not None:
            at, i = item
            level.send_lag_s.append(time.perf_counter() - at)
            try:
                status = await asyncio.wait_for(conn.send(head + f"{run}-{i}".encode() + tail), timeout=60.0)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
                conn.close()
                key = type(exc).__name__
                level.errors[key] = level.errors.get(key, 0) + 1
                continue
            now = time.perf_counter()
            if status == 202:
                level.ok += 1
                level.latencies_s.append(now - at)
                done_at.append(now)
            else:
                level.errors[str(status)] = level.errors.get(str(status), 0) + 1
        conn.close()

    workers = [asyncio.create_task(worker()) for _ in range(connections)]
    start = time.perf_counter() + 0.05
    for i in range(n):
        at = start + i / rate
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        due.put_nowait((at, i))
        level.sent += 1
    for _ in workers:
        due.put_nowait(None)
    await asyncio.gather(*workers)
    if done_at:
        level.achieved_rps = level.ok / max(duration_s, max(done_at) - start)
    return level


def job_levels(server: Server, token: str, project: str, rates: list[float], duration_s: float) -> list[Level]:
    body, ctype = multipart(
        {"testbed": TESTBED, "branch": "feature-load", "commit": "0123abcd", "repo": "example/attention"},
        {"spec": ("attnprof.toml", SPEC.encode())},
    )
    headers = {"Authorization": f"Bearer {token}", "Content-Type": ctype}
    url = f"{server.url}/api/v1/projects/{project}/jobs"
    asyncio.run(open_loop(url, headers, body, 20, 2.0))  # warm-up: connections, caches, the broker's pool
    levels = []
    for rate in rates:
        server0, gen0, busy0 = cpu_seconds(server.pids()), time.process_time(), machine_busy_s()
        level = asyncio.run(open_loop(url, headers, body, rate, duration_s))
        server_s, gen_s = cpu_seconds(server.pids()) - server0, time.process_time() - gen0
        # Postgres backends come and go with the pool's overflow connections: count them as the rest of the
        # machine's busy time (Postgres, Redis and whatever else ran).
        level.cpu_s = {
            "server": server_s,
            "generator": gen_s,
            "rest": max(0.0, machine_busy_s() - busy0 - server_s - gen_s),
        }
        level.load_1min = loadavg()
        r = level.row()
        print(
            f"jobs at {rate:5.0f}/s: achieved {r['achieved_rps']:6.1f}/s p50 {r['p50_ms']:7.1f} ms "
            f"p99 {r['p99_ms']:7.1f} ms errors {r['errors']} cpu {level.cpu_s}",
            flush=True,
        )
        levels.append(level)
        time.sleep(3.0)
        if r["p50_ms"] > 2000 and rate >= 200:  # far past saturation: higher rates only pile up more
            break
    return levels


# --- result upload ------------------------------------------------------------------------------------------


def hundred_cases(template: dict[str, Any], *, commit_tag: str, slower: float = 1.0) -> dict[str, Any]:
    """The H200 run's cases replicated under new ids to 100 cases, with a new run id."""
    doc = copy.deepcopy(template)
    doc["run"]["id"] = str(uuid.uuid4())
    originals = doc["cases"]
    cases = []
    for i in range(CASES_PER_UPLOAD):
        case = copy.deepcopy(originals[i % len(originals)])
        if i >= len(originals):
            case["id"] = f"{case['id']}#{i // len(originals)}"
            if case.get("trace"):
                case["trace"] = f"{i // len(originals)}-{case['trace']}"
        jitter = random.Random(f"{commit_tag}{i}").lognormvariate(0.0, 0.005) * slower
        lat = case["latency_us"]
        lat["samples"] = [v * jitter for v in lat["samples"]]
        for k in ("median", "p25", "p75", "min", "max"):
            lat[k] *= jitter
        cases.append(case)
    doc["cases"] = cases
    return doc


def uploads(server: Server, token: str, project: str, n: int, main_n: int) -> dict[str, Any]:
    """Three baseline uploads on main, ``n`` timed feature-branch uploads, then ``main_n`` more on main; with the
    server's CPU seconds per timed upload (less disturbed by other work on the machine than its latency)."""
    template = json.loads(seeding.H200.read_text())
    url = f"{server.url}/api/v1/projects/{project}/results"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    out: dict[str, Any] = {"baseline_s": [], "feature_s": [], "main_s": [], "verdicts": {}, "bytes": 0}
    with httpx.Client(timeout=60.0) as client:

        def post(body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
            data = json.dumps(body).encode()
            out["bytes"] = len(data)
            t = time.perf_counter()
            r = client.post(url, content=data, headers=headers)
            elapsed = time.perf_counter() - t
            if r.status_code != 201:
                raise RuntimeError(f"upload answered {r.status_code}: {r.text[:500]}")
            return elapsed, r.json()

        commits = [f"bench-main-{i}" for i in range(3)]
        for i, commit in enumerate(commits):
            elapsed, _ = post(
                {
                    "result": hundred_cases(template, commit_tag=commit),
                    "branch": "main",
                    "commit": commit,
                    "ancestors": commits[:i][::-1],
                }
            )
            out["baseline_s"].append(elapsed)
        cpu0 = cpu_seconds(server.pids())
        for i in range(n):
            doc = hundred_cases(template, commit_tag=f"feature-{i}", slower=1.05 if i % 3 == 0 else 1.0)
            elapsed, answer = post(
                {
                    "result": doc,
                    "branch": "feature-upload",
                    "commit": f"bench-feature-{i}",
                    "base_commit": commits[-1],
                    "ancestors": commits[:-1][::-1],
                    "pr": 7,
                }
            )
            out["feature_s"].append(elapsed)
            out["verdicts"][answer["verdict"]] = out["verdicts"].get(answer["verdict"], 0) + 1
            out["baseline_runs"] = len(answer["baseline"] or [])
        out["feature_cpu_s"] = (cpu_seconds(server.pids()) - cpu0) / max(1, n)
        out["feature_load_1min"] = loadavg()
        for i in range(main_n):
            commit = f"bench-main-{3 + i}"
            elapsed, _ = post(
                {
                    "result": hundred_cases(template, commit_tag=commit),
                    "branch": "main",
                    "commit": commit,
                    "base_commit": commits[-1],
                    "ancestors": commits[:-1][::-1],
                }
            )
            commits.append(commit)
            out["main_s"].append(elapsed)
    print(
        f"uploads: feature {summary_ms(out['feature_s'])} (server CPU {out['feature_cpu_s'] * 1000:.0f} ms each) "
        f"main {summary_ms(out['main_s'])}",
        flush=True,
    )
    return out


# --- trend queries ------------------------------------------------------------------------------------------


def trends(server: Server, token: str, seeded: seeding.Seeded, n: int) -> dict[str, Any]:
    rng = random.Random(1)
    first = datetime.fromisoformat(seeded.first_at)
    last = datetime.fromisoformat(seeded.last_at)
    headers = {"Authorization": f"Bearer {token}"}
    base = f"{server.url}/api/v1/projects/{seeded.project}/trends"
    groups: dict[str, list[float]] = {
        "testbed, no range": [],
        "testbed, 30-day range": [],
        "no testbed": [],
        "kernel": [],
    }
    points: dict[str, list[int]] = {k: [] for k in groups}
    # Server CPU seconds per query, summed by kind (/proc counts in 10 ms ticks: exact only on average).
    cpu: dict[str, float] = dict.fromkeys(groups, 0.0)
    pids = server.pids()
    with httpx.Client(timeout=30.0) as client:
        client.get(f"{base}?case={seeded.case_ids[0]}", headers=headers)  # warm-up
        for i in range(n):
            group = list(groups)[i % len(groups)]
            case = rng.choice(seeded.case_ids)
            params: dict[str, Any] = {"case": case, "branch": rng.choice(seeded.branches)}
            if group != "no testbed":
                params["testbed"] = rng.choice(list(seeded.testbeds))
            if group == "testbed, 30-day range":
                since = first + timedelta(seconds=rng.uniform(0, (last - first).total_seconds() - 30 * 86400))
                params["since"], params["until"] = since.isoformat(), (since + timedelta(days=30)).isoformat()
            url = base
            if group == "kernel":
                url = f"{base}/kernels"
                params["kernel"] = rng.choice(seeded.kernel_keys[case])
            cpu0 = cpu_seconds(pids)
            t = time.perf_counter()
            r = client.get(url, params=params, headers=headers)
            groups[group].append(time.perf_counter() - t)
            cpu[group] += cpu_seconds(pids) - cpu0
            if r.status_code != 200:
                raise RuntimeError(f"trend answered {r.status_code}: {r.text[:300]}")
            points[group].append(len(r.json()["points"]))
    out = {
        g: {**summary_ms(v), "points_mean": float(np.mean(points[g])), "cpu_ms": cpu[g] * 1000 / max(1, len(v))}
        for g, v in groups.items()
    }
    out["all case trends"] = summary_ms([v for g, vs in groups.items() if g != "kernel" for v in vs])
    for g, s in out.items():
        print(f"trend {g}: {s}", flush=True)
    return out


# --- in process ---------------------------------------------------------------------------------------------


def in_process(seeded: seeding.Seeded, repeats: int = 5) -> dict[str, Any]:
    """CPU time of the pieces behind the figures above, called in this process (no HTTP, no server): a 100-case
    comparison against three baseline runs, a whole upload (store and compare, rolled back) on the seeded
    database, and the publish of one ``profile.run`` message to Redis. Medians of ``repeats`` (CPU ms)."""
    import attnprof.server.models  # noqa: F401  (every table, for the ORM's flush)
    from attnprof.contract import tasks
    from attnprof.contract.ids import JobId
    from attnprof.core.analysis.compare import compare
    from attnprof.core.documents import parse_result
    from attnprof.server import queue
    from attnprof.server.config import Analysis, Settings
    from attnprof.server.db import make_engine, make_sessionmaker
    from attnprof.server.projects import repository as projects
    from attnprof.server.results import service as results
    from attnprof.server.results.schemas import ResultUpload

    template = json.loads(seeding.H200.read_text())
    baselines = [parse_result(hundred_cases(template, commit_tag=f"in-process-{i}")) for i in range(3)]
    candidate = parse_result(hundred_cases(template, commit_tag="in-process-c", slower=1.05))

    def cpu_ms(fn: Any) -> float:
        times = []
        for _ in range(repeats):
            start = time.process_time()
            fn()
            times.append((time.process_time() - start) * 1000)
        return float(np.median(times))

    out: dict[str, Any] = {"load_1min": loadavg()}
    out["compare_ms"] = cpu_ms(lambda: compare(baselines, candidate))
    engine = make_engine(seeded.url)
    factory = make_sessionmaker(engine)
    commits = [f"bench-main-{i}" for i in range(3)]

    def upload() -> None:
        body = ResultUpload.model_validate(
            {
                "result": hundred_cases(template, commit_tag="in-process-u", slower=1.05),
                "branch": "feature-upload",
                "commit": "bench-in-process",
                "base_commit": commits[-1],
                "ancestors": commits[:-1][::-1],
            }
        )
        with factory() as session:
            project = projects.get_by_name(session, seeded.project)
            assert project is not None
            results.upload(session, project_id=project.id, body=body, cfg=Analysis(), ancestors_max=50)
            session.flush()
            session.rollback()

    out["upload_ms"] = cpu_ms(upload)
    engine.dispose()
    settings = Settings(broker_url=REDIS)
    sends = 300
    start = time.process_time()
    for i in range(sends):
        job = JobId(f"in-process-{i}")
        message = tasks.ProfileMessage(job, attempt=1, testbed="bench-in-process", claim_secret="s")
        queue.enqueue_profile(settings, message)
    out["enqueue_ms"] = (time.process_time() - start) * 1000 / sends
    subprocess.run(["redis-cli", "-u", REDIS, "DEL", "profile.bench-in-process"], capture_output=True)
    out["submit_ms"] = asyncio.run(submissions_in_process(seeded))
    print(f"in process: {out}", flush=True)
    return out


async def submissions_in_process(seeded: seeding.Seeded, n: int = 2000, concurrency: int = 8) -> float:
    """CPU ms of one job submission through the app itself, called as an ASGI application (no HTTP server, no
    sockets of the client's): the benchmark's request, each with its own Idempotency-Key, ``concurrency`` at a
    time; the median of three rounds of ``n``."""
    from attnprof.server.app import create_app
    from attnprof.server.config import Fairness, RateLimit, Settings

    # The 6,050 jobs this measures stay queued (no worker takes them): the project's queue limit would answer 429.
    settings = Settings(
        database_url=seeded.url,
        broker_url=REDIS,
        rate_limit=RateLimit(requests_per_minute=100_000_000, burst=1_000_000),
        fairness=Fairness(max_queued=1_000_000),
    )
    app = create_app(settings)
    body, ctype = multipart(
        {"testbed": "bench-in-process", "branch": "feature-load", "commit": "0123abcd", "repo": "example/attention"},
        {"spec": ("attnprof.toml", SPEC.encode())},
    )
    path = f"/api/v1/projects/{seeded.project}/jobs"
    headers = [
        (b"host", b"127.0.0.1"),
        (b"authorization", f"Bearer {seeded.admin_token}".encode()),
        (b"content-type", ctype.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    run = uuid.uuid4().hex[:12]
    statuses: list[int] = []

    async def submit(i: int) -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [*headers, (b"idempotency-key", f"{run}-{i}".encode())],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "state": {},
        }
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client never disconnects
            raise AssertionError

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await app(scope, receive, send)

    rounds = []
    async with app.router.lifespan_context(app):
        slots = asyncio.Semaphore(concurrency)

        async def bounded(i: int) -> None:
            async with slots:
                await submit(i)

        await asyncio.gather(*(bounded(-1 - i) for i in range(50)))  # warm: connections, caches
        for r in range(3):
            start = time.process_time()
            await asyncio.gather(*(bounded(r * n + i) for i in range(n)))
            rounds.append((time.process_time() - start) * 1000 / n)
    subprocess.run(["redis-cli", "-u", REDIS, "DEL", "profile.bench-in-process"], capture_output=True)
    bad = [s for s in statuses if s != 202]
    if bad:
        raise RuntimeError(f"{len(bad)} submissions in process were answered {sorted(set(bad))}")
    return float(np.median(rounds))


# --- query plans --------------------------------------------------------------------------------------------


def plans(seeded: seeding.Seeded) -> dict[str, str]:
    """EXPLAIN ANALYZE of the statements the trend and baseline-selection code issues, captured as it runs."""
    from sqlalchemy import event, select
    from sqlalchemy.orm import Session

    from attnprof.server.baselines import service as baselines
    from attnprof.server.config import Analysis
    from attnprof.server.db import make_engine
    from attnprof.server.projects import repository as projects
    from attnprof.server.runs.models import Run
    from attnprof.server.testbeds import repository as testbeds
    from attnprof.server.trends import repository as trends_repo

    engine = make_engine(seeded.url)
    captured: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, parameters: Any, _ctx: Any, _many: bool) -> None:
        captured.append((statement, parameters))

    out: dict[str, str] = {}
    with Session(engine) as session:
        project = projects.get_by_name(session, seeded.project)
        tb = testbeds.get_by_name(session, next(iter(seeded.testbeds)))
        assert project is not None and tb is not None
        case = seeded.case_ids[1]
        tq = trends_repo.TrendQuery(project.id, tb.id, "main", case, None, None, None, 201)
        last = datetime.fromisoformat(seeded.last_at)
        ranged = trends_repo.TrendQuery(
            project.id, tb.id, "main", case, last - timedelta(days=60), last - timedelta(days=30), None, 201
        )
        no_testbed = trends_repo.TrendQuery(project.id, None, "main", case, None, None, None, 201)
        feature = session.scalars(
            select(Run)
            .where(Run.project_id == project.id, Run.testbed_id == tb.id, Run.branch != "main")
            .order_by(Run.created_at.desc())
            .limit(1)
        ).one()
        jobs: list[tuple[str, Any]] = [
            ("trend: case, testbed, main", lambda: trends_repo.case_points(session, tq, "latency")),
            ("trend: case, testbed, main, 30-day range", lambda: trends_repo.case_points(session, ranged, "latency")),
            ("trend: case, no testbed, main", lambda: trends_repo.case_points(session, no_testbed, "latency")),
            ("trend: kernel", lambda: trends_repo.kernel_points(session, tq, seeded.kernel_keys[case][0], "latency")),
            (
                "baseline selection",
                lambda: baselines.select(
                    session,
                    candidate=feature,
                    default_branch="main",
                    ancestors=[str(a) for a in feature.ancestors],
                    cfg=Analysis(),
                ),
            ),
            (
                "noise floor history",
                lambda: baselines.noise_floor(session, candidate=feature, default_branch="main", cfg=Analysis()),
            ),
        ]
        for name, call in jobs:
            captured.clear()
            event.listen(engine, "before_cursor_execute", capture)
            try:
                call()
            finally:
                event.remove(engine, "before_cursor_execute", capture)
            texts = []
            for statement, parameters in captured:
                raw = (
                    session.connection()
                    .exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
                    .scalars()
                    .all()
                )
                texts.append(statement.strip() + "\n\n" + "\n".join(raw))
            out[name] = "\n\n-----\n\n".join(texts)
    engine.dispose()
    return out


def indexes_used(plan: str) -> list[str]:
    import re

    return sorted(
        set(re.findall(r"(?:Index Scan|Index Only Scan|Bitmap Index Scan)(?: Backward)? (?:using|on) (\w+)", plan))
    )


# --- the report ---------------------------------------------------------------------------------------------

# What profiling found and what was changed in the service because of it (figures from the runs before the
# change, measured the same way on the same machine); kept here so that a re-run writes the same account.
FINDINGS = """
Profiles were taken with py-spy (`record --gil` on the server process, so that only time holding the GIL counts)
and cProfile (the upload's service functions called in process); "before" figures are from the same machine
before each change.

**Job creation stalled for 30 s past ~90 requests/s (fixed).** At 100 requests/s offered, 270 of 300 requests
timed out and the server logged `QueuePool limit of size 10 overflow 10 reached, connection timed out, timeout
30.00`. A py-spy dump showed all 40 threads of the server's pool blocked in `QueuePool._do_get`, none holding a
connection: the requests holding the 20 connections were each waiting for a thread to run their next sync
dependency or endpoint. Fixed in `attnprof/server/db.py`: a request now waits on the event loop for one of as many
session slots as the pool keeps connections (`session_slot`, taken by `get_session` and by the job submission), so no
thread ever waits on the pool. Past saturation the service now queues and answers every request (0 errors at every
level above). The slots equal the pool's size, not size + overflow: an overflow connection is closed on return, so
sustained concurrency past the pool's size would open a Postgres backend for nearly every request.

**Job creation: where a request's CPU went, and the written-out path (this round).** The earlier rounds measured
7-12 ms of server CPU a job creation on an Intel Xeon host, where one process saturated at ~126/s and two at
~167/s; an attempt then at an async endpoint with Core statements showed no difference at load averages of 3-6.
This round measured without HTTP and on a quiet host (AMD EPYC, load average under 2): the job request of this
benchmark, with an Idempotency-Key, sent to the app as an ASGI application 8 at a time, 2,000 a round
(`submissions_in_process` here; the 'In process' table has this run's figure), each change's tree against the
previous one, alternating. The committed code took 4.0-4.3 ms of CPU a request, and more with more requests in
flight (2.9-3.6 ms one at a time, 4.1-4.5 ms eight at a time): a request crossed to the thread pool and back seven
times (the session's set-up and tear-down, the settings, the token, the project, the endpoint), each crossing a
hand-over of the GIL between threads. yappi (CPU clock, every thread) put the rest in: the token and the project
as two ORM queries (19%), the job's savepoint and ORM flush (11%), FastAPI's form handling (10%: Starlette's
multipart parser, then FastAPI's extraction of each field, which re-derives its annotation on every request), the
testbed's ORM lookup (8%), the Redis publish (12%, a third of it kombu building a new `redis.Redis` client for
every message) and the suite's TOML validation (4%). Changes, with the CPU a request after each: kombu's Redis
channel publishes through one client it keeps (3.9-4.0 ms); the token and the project come from one query as
plain columns, a valid suite file's validation is remembered (CI sends the same one again and again) (3.1 ms);
the endpoint written out: the form parsed on the event loop and checked with a pydantic model (the same 422
wording, the token still checked before the form), everything that blocks in one hop to the pool, the testbed's
id remembered once read from a committed row (2.0-2.2 ms, and no longer growing with requests in flight: 1.4 ms
one at a time, 2.1 ms 32 at a time); the job inserted by one `INSERT ... ON CONFLICT DO NOTHING RETURNING id` on
the Idempotency-Key (no savepoint, no flush, no lookup of the key first; a retry that lost the race reads the
winner's row), and the statements every request runs built once and executed with parameters (coercing the
job's 27 values into a new statement cost as much as executing it) (1.7-1.8 ms). On the way: two first uses of
one new testbed at once made one request fail on the unique name; a testbed is now inserted with `ON CONFLICT
DO NOTHING` (tests/server/test_load_paths.py races two submissions). Last, uvicorn's C HTTP parser and event
loop (httptools, uvloop; now in the server extra, and uvicorn takes them when installed). The same job levels
on the seeded database, one server process, before and after on this host: p99 latency and the server's CPU
(`/proc`) a request, or the rate achieved past saturation:

| code, at offered /s | 100 | 200 | 300 | 400 | 500 | 600 |
|---|---|---|---|---|---|---|
| committed before this round | 9.2, 4.7 ms | 194/s, p99 349 ms | 190/s | | | |
| this round, no httptools, uvloop | 5.1, 2.0 ms | 4.2, 1.6 ms | 6.4, 1.6 ms | 7.3, 1.4 ms | 79, 1.6 ms | 421/s |
| this round, with them | | | | | 28, 1.3 ms | 525/s |

What is left in a request (yappi, the final code): the token-and-project query with the pool's checkout and
pre-ping (~18%), the publish (~14%), the job's INSERT (~14%), the multipart parse (~13%), FastAPI's path and
header parameters (~8%), the commit (~6%); the rest is the event loop, the middlewares and the hop to the pool.

**The load generator was the bottleneck at first (fixed in the benchmark).** An httpx `AsyncClient` with one task
per request used more CPU than the server once requests queued (3.7 s of CPU for 300 requests at 100/s offered);
it now sends prepared requests over 64 keep-alive connections (wrk2's model) and uses under 0.1 core.

**Result upload.** First round: 2.2 s per 100-case upload in process (500-run database, one baseline run). cProfile:
inserting the ~22,000 sample rows through the ORM's bulk path took 1.7 s; baseline selection, the noise floor and
the change-point history loaded every candidate run's whole document to use their ids; `json.dumps`/`json.loads` of
a 1.3 MB document took 49/31 ms. Changes then: samples by binary COPY, kernels through Core, the document column
deferred where only ids are needed, JSON through pydantic-core, the upload's validated document handed to the
comparison, the last 8 baseline documents kept by run id. What remained then: `compare` 0.37-0.5 s, the sample COPY
0.17-0.25 s (~0.11 s of it the foreign-key check of each row), the run's 1.3 MB JSONB ~0.07 s. This round: (1)
samples are one `float8[]` row per case (`case_samples`, migration 0003, which carries existing samples up and down,
on Postgres and SQLite), written with one binary COPY: 100 rows and 100 foreign-key checks instead of ~22,000; in
process the sample write took ~2 ms of CPU and ~15 ms of wall time at a load average of 7. (2) `compare`
(attnprof/core/analysis `stats.py`, `compare.py`), with the same numbers to the last bit (the comparison documents
of this benchmark's inputs were compared field by field before and after): the bootstrap median's distribution
depends on the sample count alone and is computed once per count (scipy's `binom.sf` cost ~0.2 ms a call, 400 calls
an upload); the Student t tail goes through `scipy.special.stdtr`, which is what `scipy.stats.t.sf` calls, without
its ~0.2 ms of argument handling; the draws of all of a case's runs come from one generator call (`draw_runs`: the
stream is consumed in the same order, so the draws are the same); `np.quantile` and `np.median` are replaced by
partitions with their exact arithmetic; each baseline's cases are looked up in a dict instead of a scan per case.
Measured in process on the 100-case document with 3 baseline runs, the committed code (`git archive HEAD`) and the
changed one alternating: 278 and 257 ms of CPU before, 160 and 152 ms after (load average ~3); the 'In process'
table has the figure of this run. What is left in `compare`: the bootstrap's inverse-CDF lookups (~25%), the kernel
comparison (`kernels.py`, ~20%), per-case statistics and the findings' models. A whole upload in process is ~0.3 s
of CPU; over HTTP its latency on the shared machine was dominated by waiting for a core (the load averages above).

**Query plans (fixed).** Before, on the seeded database: a trend without a testbed ran a parallel sequential scan
of `run_cases` (43.7 ms: `ix_run_cases_trend` leads with the testbed); the per-kernel trend sorted every row of
the case (46-64 ms: Postgres took the kernel key to be as rare within the case as in the whole table, expected a
hundred rows and skipped the index order); the default-branch history of a testbed key (noise floor, baseline
fallback, change points) scanned `runs` (4.7 ms, growing with the table: `ix_runs_history` is by testbed id, the
queries by testbed key). Migration `0002` adds `ix_run_cases_trend_all_testbeds` (project, branch, case, created_at)
and `ix_runs_key_history` (project, testbed key, branch, created_at); the kernel trend's kernels are a lateral
subquery behind `OFFSET 0`, so the planner walks the case's rows in index order and stops at the page. After:
0.9 ms, 2.5 ms and 0.07 ms (the plans below).

**Trend latency is the request path's.** The statements take 1-6 ms; the rest of a trend request is the
server's CPU on a shared machine. Two changes were tried and measured like job creation's (both servers on this
machine, 100 case and kernel trends alternating, 6-12 rounds): writing the JSON straight from the rows instead of
pydantic models validated again by FastAPI, and building each trend statement once with bound parameters, with
the token and project checked by one Core statement. Server CPU a query, committed code against the changed one:
5.68 against 5.87, 5.31 against 5.44 and 7.25 against 6.98 ms: no difference beyond the noise, so neither was
kept. At quiet moments the kernel trend's p95 was 27-31 ms in the first round; the figures above were taken with
the machine shared (their load averages are given).
"""


def plot(sweeps: dict[int, list[dict[str, Any]]], path: Path) -> bool:
    """Latency (p50, p99) and achieved rate against offered load, one colour per number of server processes."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (workers, rows), colour in zip(sweeps.items(), ("tab:blue", "tab:orange", "tab:purple"), strict=False):
        offered = [r["offered_rps"] for r in rows]
        name = f"{workers} server process{'es' if workers > 1 else ''}"
        ax.plot(offered, [r["p50_ms"] for r in rows], "o-", color=colour, label=f"p50, {name}")
        ax.plot(offered, [r["p99_ms"] for r in rows], "s--", color=colour, label=f"p99, {name}")
        ax2.plot(offered, [r["achieved_rps"] for r in rows], "^-", color=colour, label=name)
    ax.axhline(TARGETS["job_p99_ms_at_200"], color="grey", ls=":", lw=1, label="target: p99 50 ms at 200/s")
    ax.axvline(200, color="grey", ls=":", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("offered load, job creations per second (open loop)")
    ax.set_ylabel("latency from due time, ms (log)")
    ax.legend(fontsize=7)
    top = max(r["offered_rps"] for rows in sweeps.values() for r in rows)
    ax2.plot([0, top], [0, top], color="grey", ls=":", lw=1, label="achieved = offered")
    ax2.set_xlabel("offered load, per second")
    ax2.set_ylabel("achieved, jobs per second")
    ax2.legend(fontsize=7)
    fig.suptitle("POST /jobs on loopback; 2 cores shared by the server, Postgres, Redis and the generator", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def write_report(r: dict[str, Any], path: Path) -> None:
    seeded: dict[str, Any] = r["seeded"]
    lines = [
        "# Service load benchmark",
        "",
        f"Date: {r['date']}. Command: `{r['command']}` ({r['wall_s'] / 60:.0f} min in all).",
        "",
        f"Machine: {r['machine']['cores']} cores ({r['machine']['cpu']}), {r['machine']['memory']}; the load generator "
        "(asyncio, one process), `attnprof serve` (one uvicorn process, and two for comparison), Postgres and "
        "Redis all share these "
        "2 cores, so every figure below includes the generator's own CPU use; the CPU seconds of each are measured "
        "per load level. Versions: " + ", ".join(f"{k} {v}" for k, v in r["versions"].items()) + ".",
        "",
        (
            "Quiet machine: the measurements started when the 1-minute load average was "
            f"{r['quiet']['load_1min']:.2f} (waited {r['quiet']['waited_s']:.0f} s; limit 1.5, polled every 20 s)"
            if "quiet" in r["quiet"]
            else "Not waited for a quiet machine (`--no-wait`): the measurements started when the 1-minute load "
            f"average was {r['quiet']['load_1min']:.2f}, on 2 cores"
        )
        + "; load averages at each phase: "
        + ", ".join(f"{k} {v:.2f}" for k, v in r["loads"].items())
        + ".",
        "",
        "## Targets",
        "",
        "| target | measured | |",
        "|---|---|---|",
    ]
    for workers in r["workers"]:
        job200 = next((lv for lv in r["jobs"][str(workers)] if lv["offered_rps"] == 200), None)
        if job200:
            per_request_ms = job200["cpu_s"]["server"] * 1000 / max(1, job200["ok"])
            lines.append(
                f"| job creation p99 <= 50 ms at 200 requests/s (`attnprof serve --workers {workers}`) | "
                f"p99 {job200['p99_ms']:.1f} ms (p50 {job200['p50_ms']:.1f} ms, achieved "
                f"{job200['achieved_rps']:.0f}/s, {job200['errors']} errors; server CPU {per_request_ms:.1f} ms a "
                f"request; load {job200.get('load_1min', 0):.1f}) "
                f"| {_met(job200['p99_ms'] <= TARGETS['job_p99_ms_at_200'] and job200['errors'] == 0)} |"
            )
    t, k = r["trends"]["all case trends"], r["trends"]["kernel"]
    lines += [
        f"| trend query p95 <= 50 ms: a case's trend | p95 {t['p95']:.1f} ms over {t['n']} queries "
        f"(p50 {t['p50']:.1f} ms) | {_met(t['p95'] <= TARGETS['trend_p95_ms'])} |",
        f"| trend query p95 <= 50 ms: a kernel's trend | p95 {k['p95']:.1f} ms over {k['n']} queries "
        f"(p50 {k['p50']:.1f} ms; server CPU {k.get('cpu_ms', float('nan')):.1f} ms a query) "
        f"| {_met(k['p95'] <= TARGETS['trend_p95_ms'])} |",
    ]
    u = summary_ms(r["uploads"]["feature_s"])
    lines += [
        f"| 100-case upload with its comparison <= 500 ms | p95 {u['p95']:.0f} ms over {u['n']} uploads "
        f"(p50 {u['p50']:.0f} ms; server CPU {r['uploads'].get('feature_cpu_s', float('nan')) * 1000:.0f} ms an "
        f"upload) | {_met(u['p95'] <= TARGETS['upload_p95_ms'])} |",
        "",
        "Latencies depend on what else ran on the shared cores (the load averages above and in the tables); the "
        "server's CPU time per request (`/proc/<pid>/stat`, user + system, over the level or phase, divided by "
        "the requests answered) is much less disturbed, and is the figure to compare between runs.",
        "",
        "## The seeded database",
        "",
        f"`bench/service_seed.py`: {seeded['runs']:,} runs, {seeded['run_cases']:,} case rows, "
        f"{seeded['run_kernels']:,} kernel rows, {seeded['samples']:,} samples (one array a case), and every run's "
        "result document "
        f"({seeded['document_bytes'] / 1e6:.0f} MB of JSON in all) in one project, on {len(seeded['testbeds'])} "
        f"testbeds ({', '.join(seeded['testbeds'])}) and {len(seeded['branches'])} branches "
        f"({', '.join(seeded['branches'])}), {len(seeded['case_ids'])} cases a run taken from the real H200 run with "
        f"their kernels, {seeded['samples'] // max(1, seeded['run_cases'])} samples a case, over a year. "
        f"The issue asks for 1,000,000 samples; 10 cases of 100 samples in each of 10,000 runs make ten times "
        f"that, which is what was seeded (`--samples-per-case 10` gives exactly 1,000,000). Since migration 0003 "
        f"a case's samples are one row (`case_samples`, a float8 array), not a row each.",
        "",
        "Seeding took "
        + ", ".join(f"{k} {v:.1f} s" for k, v in seeded["seconds"].items())
        + " (COPY through the service's tables; foreign-key triggers off during the copy).",
        "",
        "## Job creation (POST /api/v1/projects/{p}/jobs)",
        "",
        "Open loop: requests fall due at the offered rate whatever the answers do, each level "
        f"{r['job_duration_s']:.0f} s, and go out over 64 keep-alive connections (wrk2's model: a request due "
        "while all 64 are busy waits for one); a latency runs from the moment the request was due to its answer, "
        "so time spent waiting in the generator or in front of the server counts. Each request is a multipart body "
        "(a suite file and the job's fields) with an Idempotency-Key of its own, as `attnprof submit` sends it; the "
        "job row is committed, then `profile.run` is sent to Redis "
        f"(`{REDIS}`, queue `profile.{TESTBED}`). 'lag' is how late the generator sent (p99); CPU is the share of "
        "one core used during the level by the server, the generator, and the rest of the machine (Postgres, "
        "Redis and anything else running; the machine has 2); 'load' is the 1-minute load average at the level's "
        "end. Postgres and Redis take 0.1-0.3 of a core at these rates (the quiet levels show it): a larger 'CPU "
        "rest' is other work that ran on the machine during the level, and those levels' latencies include it.",
        "",
        "| server processes | offered /s | achieved /s | ok | errors | p50 ms | p99 ms | max ms | lag p99 ms "
        "| CPU server | server CPU ms a request | CPU generator | CPU rest | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workers, levels in r["jobs"].items():
        for lv in levels:
            cpu = {k: v / r["job_duration_s"] for k, v in lv["cpu_s"].items()}
            errs = f"{lv['errors']} {lv['error_kinds']}" if lv["errors"] else "0"
            lines.append(
                f"| {workers} | {lv['offered_rps']:.0f} | {lv['achieved_rps']:.1f} | {lv['ok']} | {errs} | "
                f"{lv['p50_ms']:.1f} | {lv['p99_ms']:.1f} | {lv['max_ms']:.1f} | {lv['send_lag_p99_ms']:.1f} | "
                f"{cpu['server']:.2f} | {lv['cpu_s']['server'] * 1000 / max(1, lv['ok']):.1f} | "
                f"{cpu['generator']:.2f} | {cpu['rest']:.2f} | {lv.get('load_1min', 0):.1f} |"
            )
    lines += ["", f"![latency against offered load]({PLOT.name})", ""]
    up = r["uploads"]
    lines += [
        "## Result upload (POST /api/v1/projects/{p}/results) with its comparison",
        "",
        f"A {CASES_PER_UPLOAD}-case document ({up['bytes'] / 1e6:.1f} MB of JSON): the H200 run's 15 cases "
        "replicated under new ids, each upload with a new run id and a small jitter (every third one 5% slower, "
        "so some comparisons find regressions). Three default-branch uploads come first and serve as the baseline "
        f"({up.get('baseline_runs', 0)} runs pooled); the timed uploads are on a feature branch naming their merge "
        "base, as CI sends them; each is stored (document, cases, kernels, samples) and compared in its request. "
        "Default-branch uploads also run change-point detection over the branch's history.",
        "",
        "| uploads | n | p50 ms | p95 ms | max ms |",
        "|---|---|---|---|---|",
    ]
    for name, key in (
        ("baseline (first three, main)", "baseline_s"),
        ("feature branch, timed", "feature_s"),
        ("main, after the timed ones", "main_s"),
    ):
        s = summary_ms(up[key])
        if s["n"]:
            lines.append(f"| {name} | {s['n']} | {s['p50']:.0f} | {s['p95']:.0f} | {s['max']:.0f} |")
    verdicts = ", ".join(f"{k} {v}" for k, v in up["verdicts"].items())
    lines += ["", f"Verdicts of the timed uploads: {verdicts}.", ""]
    lines += [
        "## Trend queries (GET /api/v1/projects/{p}/trends, /trends/kernels)",
        "",
        "Closed loop, one at a time over HTTP, on the seeded history: a random case and branch, a random testbed "
        "(or none: every testbed's points in one series), without or with a random 30-day range; the per-kernel "
        "trend takes a random kernel of the case. Pages hold up to 200 points.",
        "",
        "| query | n | p50 ms | p95 ms | p99 ms | points per answer | server CPU ms a query |",
        "|---|---|---|---|---|---|---|",
    ]
    for g, s in r["trends"].items():
        if g != "all case trends":
            lines.append(
                f"| {g} | {s['n']} | {s['p50']:.1f} | {s['p95']:.1f} | {s['p99']:.1f} | {s['points_mean']:.0f} | "
                f"{s.get('cpu_ms', float('nan')):.1f} |"
            )
    ip = r.get("in_process")
    if ip:
        lines += [
            "",
            "## In process",
            "",
            "CPU time (`time.process_time`, median of 5) of the pieces behind the figures above, called in the "
            "benchmark's own process, without HTTP or a server (`in_process` in this script), at a 1-minute load "
            f"average of {ip['load_1min']:.2f}:",
            "",
            "| piece | CPU ms |",
            "|---|---|",
            f"| `compare()` of a 100-case run with 3 pooled baseline runs | {ip['compare_ms']:.0f} |",
            f"| a whole 100-case upload on the seeded database: validate, store (document, cases, kernels, "
            f"samples), select the baseline, noise floor, compare, store the comparison (rolled back) "
            f"| {ip['upload_ms']:.0f} |",
            f"| publishing one `profile.run` message to Redis (`attnprof.server.queue.enqueue_profile`) "
            f"| {ip['enqueue_ms']:.2f} |",
        ]
        if "submit_ms" in ip:
            lines.append(
                "| one job submission through the app, called as an ASGI application (no HTTP server): token and "
                "project, form, job row, commit, message; 8 at a time, median of 3 rounds of 2,000 "
                f"| {ip['submit_ms']:.2f} |"
            )
    lines += [
        "",
        "## Query plans",
        "",
        "`EXPLAIN (ANALYZE, BUFFERS)` of the statements the service's repository functions issue (captured as "
        "they run, then explained with the same parameters) on the seeded database. These are plans for the "
        "parameters shown; psycopg prepares a statement from its fifth run on a connection, after which Postgres "
        "may settle on a generic plan.",
        "",
        "| code path | indexes used |",
        "|---|---|",
    ]
    for name, text in r["plans"].items():
        parts = text.split("\n\n-----\n\n")
        used = [", ".join(f"`{i}`" for i in indexes_used(p)) or "none (primary key or sequential)" for p in parts]
        lines.append(f"| {name} | {'; '.join(used)} |")
    lines += ["", r.get("plan_notes", ""), ""]
    for name, text in r["plans"].items():
        lines += [f"<details><summary>{name}</summary>", "", "```", text, "```", "", "</details>", ""]
    if FINDINGS:
        lines += ["## What profiling found, and what changed", "", FINDINGS.strip(), ""]
    path.write_text("\n".join(lines) + "\n")


# --- main ---------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg", default=seeding.PG_ADMIN)
    ap.add_argument("--database", default="attnprof_bench")
    ap.add_argument("--reuse", action="store_true", help="measure on the database a previous --keep run left")
    ap.add_argument("--keep", action="store_true", help="leave the seeded database for a later --reuse")
    ap.add_argument("--quick", action="store_true", help="a smoke run: small seed, short levels")
    ap.add_argument("--rates", default="25,50,75,100,150,200,300,400,500,600")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per load level")
    ap.add_argument("--uploads", type=int, default=30)
    ap.add_argument("--main-uploads", type=int, default=10)
    ap.add_argument("--queries", type=int, default=400, help="trend queries (a quarter per kind)")
    ap.add_argument(
        "--workers",
        default="1,2",
        help="attnprof serve --workers for each job-creation sweep (the first one: uploads, trends)",
    )
    ap.add_argument("--no-wait", action="store_true", help="do not wait for a quiet machine")
    ap.add_argument("--report", type=Path, default=REPORT)
    ap.add_argument("--rewrite", action="store_true", help="only write the report again from the last run's figures")
    args = ap.parse_args()
    if args.quick:
        named = None if args.report == REPORT else args.report
        (args.report,) = quick.place(ap, "service-load", (named, "service-load.md"))
    kept = Path(f"/tmp/{args.database}-results.json")
    if args.rewrite:
        results = json.loads(kept.read_text())
        plot({int(n): rows for n, rows in results["jobs"].items()}, PLOT)
        write_report(results, args.report)
        return
    started = time.perf_counter()
    info = Path(f"/tmp/{args.database}.json")
    if args.quick:
        args.rates, args.duration, args.uploads, args.main_uploads, args.queries = "25,100", 3.0, 3, 1, 40
    if args.reuse:
        seeded = seeding.Seeded(**json.loads(info.read_text()))
        from attnprof.server import migrate

        migrate.upgrade(seeded.url)  # a database seeded before a new migration
    else:
        print("seeding ...", flush=True)
        seeded = seeding.seed(admin=args.pg, database=args.database, runs=500 if args.quick else 10_000)
        info.write_text(seeded.to_json())
    print(f"seeded: {seeded.seconds}", flush=True)
    subprocess.run(["redis-cli", "-u", REDIS, "FLUSHDB"], check=True, capture_output=True)
    quiet = {"load_1min": loadavg(), "waited_s": 0.0} if args.no_wait else wait_quiet()
    loads: dict[str, float] = {}
    rates = [float(x) for x in args.rates.split(",")]
    workers = [int(x) for x in args.workers.split(",")]
    sweeps: dict[int, list[Level]] = {}
    for i, n in enumerate(workers):
        if i and not args.no_wait:
            wait_quiet()
        loads[f"jobs, {n} server process(es)"] = loadavg()
        server = Server.start(seeded.url, workers=n)
        try:
            sweeps[n] = job_levels(server, seeded.admin_token, seeded.project, rates, args.duration)
        finally:
            server.stop()
    server = Server.start(seeded.url, workers=workers[0])
    try:
        if not args.no_wait:
            wait_quiet()
        loads["uploads"] = loadavg()
        up = uploads(server, seeded.admin_token, seeded.project, args.uploads, args.main_uploads)
        loads["uploads, at the end of the timed ones"] = up["feature_load_1min"]
        if not args.no_wait:
            wait_quiet()  # the uploads' own load, and whatever else ran meanwhile
        loads["trends"] = loadavg()
        tr = trends(server, seeded.admin_token, seeded, args.queries)
        loads["trends, at their end"] = loadavg()
    finally:
        server.stop()
        subprocess.run(["redis-cli", "-u", REDIS, "FLUSHDB"], capture_output=True)
    loads["in process"] = loadavg()
    inproc = in_process(seeded)
    loads["plans"] = loadavg()
    pl = plans(seeded)
    results = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m bench.service_load " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "versions": versions(args.pg),
        "quiet": quiet,
        "loads": loads,
        "seeded": seeded.__dict__ | {"admin_token": "(not kept)"},
        "job_duration_s": args.duration,
        "workers": workers,
        "jobs": {str(n): [lv.row() for lv in levels] for n, levels in sweeps.items()},
        "uploads": up,
        "trends": tr,
        "in_process": inproc,
        "plans": pl,
        "wall_s": time.perf_counter() - started,
    }
    kept.write_text(json.dumps(results, indent=2, default=str))
    plot(
        {n: [lv.row() for lv in levels] for n, levels in sweeps.items()},
        PLOT if args.report == REPORT else args.report.with_suffix(".png"),
    )
    write_report(results, args.report)
    print(f"wrote {args.report}", flush=True)
    if not args.keep:
        seeding.drop_database(args.pg, args.database)


if __name__ == "__main__":
    main()
