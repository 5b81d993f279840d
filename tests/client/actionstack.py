"""What the action's tests run: ``attnprof serve`` on the tests' Postgres with a project and tokens (``serve``), the
profile worker played for the next queued job (``play_worker``), and the composite action's steps run as GitHub's
runner runs them (``run_steps``: each ``run:`` through ``bash -eo pipefail`` with its ``env:``, the expressions
``${{ inputs.* }}`` and ``${{ steps.*.outputs.* }}`` filled in, ``$GITHUB_OUTPUT`` read back per step)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import yaml

from attnprof.server.auth import service as auth
from attnprof.server.config import Settings
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.projects import service as projects
from attnprof.server.testbeds import service as testbeds
from attnprof.worker.analysis import verdict as analysis
from tests.claiming import bearer, claim, claim_secret
from tests.server import documents as docs
from tests.server.github.fakegithub import FakeGitHub

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / ".github/actions/attnprof/action.yml"
BIN = Path(sys.executable).parent
REDIS = "redis://127.0.0.1:6379/13"
CASE = "sdpa[backend=cudnn,pass=fwd]"
SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "prefill"\ntarget = "sdpa"\nq_heads = 4\nseq_q = 128\nhead_dim = 64\n'


ACTION_REPO = "acme/attn"
"""The repository the action's tests run in (``GITHUB_REPOSITORY``), which the project may report to."""


@dataclass(frozen=True)
class Served:
    url: str
    project: str
    testbed: str
    submit: str  # the project's submit token
    worker_token: str
    github: FakeGitHub


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(tmp_path: Path, pg_url: str) -> Iterator[Served]:
    """A committed project and tokens on the tests' database, and ``attnprof serve`` on it."""
    engine = make_engine(pg_url)
    with make_sessionmaker(engine)() as session:
        project = projects.create(session, name=f"act-{os.getpid()}-{time.monotonic_ns() % 10**6}")
        projects.allow_repository(session, project_id=project.id, repo=ACTION_REPO, added_by="the tests")
        submit = auth.create_project_token(session, project_id=project.id, role="submit")[1]
        tb = testbeds.ensure(session, f"tb-act-{time.monotonic_ns() % 10**6}")
        wtok = auth.create_worker_token(session, testbed_id=tb.id)[1]
        session.commit()
        names = (project.name, tb.name)
    engine.dispose()
    with FakeGitHub() as github:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env.update(
            ATTNPROF_DATABASE_URL=pg_url,
            ATTNPROF_BROKER_URL=REDIS,
            ATTNPROF_PUBLIC_URL=f"http://127.0.0.1:{port}",
            ATTNPROF_GITHUB_API_URL=github.url,
            ATTNPROF_GITHUB_TOKEN="test-token-1",
        )
        log = (tmp_path / "serve.log").open("wb")
        proc = subprocess.Popen(
            [str(BIN / "attnprof"), "serve", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code < 500:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            yield Served(url, names[0], names[1], submit, wtok, github)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
            log.close()
            r = redis.Redis.from_url(REDIS)
            r.flushdb()
            r.close()


def play_worker(served: Served, settings: Settings, errors: list[BaseException]) -> None:
    """The profile worker for the next queued job: claim it, post a result in which ``CASE`` is 10% slower, then
    run the analysis task's plain code (twice: a repeated message gives the verdict again, no second feedback)."""
    try:
        url = served.url
        h = {"Authorization": f"Bearer {served.submit}"}
        deadline = time.monotonic() + 40
        job_id = None
        while job_id is None and time.monotonic() < deadline:
            listed = httpx.get(f"{url}/api/v1/projects/{served.project}/jobs", params={"status": "queued"}, headers=h)
            jobs = listed.json()["jobs"]
            job_id = jobs[0]["id"] if jobs else None
            time.sleep(0.2)
        assert job_id is not None, "the action submitted no job"
        testbed = listed.json()["jobs"][0]["testbed"]
        with httpx.Client(base_url=url) as http:
            token = claim(http, served.worker_token, job_id, claim_secret(REDIS, testbed, job_id))["token"]
        doc = docs.variant(docs.h200(), slower=1.10, cases=[CASE])
        body = {"attempt": 1, "result": doc}
        r = httpx.post(f"{url}/internal/jobs/{job_id}/result", json=body, headers=bearer(token))
        assert r.status_code == 200, r.text
        assert analysis.run(job_id, settings) == "fail"
        assert analysis.run(job_id, settings) == "fail"
    except BaseException as exc:
        errors.append(exc)


_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _fill(value: str, inputs: Mapping[str, str], outputs: Mapping[str, Mapping[str, str]]) -> str:
    """``value`` with its ``${{ inputs.x }}`` and ``${{ steps.s.outputs.x }}`` replaced; any other expression is
    an error, so that an action that starts using one fails here until the runner below learns it."""

    def one(match: re.Match[str]) -> str:
        expr = match.group(1)
        if m := re.fullmatch(r"inputs\.([\w-]+)", expr):
            return inputs[m.group(1)]
        if m := re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr):
            return outputs.get(m.group(1), {}).get(m.group(2), "")
        raise AssertionError(f"the test's runner does not evaluate ${{{{ {expr} }}}}")

    return _EXPRESSION.sub(one, value)


@dataclass(frozen=True)
class Ran:
    """The steps' outcome: the last step's process, every step's outputs, the action's outputs."""

    done: subprocess.CompletedProcess[str]
    steps: dict[str, dict[str, str]]
    outputs: dict[str, str]


def run_steps(
    given: Mapping[str, str],
    runner_env: Mapping[str, str],
    workspace: Path,
    *,
    only: Collection[str] | None = None,
    earlier: Mapping[str, dict[str, str]] | None = None,
    timeout_s: float = 600,
) -> Ran:
    """The action's steps in order, as the runner runs a composite action: its inputs (``given`` over the
    defaults), each step's ``env:`` over ``runner_env``, the workspace as the working directory; it stops at the
    first step that fails, as the runner does. ``runner_env`` holds ``GITHUB_ACTION_PATH``, ``RUNNER_TEMP``, the
    event and the summary file. ``only`` runs the steps of those ids, with the outputs of ``earlier`` ones."""
    action: dict[str, Any] = yaml.safe_load(ACTION.read_text())
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    inputs.update(given)
    steps: dict[str, dict[str, str]] = {k: dict(v) for k, v in (earlier or {}).items()}
    done: subprocess.CompletedProcess[str] | None = None
    out_dir = Path(runner_env["RUNNER_TEMP"]) / "step-outputs"
    out_dir.mkdir(parents=True, exist_ok=True)
    for n, step in enumerate(action["runs"]["steps"]):
        if only is not None and step.get("id") not in only:
            continue
        assert "if" not in step and step["shell"] == "bash", step  # what this runner supports
        output = out_dir / f"{n}.txt"
        output.write_text("")
        env = {**runner_env, "GITHUB_OUTPUT": str(output)}
        env.update({k: _fill(str(v), inputs, steps) for k, v in (step.get("env") or {}).items()})
        script = out_dir / f"{n}.sh"
        script.write_text(_fill(step["run"], inputs, steps))
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            env=env,
            cwd=workspace,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        steps[step.get("id", str(n))] = dict(
            line.split("=", 1) for line in output.read_text().splitlines() if "=" in line
        )
        if done.returncode != 0:
            break
    assert done is not None
    outputs = {name: _fill(str(spec["value"]), inputs, steps) for name, spec in action["outputs"].items()}
    return Ran(done, steps, outputs)
