"""The action and the client as users get them, installed from the registries into clean virtual environments
(these tests need PyPI, as a runner does; each install takes ~30 s):

- the composite action's own steps, run as GitHub's runner runs them, from a copy of the repository (as GitHub
  downloads an action) with Debian's system Python (PEP 668: pip refuses to install into it), in a workspace
  that has packages of its own named ``service``, ``worker`` and ``core``;
- the wheel, built and installed into a fresh environment with the base dependencies only: no torch, no server
  packages, and a real ``attnprof submit`` against ``attnprof serve``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.client.actionstack import ACTION_REPO, CASE, ROOT, SPEC, Ran, Served, play_worker, run_steps, serve
from tests.server import documents as docs
from tests.server.stack import make_settings

pytestmark = pytest.mark.slow

REPO = ACTION_REPO
# What the base install must not bring: the profiler's and the server's packages.
HEAVY = ("torch", "triton", "pynvml", "fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "celery")
SHADOW = "raise ImportError('the workspace\\'s own {name} package was imported')\n"


def _python3() -> str:
    """The runner's python3: Debian's system Python where there is one (PEP 668 marks it externally managed)."""
    found = shutil.which("python3", path="/usr/bin:/bin") or shutil.which("python3")
    assert found, "no python3"
    return found


def _copy_tracked(dest: Path) -> Path:
    """The repository's tracked files as they are in the work tree: what GitHub downloads for ``uses:``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        src = ROOT / name
        if name and src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _runner_env(tmp: Path, action_repo: Path, workspace: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "TMPDIR")}
    (tmp / "runner-temp").mkdir(exist_ok=True)
    env.update(
        PATH=f"{Path(_python3()).parent}:/usr/bin:/bin",
        # The user's workflow may well put its own code on the path; the action must not pick it up.
        PYTHONPATH=str(workspace),
        RUNNER_TEMP=str(tmp / "runner-temp"),
        GITHUB_ACTION_PATH=str(action_repo / ".github/actions/attnprof"),
        GITHUB_WORKSPACE=str(workspace),
        GITHUB_REPOSITORY=REPO,
        GITHUB_STEP_SUMMARY=str(tmp / "summary.md"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return env


# Package names a user's repository commonly has at its top level; attnprof installs one top-level package,
# ``attnprof``, so none of them can shadow it or be shadowed by it.
USER_PACKAGES = ("service", "worker", "core")


def _workspace(path: Path) -> Path:
    """A user's checkout with top-level packages ``service``, ``worker`` and ``core`` that fail when imported."""
    for name in USER_PACKAGES:
        (path / name).mkdir(parents=True)
        (path / name / "__init__.py").write_text(SHADOW.format(name=name))
    (path / "perf").mkdir()
    (path / "perf/attention.toml").write_text(SPEC)
    return path


def _event(path: Path, head_repo: str) -> Path:
    head = {"ref": "feat", "sha": "h1", "repo": {"full_name": head_repo, "fork": head_repo != REPO}}
    pull = {"number": 7, "head": head, "base": {"sha": "a1", "repo": {"full_name": REPO}}}
    path.write_text(json.dumps({"pull_request": pull}))
    return path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Ran, dict[str, str]]]:
    """The action's install step (``mode: submit``), run once for the module: (its outcome, the runner's env)."""
    tmp = tmp_path_factory.mktemp("action")
    action_repo = _copy_tracked(tmp / "actions/acme/attnprof/0123abc")
    workspace = _workspace(tmp / "workspace")
    env = _runner_env(tmp, action_repo, workspace)
    ran = run_steps({"mode": "submit"}, env, workspace, only=("install",), timeout_s=480)
    assert ran.done.returncode == 0, ran.done.stdout + ran.done.stderr
    yield ran, env


def _venv_has(python: Path, modules: tuple[str, ...]) -> list[str]:
    probe = "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m)))"
    found = subprocess.run([str(python), "-I", "-c", probe, *modules], capture_output=True, text=True, check=True)
    return found.stdout.split()


def test_the_install_step_makes_a_client_environment_on_a_pep_668_python(installed) -> None:
    ran, env = installed
    bin_dir = Path(ran.steps["install"]["bin"])
    assert bin_dir == Path(env["RUNNER_TEMP"]) / "attnprof-venv/bin"
    assert (bin_dir / "attnprof").is_file()
    assert _venv_has(bin_dir / "python", HEAVY) == []
    assert _venv_has(bin_dir / "python", ("attnprof.client.action", "httpx", "scipy")) == [
        "attnprof.client.action",
        "httpx",
        "scipy",
    ]
    helped = subprocess.run([bin_dir / "attnprof", "submit", "--help"], capture_output=True, text=True, env=env)
    assert helped.returncode == 0 and "--testbed" in helped.stdout, helped.stderr
    # A server verb in the client install says what to install instead of a traceback (outside the workspace's
    # PYTHONPATH, where its own `service` would be imported by the name the user asked for).
    bare = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    argv = [bin_dir / "attnprof", "serve", "--port", "9"]
    served = subprocess.run(argv, capture_output=True, text=True, env=bare, timeout=60)
    assert served.returncode == 2, served.stdout + served.stderr
    assert (
        served.stderr.strip()
        == "error: attnprof serve needs uvicorn, which this install lacks: pip install 'attnprof[server]'"
    )


def test_an_unknown_mode_stops_the_install_step(installed, tmp_path: Path) -> None:
    _, env = installed
    ran = run_steps({"mode": "remote"}, env, tmp_path, only=("install",))
    assert ran.done.returncode == 2 and "::error::attnprof: mode must be submit or local" in ran.done.stdout


@pytest.fixture
def served(tmp_path: Path, pg_url: str) -> Iterator[Served]:
    with serve(tmp_path, pg_url) as stack:
        yield stack


def test_the_action_runs_in_a_workspace_with_its_own_service_and_worker(installed, served, pg_url, tmp_path) -> None:
    """The run step from a workspace whose ``service`` and ``worker`` fail on import (and are on PYTHONPATH): the
    job is submitted, profiled (the test plays the worker), analysed, and the step fails by its verdict."""
    ran, base_env = installed
    workspace = Path(base_env["GITHUB_WORKSPACE"])
    env = {**base_env, "GITHUB_EVENT_NAME": "pull_request", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    env["GITHUB_EVENT_PATH"] = str(_event(tmp_path / "event.json", REPO))
    settings = make_settings(
        pg_url,
        broker_url="redis://127.0.0.1:6379/13",
        public_url=served.url,
        github_api_url=served.github.url,
        github_token="test-token-1",
    )
    baseline = httpx.post(
        f"{served.url}/api/v1/projects/{served.project}/results",
        json=docs.upload_body(docs.h200(), commit="a1"),
        headers={"Authorization": f"Bearer {served.submit}"},
    )
    assert baseline.status_code == 201, baseline.text
    errors: list[BaseException] = []
    worker = threading.Thread(target=play_worker, args=(served, settings, errors))
    worker.start()
    given = {
        "server-url": served.url,
        "token": served.submit,
        "suite": "perf/attention.toml",
        "testbed": served.testbed,
        "timeout-minutes": "1",
    }
    out = run_steps(given, env, workspace, only=("run",), earlier=ran.steps, timeout_s=120)
    worker.join(timeout=60)
    printed = out.done.stdout + out.done.stderr
    assert not errors, (errors, printed)
    assert "the workspace's own" not in printed and "ModuleNotFoundError" not in printed, printed
    assert out.done.returncode == 1, printed
    assert out.outputs["verdict"] == "fail" and out.outputs["job-id"], out.outputs
    assert out.outputs["report-url"] == f"{served.url}/ui/p/{served.project}/jobs/{out.outputs['job-id']}"
    assert f"`{CASE}`" in (tmp_path / "summary.md").read_text()
    assert [s["state"] for s in served.github.statuses(REPO, "h1")] == ["pending", "failure"]


def test_a_fork_pull_request_through_the_action_is_skipped(installed, tmp_path: Path) -> None:
    """GitHub gives a fork's pull request no secrets: the token input is empty. The step passes with a notice."""
    ran, base_env = installed
    env = {**base_env, "GITHUB_EVENT_NAME": "pull_request", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    env["GITHUB_EVENT_PATH"] = str(_event(tmp_path / "event.json", "someone/attn"))
    given = {"server-url": "http://127.0.0.1:9", "token": "", "suite": "perf/attention.toml", "testbed": "h200"}
    out = run_steps(given, env, Path(env["GITHUB_WORKSPACE"]), only=("run",), earlier=ran.steps, timeout_s=60)
    assert out.done.returncode == 0, out.done.stdout + out.done.stderr
    assert "::notice title=attnprof::skipped: a pull request from the fork someone/attn gets no secrets" in (
        out.done.stdout
    )
    assert out.outputs == {"job-id": "", "run-id": "", "verdict": "", "report-url": ""}
    assert "skipped" in (tmp_path / "summary.md").read_text()


def test_local_mode_installs_beside_the_runners_torch_and_profiles(
    installed, served, tmp_path: Path, peaks_cache: Path
) -> None:
    """``mode: local`` on a GPU runner whose ``python3`` is an environment with torch (here: the tests' own): the
    install step makes ``attnprof-venv-local``, which uses that torch instead of downloading one, and the run
    step profiles the suite on this CPU and uploads the result."""
    _, base_env = installed
    runner_bin = tmp_path / "runner-bin"
    runner_bin.mkdir()
    (runner_bin / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (runner_bin / "python3").chmod(0o755)
    (tmp_path / "runner-temp").mkdir()
    (tmp_path / "event.json").write_text(json.dumps({"before": "0" * 40, "after": "l1"}))
    env = {
        **base_env,
        "PATH": f"{runner_bin}:/usr/bin:/bin",
        "RUNNER_TEMP": str(tmp_path / "runner-temp"),
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_REF_NAME": "main",
        "GITHUB_EVENT_PATH": str(tmp_path / "event.json"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }
    workspace = Path(env["GITHUB_WORKSPACE"])
    (workspace / "perf/local.toml").write_text(
        '[suite]\nname = "local"\n\n[suite.timing]\nwarmup = 1\nmin_samples = 5\nmax_samples = 20\nbudget_s = 0.1\n'
        'trace_iters = 1\n\n[[cases]]\nname = "sdpa"\ntarget = "sdpa"\nbatch = 1\nq_heads = 2\nseq_q = 64\n'
        'head_dim = 32\ndtype = "fp32"\n'
    )
    given = {
        "mode": "local",
        "server-url": served.url,
        "token": served.submit,
        "suite": "perf/local.toml",
        "testbed": "gpu-runner",
        "profile-args": f"--device cpu --cache-dir {peaks_cache}",
        "timeout-minutes": "5",
    }
    out = run_steps(given, env, workspace, timeout_s=480)
    printed = out.done.stdout + out.done.stderr
    assert out.done.returncode == 0, printed
    bin_dir = Path(out.steps["install"]["bin"])
    assert bin_dir == tmp_path / "runner-temp/attnprof-venv-local/bin"
    probe = "import sysconfig, torch; print(sysconfig.get_path('purelib'), torch.__file__)"
    own = subprocess.run(
        [bin_dir / "python", "-I", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert not Path(own[0], "torch").exists() and Path(own[1]).is_relative_to(Path(sys.prefix)), own
    assert out.outputs["verdict"] == "pass" and out.outputs["run-id"], (out.outputs, printed)
    assert "**pass** on `gpu-runner`" in (tmp_path / "summary.md").read_text()


def test_the_wheel_installs_a_client_without_torch_or_the_server(served, tmp_path: Path) -> None:
    """``pip wheel`` of the repository, installed into a fresh virtual environment with its base dependencies
    from the index; then ``attnprof submit`` queues a real job on ``attnprof serve``."""
    source = _copy_tracked(tmp_path / "src")
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("attnprof-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [line for line in zf.read(meta).decode().splitlines() if line.startswith("Requires-Dist:")]
    assert {"attnprof/client/action.py", "attnprof/py.typed", "attnprof/core/__init__.py"} <= names
    # One top-level package: nothing a user's repository holds beside it can shadow it or be shadowed by it.
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"attnprof"}
    # The dashboard's templates and the migrations travel too (package data), for the [server] install.
    assert "attnprof/server/migrations/script.py.mako" in names
    assert any(n.startswith("attnprof/server/web/templates/") for n in names)
    base = [r for r in requires if "extra ==" not in r]
    assert base and not [r for r in base for heavy in HEAVY if heavy in r.lower()], base

    venv = tmp_path / "venv"
    subprocess.run([_python3(), "-I", "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "TMPDIR", "PATH")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    pip = subprocess.run(
        [venv / "bin/pip", "install", "--quiet", str(wheel)], capture_output=True, text=True, env=env, timeout=480
    )
    assert pip.returncode == 0, pip.stderr
    assert _venv_has(venv / "bin/python", HEAVY) == []
    helped = subprocess.run([venv / "bin/attnprof", "submit", "--help"], capture_output=True, text=True, env=env)
    assert helped.returncode == 0 and "--wait" in helped.stdout, helped.stderr

    # A user's project with its own top-level service, worker and core packages, on the path: a script in its root
    # uses them and calls attnprof's command line, and both work.
    project = tmp_path / "project"
    for name in USER_PACKAGES:
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text(f"OWNER = 'the project'\nNAME = {name!r}\n")
    (project / "attention.toml").write_text(SPEC)
    (project / "perf.py").write_text(
        "import subprocess, sys\n"
        "import core, service, worker\n"
        "print(*(f'{m.NAME}: {m.OWNER}' for m in (service, worker, core)), sep='\\n', flush=True)\n"
        "sys.exit(subprocess.run(sys.argv[1:]).returncode)\n"
    )
    env.update(ATTNPROF_SERVER=served.url, ATTNPROF_TOKEN=served.submit, PYTHONPATH=str(project))
    argv = [venv / "bin/python", "perf.py", venv / "bin/attnprof", "submit", "attention.toml"]
    argv += ["--testbed", served.testbed, "--json"]
    argv += ["--repo", REPO, "--branch", "main", "--commit", "c0ffee1", "--suite-path", "perf/attention.toml"]
    sent = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=project, timeout=120)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    mine = ["service: the project", "worker: the project", "core: the project"]
    assert sent.stdout.splitlines()[:3] == mine, sent.stdout
    sent.stdout = "\n".join(sent.stdout.splitlines()[3:])
    job_id = json.loads(sent.stdout)["job"]["id"]
    job = httpx.get(f"{served.url}/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {served.submit}"})
    assert job.status_code == 200, job.text
    assert (job.json()["status"], job.json()["commit"], job.json()["suite_path"]) == (
        "queued",
        "c0ffee1",
        "perf/attention.toml",
    )
