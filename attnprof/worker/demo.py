"""``attnprof demo`` (``make demo``): the whole flow on one machine, with nothing to install beyond the package.

The embedded default (docs/architecture.md, "One machine: the embedded default"): SQLite for the database and
kombu's ``filesystem://`` transport for the broker, so no Postgres and no Redis. Three real processes, as in a
deployment: the service (uvicorn), the analysis worker with beat (the sweeper), and one profile worker
(``--pool=solo``) on the CPU testbed ``demo-cpu``. Then a demo project (``examples/demo/project``, a custom attention
and a built-in SDPA case) is submitted twice with ``attnprof submit --wait``, the command a CI step runs:

1. as it is, on ``main``: the first run of all passes and becomes the history;
2. with the planted regression (``examples/demo/regressed``): the project's attention rewritten as plain
   matmul/mask/softmax/matmul ops instead of SDPA's fused kernel. The backend that runs changes from
   ``cpu_flash`` to ``eager``: a ``backend`` finding that fails whatever the timing noise of a shared CPU.

One caveat on a busy machine: the profiler marks a CPU run ``suspect`` when the load average exceeds the
cores, and a suspect run never fails (docs/architecture.md, "Deciding a regression"): the verdict is then ``warn``,
the comparison says why, and the backend finding still names the regression. The demo checks for the finding, not
the word ``fail``.

It then keeps serving, URL printed, until interrupted; ``--once`` stops after the verdicts (exit 0 when the
first job passed and the second one named the regression, 1 otherwise).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from attnprof.contract.links import Links
from attnprof.worker.profile import sandbox

TESTBED = "demo-cpu"
PROJECT = "demo"
REGRESSED_CASE = "my-attention"
JOB_TIMEOUT_S = 600.0


def _say(text: str) -> None:
    print(text, flush=True)


def find_examples() -> Path:
    """``examples/demo`` of the checkout (from the working directory, else beside the installed package)."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        found = base / "examples" / "demo"
        if (found / "project" / "attnprof.toml").is_file():
            return found
    raise FileNotFoundError("examples/demo not found: run the demo from a checkout of attnprof")


def _free_port(preferred: int) -> int:
    for port in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError("no free TCP port")


def attnprof_command() -> list[str]:
    """How to run the ``attnprof`` console script of this interpreter."""
    script = Path(sys.executable).parent / "attnprof"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from attnprof.cli import main; sys.argv[0] = 'attnprof'; main()"]


@dataclass(frozen=True)
class DemoEnv:
    workdir: Path
    url: str
    env: dict[str, str]
    submit_token: str


def prepare(workdir: Path, port: int) -> DemoEnv:
    """A fresh SQLite database and message folder under ``workdir``, migrated, with the demo project, a submit
    token and a worker token. The peaks cache (``workdir/cache``) is kept between demos."""
    from attnprof.server import migrate
    from attnprof.server.auth import service as auth
    from attnprof.server.db import make_engine, make_sessionmaker
    from attnprof.server.projects import service as projects
    from attnprof.server.testbeds import service as testbeds

    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("attnprof.db", "attnprof.db-wal", "attnprof.db-shm", "queue", "logs", "src", "beat-schedule"):
        path = workdir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    (workdir / "logs").mkdir()
    database_url = f"sqlite:///{workdir / 'attnprof.db'}"
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    with make_sessionmaker(engine)() as session:
        project = projects.create(session, name=PROJECT)
        submit = auth.create_project_token(session, project_id=project.id, role="submit", name="demo")[1]
        testbed = testbeds.ensure(session, TESTBED)
        worker = auth.create_worker_token(session, testbed_id=testbed.id, name="demo")[1]
        session.commit()
    engine.dispose()
    url = f"http://127.0.0.1:{port}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ATTNPROF_")},
        "ATTNPROF_DATABASE_URL": database_url,
        "ATTNPROF_BROKER_URL": "filesystem://",
        "ATTNPROF_BROKER_FOLDER": str(workdir / "queue"),
        "ATTNPROF_PUBLIC_URL": url,
        "ATTNPROF_SERVICE_URL": url,
        "ATTNPROF_WORKER_TOKEN": worker,
        "ATTNPROF_WORKER__CACHE_DIR": str(workdir / "cache"),
        "ATTNPROF_WORKER__HEARTBEAT_S": "2",
        "ATTNPROF_SWEEP__INTERVAL_S": "5",
        **_jail_setting(workdir),
    }
    return DemoEnv(workdir=workdir, url=url, env=env, submit_token=submit)


def _jail_setting(workdir: Path) -> dict[str, str]:
    """Jobs run in the jail and the cgroup a real worker uses; only where neither can be built here does the demo's
    worker run them without (the trusted single-tenant setting), and the demo says so."""
    from attnprof.worker.profile.cgroup import Cgroups, CgroupUnavailable
    from attnprof.worker.profile.jail import Jail, JailUnavailable

    try:
        Jail.build().self_test(workdir / "scratch")
    except JailUnavailable as exc:
        _say(f"NOTE: no jail can be built on this machine ({exc}).")
        _say("  The demo's worker runs its two jobs WITHOUT a sandbox (ATTNPROF_WORKER__TRUSTED_SINGLE_TENANT=true);")
        _say("  a real worker refuses to start like this. `apt-get install bubblewrap` gives the demo its jail.")
        return {"ATTNPROF_WORKER__TRUSTED_SINGLE_TENANT": "true"}
    try:
        Cgroups.find(os.environ.get("ATTNPROF_WORKER__CGROUP_PARENT", "")).self_test()
    except (CgroupUnavailable, OSError) as exc:
        _say(f"NOTE: no cgroup can be made for a job here ({exc}).")
        _say("  The demo's jobs are bounded by the watchdog alone (ATTNPROF_WORKER__TRUSTED_SINGLE_TENANT=true); a")
        _say("  real worker shared by tenants refuses to start like this (run it as root, or delegate a cgroup).")
        _say("  jobs run in a bubblewrap jail (their own PID and network namespaces, an unprivileged uid)")
        return {"ATTNPROF_WORKER__TRUSTED_SINGLE_TENANT": "true"}
    _say("  jobs run in a bubblewrap jail (their own PID and network namespaces, an unprivileged uid) and a cgroup")
    return {}


@contextmanager
def processes(demo: DemoEnv, port: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The service, the analysis worker (with beat) and the profile worker, stopped on the way out."""
    cmd = attnprof_command()
    specs = [
        ("service", [*cmd, "serve", "--port", str(port)]),
        ("analysis-worker", [*cmd, "worker", "--analysis", "--beat-schedule", str(demo.workdir / "beat-schedule")]),
        ("profile-worker", [*cmd, "worker", "--testbed", TESTBED, "--device", "cpu"]),
    ]
    started: list[subprocess.Popen[bytes]] = []
    try:
        for name, argv in specs:
            log = (demo.workdir / "logs" / f"{name}.log").open("wb")
            # Started so that they die with the demo even if it is killed outright: no orphan keeps serving.
            argv = sandbox.die_with_parent(argv)
            started.append(subprocess.Popen(argv, env=demo.env, cwd=demo.workdir, stdout=log, stderr=subprocess.STDOUT))
            log.close()
            if name == "service":
                _wait_healthy(demo.url, started[-1])
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in started:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited with code {proc.returncode} (see its log)")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the service did not answer at {url} within {timeout_s:.0f} s")


def submit(demo: DemoEnv, source: Path, commit: str) -> tuple[int, str | None]:
    """``attnprof submit --wait`` of ``source`` on ``main`` (its output shown as it comes); (exit code, job id)."""
    argv = [
        *attnprof_command(),
        "submit",
        str(source / "attnprof.toml"),
        "--source",
        str(source),
        "--testbed",
        TESTBED,
        "--branch",
        "main",
        "--commit",
        commit,
        "--wait",
        "--timeout",
        str(int(JOB_TIMEOUT_S)),
    ]
    env = {**demo.env, "ATTNPROF_SERVER": demo.url, "ATTNPROF_TOKEN": demo.submit_token}
    _say(
        f"$ attnprof submit {source.name}/attnprof.toml --source {source.name} --testbed {TESTBED} "
        f"--branch main --commit {commit} --wait"
    )
    done = subprocess.run(argv, env=env, cwd=demo.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = done.stdout
    _say("\n".join("  " + line for line in output.rstrip().splitlines()))
    job_id = None
    for line in output.splitlines():
        if line.startswith("job ") and ":" in line:
            job_id = line.split()[1].rstrip(":")
    return done.returncode, job_id


def _comparison(demo: DemoEnv, job_id: str) -> dict[str, Any] | None:
    headers = {"Authorization": f"Bearer {demo.submit_token}"}
    r = httpx.get(Links(demo.url).api_job_comparison(job_id), headers=headers, timeout=30)
    return r.json() if r.status_code == 200 else None


def named_regression(comparison: dict[str, Any] | None) -> str | None:
    """The planted regression as the comparison names it (a regressed backend finding on the case), or None."""
    if comparison is None:
        return None
    for f in comparison.get("document", {}).get("findings", []):
        if f.get("case") == REGRESSED_CASE and f.get("metric") == "backend" and f.get("status") == "regressed":
            return f"{f['case']}: {f.get('detail') or f.get('metric')}"
    return None


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_demo(*, workdir: Path, port: int, once: bool) -> int:
    # SIGTERM and SIGHUP stop the demo as Ctrl-C does: the service and the workers are stopped on the way out.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    examples = find_examples()
    workdir = workdir.resolve()
    port = _free_port(port)
    demo = prepare(workdir, port)
    _say(f"attnprof demo: service at {demo.url}")
    _say(f"  database {workdir / 'attnprof.db'} (SQLite), broker folder {workdir / 'queue'}, logs {workdir / 'logs'}")
    src = workdir / "src" / "demo-project"
    shutil.copytree(examples / "project", src)
    ok = True
    try:
        with processes(demo, port) as running:
            _say("\n[1/2] the demo project as it is (the first run of main: it becomes the history)")
            first_code, _ = submit(demo, src, "demo0001")
            ok = first_code == 0
            _say("\n[2/2] the same project with a regression: demo_attn/attention.py rewritten as plain tensor ops")
            shutil.copytree(examples / "regressed", src, dirs_exist_ok=True)
            second_code, job_id = submit(demo, src, "demo0002")
            named = named_regression(_comparison(demo, job_id)) if job_id else None
            if named:
                _say(f"\nthe planted regression, as the comparison names it: {named}")
                if second_code == 0:
                    _say("  (the verdict is warn, not fail: the run was marked suspect, see the notes above)")
            else:
                _say(f"\nthe planted regression was NOT named (exit code {second_code}): see the logs")
            ok = ok and named is not None and second_code in (0, 1)
            if once:
                # the service stops as this returns: a link to it would lead nowhere
                _say("\n--once: the service and the workers stop now, so the links above will not open;")
                _say("  `attnprof demo` without --once (what `make demo` runs) keeps serving them until Ctrl-C.")
                return 0 if ok else 1
            if job_id:
                page = Links(demo.url).ui_job(PROJECT, job_id)
                _say(f"  in the dashboard: {page} (sign in with the submit token)")
            _say(f"\nserving at {demo.url} (docs: {demo.url}/docs); Ctrl-C stops the service and the workers.")
            _say(f"  dashboard: {Links(demo.url).ui_home()} (sign in with the submit token)")
            _say(f"  submit token: {demo.submit_token}")
            _say(
                f"  try: attnprof submit {src}/attnprof.toml --source {src} --server {demo.url} "
                f"--token {demo.submit_token} --testbed {TESTBED} --branch main --commit mine --wait"
            )
            while all(p.poll() is None for p in running):
                time.sleep(1)
            _say("a process of the demo stopped: see the logs in " + str(workdir / "logs"))
            return 1
    except KeyboardInterrupt:
        _say("\nstopped")
        return 0 if ok else 1
