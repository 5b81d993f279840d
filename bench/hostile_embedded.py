"""A hostile job and then another project's honest one through the whole stack in the embedded mode (SQLite, the
folder broker, `attnprof serve`, the analysis worker, one profile worker in its jail): on a GPU host, with the GPU
passed into the jail (bench/jail_h200.sh runs it there); on a CPU host with --device cpu.

    python3 bench/hostile_embedded.py --device cuda --testbed h200 --out DIR

Writes DIR/hostile.json: each attack's outcome (every one must be refused), whether the daemon the job left
survived it, and the honest job's status, verdict and cases. Exit 0 when every wall held.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[0:0] = [str(ROOT / "bench"), str(ROOT)]

import httpx  # noqa: E402
import pipeline_load as pipeline  # noqa: E402

from tests.hostile_code import ATTACKS, HOSTILE, VICTIM, attack_args, daemons_alive, findings, leaked  # noqa: E402
from tests.profiling_support import tar_gz  # noqa: E402

TIMING = "[suite.timing]\nwarmup = 2\nmin_samples = 5\nmax_samples = 20\nbudget_s = 0.2\n"


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
    from service.auth import service as auth
    from service.db import make_engine, make_sessionmaker
    from service.projects import service as projects

    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            project = projects.create(session, name="next-tenant")
            token = auth.create_project_token(session, project_id=project.id, role="submit", name="bench")[1]
            session.commit()
            return project.name, token
    finally:
        engine.dispose()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--testbed", default="h200")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "out/hostile"))
    p.add_argument("--timeout-s", type=float, default=300)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="attnprof-hostile-"))
    args = argparse.Namespace(
        embedded=True, device=a.device, testbed=a.testbed, cache_dir=workdir / "cache", threads=0, pass_env=[],
        profile_workers=1,
    )  # fmt: skip
    canary = Path.home() / f".attnprof-canary-{os.getpid()}"
    canary.write_text("the worker's secret")
    result: dict[str, Any] = {"device": a.device, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
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
            honest = (
                '[[cases]]\nname = "mine"\ntarget = "honest.kern:make_case"\nq_heads = 8\nseq_q = 1024\n'
                'head_dim = 64\ndtype = "' + ("bf16" if a.device == "cuda" else "fp32") + '"\n'
            )
            project, token = _second_project(stack.env["ATTNPROF_DATABASE_URL"])
            with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as other:
                r = other.post(
                    f"/api/v1/projects/{project}/jobs",
                    data={"testbed": a.testbed, "branch": "main", "commit": "honest01"},
                    files={
                        "spec": ("attnprof.toml", _spec("victim", honest).encode()),
                        "bundle": ("b.tgz", tar_gz(VICTIM)),
                    },
                )
                r.raise_for_status()
                job = _wait(other, r.json()["id"], a.timeout_s)
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
    finally:
        canary.unlink()
    held = (
        result.get("hostile", {}).get("findings") is not None
        and set(result["hostile"]["findings"]) == set(ATTACKS)
        and not result["hostile"]["leaked"]
        and not result.get("daemons_alive_after")
        and result.get("victim", {}).get("status") == "done"
    )
    result["every_wall_held"] = held
    (a.out / "hostile.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main())
