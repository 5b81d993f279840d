"""The action's script, with a GitHub-like environment, against ``attnprof serve`` on a migrated Postgres;
the test plays the profile worker, then runs the analysis task's plain code. The workflow files parse."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import redis
import yaml
from fakegithub import FakeGitHub
from ghstack import docs, make_settings, pg_url_fixture  # noqa: F401

from service import feedback
from service.auth import service as auth
from service.db import make_engine, make_sessionmaker
from service.github.action import decide, provenance, submit_argv
from service.projects import service as projects
from service.testbeds import service as testbeds
from worker import analysis

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REDIS = "redis://127.0.0.1:6379/13"
REPO = "acme/attn"
CASE = "sdpa[backend=cudnn,pass=fwd]"
SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "prefill"\ntarget = "sdpa"\nq_heads = 4\nseq_q = 128\nhead_dim = 64\n'


def test_workflow_and_action_files_parse() -> None:
    action = yaml.safe_load((ROOT / ".github/actions/attnprof/action.yml").read_text())
    assert set(action["inputs"]) == {"server-url", "token", "suite", "testbed", "source", "fail-on", "timeout-minutes"}
    assert set(action["outputs"]) == {"job-id", "verdict", "report-url"}
    assert action["runs"]["using"] == "composite"
    ci = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    assert {"postgres", "redis"} <= set(ci["jobs"]["test"]["services"])
    runs = [s.get("run") for job in ci["jobs"].values() for s in job["steps"]]
    assert {"make lint", "make test"} <= set(runs)
    example = yaml.safe_load((ROOT / "examples/github/attention-perf.yml").read_text())
    step = next(s for s in example["jobs"]["attnprof"]["steps"] if "attnprof" in str(s.get("uses")))
    assert set(step["with"]) <= set(action["inputs"])


def test_provenance_of_pull_request_and_push_events(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(
        json.dumps({"pull_request": {"number": 7, "head": {"ref": "feat", "sha": "h1"}, "base": {"sha": "b1"}}})
    )
    env = {"GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": REPO}
    prov = provenance(env)
    assert (prov.repo, prov.branch, prov.commit, prov.base_commit, prov.pr) == (REPO, "feat", "h1", "b1", 7)
    event.write_text(json.dumps({"before": "0" * 40, "after": "a2"}))
    prov = provenance({**env, "GITHUB_EVENT_NAME": "push", "GITHUB_REF_NAME": "main"})
    assert (prov.branch, prov.commit, prov.base_commit, prov.pr) == ("main", "a2", None, None)
    argv = submit_argv({"ATTNPROF_SUITE": "s.toml", "ATTNPROF_TIMEOUT_MINUTES": "2", "ATTNPROF_TESTBED": "t"}, prov)
    assert argv[1:5] == ["submit", "s.toml", "--wait", "--json"] and "--pr" not in argv
    assert argv[argv.index("--timeout") + 1] == "120.0" and argv[argv.index("--commit") + 1] == "a2"


def test_fail_on() -> None:
    assert decide("fail", 1) == (1, None) and decide("fail", 0) == (0, None)
    assert decide("warn", 1)[0] == 0 and "fail" in str(decide("warn", 1)[1])
    assert decide("warn", 2) == (2, None) and decide("warn", 3)[0] == 0
    assert decide("never", 2)[0] == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path, pg_url: str):
    """A committed project and tokens on the tests' database, and ``attnprof serve`` on it."""
    engine = make_engine(pg_url)
    with make_sessionmaker(engine)() as session:
        project = projects.create(session, name=f"act-{os.getpid()}-{time.monotonic_ns() % 10**6}")
        submit = auth.create_project_token(session, project_id=project.id, role="submit")[1]
        tb = testbeds.ensure(session, f"tb-act-{time.monotonic_ns() % 10**6}")
        wtok = auth.create_worker_token(session, testbed_id=tb.id)[1]
        session.commit()
        names = (project.name, tb.name)
    engine.dispose()
    with FakeGitHub() as github:
        port = _free_port()
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
            yield url, names, submit, wtok, github, env
        finally:
            proc.terminate()
            proc.wait(timeout=15)
            log.close()
            r = redis.Redis.from_url(REDIS)
            r.flushdb()
            r.close()


def _play_worker(url: str, project: str, submit: str, wtok: str, settings, errors: list[BaseException]) -> None:
    try:
        h = {"Authorization": f"Bearer {submit}"}
        w = {"Authorization": f"Bearer {wtok}"}
        deadline = time.monotonic() + 40
        job_id = None
        while job_id is None and time.monotonic() < deadline:
            listed = httpx.get(f"{url}/api/v1/projects/{project}/jobs", params={"status": "queued"}, headers=h)
            jobs = listed.json()["jobs"]
            job_id = jobs[0]["id"] if jobs else None
            time.sleep(0.2)
        assert job_id is not None, "the action submitted no job"
        assert httpx.post(f"{url}/internal/jobs/{job_id}/claim", json={"attempt": 1, "worker": "w"}, headers=w)
        doc = docs.variant(docs.h200(), slower=1.10, cases=[CASE])
        r = httpx.post(f"{url}/internal/jobs/{job_id}/result", json={"attempt": 1, "result": doc}, headers=w)
        assert r.status_code == 200, r.text
        assert analysis.run(job_id, settings) == "fail"
    except BaseException as exc:
        errors.append(exc)


def test_action_script_in_a_pull_request(tmp_path: Path, served, pg_url: str, monkeypatch) -> None:
    url, (project, testbed), submit, wtok, github, _ = served
    settings = make_settings(
        pg_url, broker_url=REDIS, public_url=url, github_api_url=github.url, github_token="test-token-1"
    )
    monkeypatch.setattr(feedback, "get_settings", lambda: settings)
    base = httpx.post(
        f"{url}/api/v1/projects/{project}/results",
        json=docs.upload_body(docs.h200(), commit="a1"),
        headers={"Authorization": f"Bearer {submit}"},
    )
    assert base.status_code == 201, base.text
    (tmp_path / "suite.toml").write_text(SPEC)
    event = tmp_path / "event.json"
    event.write_text(
        json.dumps({"pull_request": {"number": 7, "head": {"ref": "feat", "sha": "h1"}, "base": {"sha": "a1"}}})
    )
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        PYTHONPATH=str(ROOT),
        ATTNPROF_CLI=str(BIN / "attnprof"),
        ATTNPROF_SERVER=url,
        ATTNPROF_TOKEN=submit,
        ATTNPROF_SUITE=str(tmp_path / "suite.toml"),
        ATTNPROF_TESTBED=testbed,
        ATTNPROF_FAIL_ON="fail",
        ATTNPROF_TIMEOUT_MINUTES="1",
        GITHUB_EVENT_NAME="pull_request",
        GITHUB_EVENT_PATH=str(event),
        GITHUB_REPOSITORY=REPO,
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_OUTPUT=str(output),
    )
    errors: list[BaseException] = []
    worker = threading.Thread(target=_play_worker, args=(url, project, submit, wtok, settings, errors))
    worker.start()
    done = subprocess.run(
        [sys.executable, "-m", "service.github.action"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    worker.join(timeout=60)
    assert not errors, errors
    assert done.returncode == 1, done.stdout + done.stderr
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert outputs["verdict"] == "fail" and outputs["report-url"].endswith(f"/jobs/{outputs['job-id']}/comment")
    text = summary.read_text()
    assert "**fail**" in text and f"`{CASE}`" in text and not text.startswith("<!--")
    assert [s["state"] for s in github.statuses(REPO, "h1")] == ["pending", "failure"]
    assert len(github.comments(REPO, 7)) == 1
