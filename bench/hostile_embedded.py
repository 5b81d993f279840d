"""Hostile jobs and then another project's honest ones through the whole stack in the embedded mode (SQLite, the
folder broker, `attnprof serve`, the analysis worker, two profile workers in their jail): on a GPU host, with the GPU
passed into the jail (bench/jail_h200.sh runs it there); on a CPU host with --device cpu.

    python3 -m bench.hostile_embedded --device cuda --testbed h200 --out DIR

Every wall, attacked from both sides (tests/hostile_code.py holds the jobs' code, as tests/worker/test_hostile_jobs.py
and tests/worker/test_hostile_handback.py run it on the CPU):

1. from inside: one job tries the worker's environment and home, the host's scratch root, /etc/shadow, Redis,
   Postgres, the service, writing /usr, and leaves a daemon behind; then another project's honest job;
2. from outside: jobs leave links, a FIFO, a hard link or a gzip bomb where the worker reads their result, or pass
   their memory (memfd, /dev/shm), output or disk limit, each followed by another project's honest job; the workers'
   peak resident memory is read before and after;
3. processes: a job holds every thread it may while another project's job runs on the other worker, as the same
   job user.

The workers run with small limits (``--memory-mib`` and the others; what they were is in the output). Writes
DIR/hostile.json: each attack's outcome and what of it did not hold (every list empty, every honest job done), and
the honest jobs' status, verdict and cases. Exit 0 when every wall held.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import pipeline_load as pipeline
from tests.hostile_code import (
    ATTACK_NAMES,
    ATTACKS,
    HOSTILE,
    PLANTED,
    TRACED_CASE,
    VICTIM,
    Walls,
    attack_args,
    attacks,
    daemons_alive,
    findings,
    job_folder,
    judge,
    leaked,
    plant_host_files,
    planted_bundle,
    threads_case,
    took_s,
)
from tests.profiling_support import tar_gz

TIMING = "[suite.timing]\nwarmup = 2\nmin_samples = 5\nmax_samples = 20\nbudget_s = 0.2\n"
GiB = 1024**3


def _spec(name: str, case: str) -> str:
    return f'[suite]\nname = "{name}"\n\n{TIMING}\n{case}'


def _wait(http: httpx.Client, job_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = http.get(f"/api/v1/jobs/{job_id}").json()
        if job["status"] in pipeline.FINAL or time.monotonic() > deadline:
            return job
        time.sleep(1)


def _second_project(database_url: str) -> tuple[str, str]:
    """Another project of the same service, with a submit token: the next tenant."""
    from attnprof.server.auth import service as auth
    from attnprof.server.db import make_engine, make_sessionmaker
    from attnprof.server.projects import service as projects

    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            project = projects.create(session, name="next-tenant")
            token = auth.create_project_token(session, project_id=project.id, role="submit", name="bench")[1]
            session.commit()
            return project.name, token
    finally:
        engine.dispose()


def _submit(http: httpx.Client, project: str, testbed: str, spec: str, commit: str, bundle: dict[str, bytes]) -> str:
    r = http.post(
        f"/api/v1/projects/{project}/jobs",
        data={"testbed": testbed, "branch": "main", "commit": commit},
        files={"spec": ("attnprof.toml", spec.encode()), "bundle": ("b.tgz", tar_gz(bundle))},
    )
    r.raise_for_status()
    return str(r.json()["id"])


def _stored(http: httpx.Client, project: str, job: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, bytes]]:
    """The run ``job`` stored (None: none) and every trace downloadable from it."""
    if not job.get("run_id"):
        return None, {}
    run: dict[str, Any] = http.get(f"/api/v1/projects/{project}/runs/{job['run_id']}").json()
    traces = {}
    for name in run.get("traces", []):
        r = http.get(f"/api/v1/projects/{project}/runs/{job['run_id']}/traces/{name}")
        traces[name] = r.content if r.status_code == 200 else b""
    return run, traces


def _peak_rss_bytes(stack: pipeline.Stack) -> dict[str, int]:
    """The peak resident memory (VmHWM) of each profile worker process, in bytes."""
    peaks = {}
    for name, proc in stack.procs.items():
        if name.startswith("profile-"):
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks[name] = int(line.split()[1]) * 1024
    return peaks


def _summary(job: dict[str, Any]) -> dict[str, Any]:
    return {"status": job.get("status"), "reason": (job.get("reason") or "")[:400], "took_s": took_s(job)}


def _from_outside(
    stack: pipeline.Stack,
    http: httpx.Client,
    other: httpx.Client,
    project: str,
    victim_spec: str,
    walls: Walls,
    names: list[str],
    run: dict[str, Any],
) -> dict[str, Any]:
    """Every attack in ``names`` and, behind each, another project's honest job, all queued at once (the two workers
    take them in turn); then each judged."""
    host = plant_host_files(stack.workdir / "host-secrets", run["document"])
    chosen = attacks(host, walls)
    forbidden = [host.secret, "ATTNPROF_", str(stack.workdir / "scratch")]
    before = _peak_rss_bytes(stack)
    queued = []
    for i, name in enumerate(names):
        spec = _spec(f"planted-{name}", chosen[name].cases)
        hostile = pipeline.submit(stack, http, spec, f"planted{i:02d}", tar_gz(planted_bundle(host)))
        victim = _submit(other, project, stack.testbed, victim_spec, f"honest{i:02d}", VICTIM)
        queued.append((name, hostile, victim))
    timeout_s = len(names) * 2 * walls.timeout_s
    out: dict[str, Any] = {}
    for name, hostile, victim in queued:
        job = _wait(http, hostile, timeout_s)
        stored, traces = _stored(http, pipeline.PROJECT, job)
        problems = judge(
            chosen[name], job, run=stored, traces=traces, forbidden=forbidden, within_s=walls.timeout_s / 2
        )
        honest = _wait(other, victim, timeout_s)
        if honest["status"] != "done":
            problems.append(f"the next tenant's job is {honest['status']}: {(honest.get('reason') or '')[:300]}")
        out[name] = {**_summary(job), "problems": problems, "next_tenant": _summary(honest)}
    after = _peak_rss_bytes(stack)
    grew = {k: after[k] - before.get(k, 0) for k in after}
    out["worker_peak_rss_growth_bytes"] = grew
    if "gzip_bomb" in out and max(grew.values(), default=0) >= GiB:
        out["gzip_bomb"]["problems"].append(f"a worker's peak resident memory grew by {max(grew.values()):,} bytes")
    return out


def _processes(
    stack: pipeline.Stack, http: httpx.Client, other: httpx.Client, project: str, victim_spec: str, walls: Walls
) -> dict[str, Any]:
    """A job that holds every thread it may, and another project's job on the other worker meanwhile."""
    hold_s = walls.timeout_s * 0.75
    crowd = pipeline.submit(
        stack,
        http,
        _spec("crowd", threads_case(count=2 * walls.max_processes, hold_s=hold_s)),
        "crowd",
        tar_gz(PLANTED),
    )
    problems: list[str] = []
    deadline = time.monotonic() + walls.timeout_s
    folder = None
    while time.monotonic() < deadline:
        folder = job_folder(stack.workdir / "scratch", crowd)
        if folder is not None and (folder / "holding").exists():
            break
        time.sleep(0.2)
    else:
        problems.append("the crowding job never held its threads")
    held = int((folder / "holding").read_text()) if folder is not None and (folder / "holding").exists() else 0
    try:
        honest = _wait(other, _submit(other, project, stack.testbed, victim_spec, "honest-crowded", VICTIM), hold_s)
        still = http.get(f"/api/v1/jobs/{crowd}").json()["status"]
    finally:
        if folder is not None:
            (folder / "release").write_text("")
    job = _wait(http, crowd, walls.timeout_s + 60)
    found = findings(job.get("reason")) or {}
    if held < 500:
        problems.append(f"the crowding job held {held} threads, not 500 or more")
    if still != "running":
        problems.append(f"the crowding job was {still} by the time the other project's job ended")
    if honest["status"] != "done":
        problems.append(f"the other project's job is {honest['status']}: {(honest.get('reason') or '')[:300]}")
    limit = f"the job reached its limit of {walls.max_processes:,} processes and threads ("
    if job["status"] != "failed" or limit not in (job.get("reason") or "") or not found.get("refused"):
        problems.append(f"the crowding job did not end at its own limit: {(job.get('reason') or '')[:300]}")
    return {**_summary(job), "threads": held, "problems": problems, "other_tenant": _summary(honest)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--testbed", default="h200")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "out/hostile"))
    p.add_argument("--timeout-s", type=float, default=300, help="how long to wait for the first hostile job")
    p.add_argument("--memory-mib", type=int, help="the workers' memory limit (default: 8192 on cuda, 2048 on cpu)")
    p.add_argument("--disk-mib", type=int, help="the workers' disk quota (default: 256 on cuda, 32 on cpu)")
    p.add_argument("--max-processes", type=int, help="processes a job may hold (default: 1024 on cuda, 600 on cpu)")
    p.add_argument(
        "--job-timeout-s", type=float, help="the workers' wall-clock limit (default: 180 on cuda, 60 on cpu)"
    )
    p.add_argument("--attacks", default=",".join(ATTACK_NAMES), help="the attacks from outside to run (comma list)")
    a = p.parse_args()
    names = [n for n in a.attacks.split(",") if n]
    unknown = sorted(set(names) - set(ATTACK_NAMES))
    if unknown:
        p.error(f"unknown attacks {unknown}: choose from {', '.join(ATTACK_NAMES)}")
    cuda = a.device == "cuda"
    walls = Walls(
        memory_mib=a.memory_mib or (8192 if cuda else 2048),
        output_mib=1,
        disk_mib=a.disk_mib or (256 if cuda else 32),
        max_processes=a.max_processes or (1024 if cuda else 600),
        timeout_s=a.job_timeout_s or (180 if cuda else 60),
    )
    os.environ.update(walls.env())  # the stack passes ATTNPROF_WORKER__* on to its profile workers
    a.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="attnprof-hostile-"))
    args = argparse.Namespace(
        embedded=True, device=a.device, testbed=a.testbed, cache_dir=workdir / "cache", threads=0, pass_env=[],
        profile_workers=2,
    )  # fmt: skip
    canary = Path.home() / f".attnprof-canary-{os.getpid()}"
    canary.write_text("the worker's secret")
    result: dict[str, Any] = {
        "device": a.device,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "walls": dataclasses.asdict(walls),
    }
    victim_spec = _spec(
        "victim",
        TRACED_CASE + '[[cases]]\nname = "mine"\ntarget = "honest.kern:make_case"\nq_heads = 8\nseq_q = 1024\n'
        'head_dim = 64\ndtype = "' + ("bf16" if cuda else "fp32") + '"\n',
    )
    try:
        with pipeline.running_stack(args, workdir) as stack, stack.http() as http:
            result["worker_log_head"] = stack.log("profile-1").read_text().splitlines()[:12]
            port = stack.url.rsplit(":", 1)[1]
            attack = attack_args(canary=canary, scratch_root=workdir / "scratch", service_port=port, redis_port=6379)
            case = '[[cases]]\nname = "attack"\ntarget = "evil.targets:attack"\n' + "".join(
                f'args.{k} = "{v}"\n' for k, v in attack.items()
            )
            hostile = pipeline.submit(stack, http, _spec("hostile", case), "hostile1", tar_gz(HOSTILE))
            job = _wait(http, hostile, a.timeout_s)
            found = findings(job.get("reason"))
            result["hostile"] = {"status": job["status"], "findings": found, "leaked": leaked(found or {})}
            time.sleep(2)
            result["daemons_alive_after"] = daemons_alive()
            project, token = _second_project(stack.env["ATTNPROF_DATABASE_URL"])
            with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as other:
                job = _wait(other, _submit(other, project, a.testbed, victim_spec, "honest01", VICTIM), a.timeout_s)
                run = other.get(f"/api/v1/projects/{project}/runs/{job['run_id']}").json() if job.get("run_id") else {}
                result["victim"] = {k: job.get(k) for k in ("status", "verdict", "reason", "attempts")}
                result["victim"]["project"] = project
                if run:
                    doc = run.get("document", {})
                    result["victim"]["suspect"] = doc.get("run", {}).get("suspect")
                    result["victim"]["cases"] = {
                        c["id"]: {"status": c["status"], "median_us": (c.get("latency_us") or {}).get("median")}
                        for c in doc.get("cases", [])
                    }
                    result["from_outside"] = _from_outside(stack, http, other, project, victim_spec, walls, names, run)
                result["processes"] = _processes(stack, http, other, project, victim_spec, walls)
    finally:
        canary.unlink()
    outside = result.get("from_outside", {})
    held = (
        result.get("hostile", {}).get("findings") is not None
        and set(result["hostile"]["findings"]) == set(ATTACKS)
        and not result["hostile"]["leaked"]
        and not result.get("daemons_alive_after")
        and result.get("victim", {}).get("status") == "done"
        and all(name in outside and not outside[name]["problems"] for name in names)
        and not result.get("processes", {}).get("problems", ["not run"])
    )
    result["every_wall_held"] = held
    (a.out / "hostile.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main())
