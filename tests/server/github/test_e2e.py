"""End to end against the fake GitHub: ``attnprof serve``, the analysis worker with beat (the sweep) and a CPU
profile worker, real Celery processes on Postgres and Redis, nothing mocked.

A pull request's job regresses the project's attention (``examples/demo``: SDPA's fused kernel rewritten as plain
tensor ops, a backend switch that does not depend on timing noise): one status pending → failure and one
comment naming the case and its kernels; a second push updates that comment in place; a target that raises
gives pending → error and turns the comment into a no-verdict one; a final status that GitHub refuses is owed
on the job and delivered by the running sweep.

On a host busier than its cores the profiler marks a CPU run suspect and a suspect run never fails
(docs/architecture.md, "Deciding a regression"): the verdict is then ``warn`` and the status ``success``. The test
reads the stored run and expects accordingly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.github.comment import marker
from attnprof.server.projects import repository as project_rows
from attnprof.server.projects import service as project_service
from tests.pgtest import create_database, drop_database
from tests.server.github.fakegithub import FakeGitHub
from tests.worker.stack import (
    ATTNPROF,
    FAULTY,
    NO_DATABASE,
    Stack,
    base_env,
    custom_case,
    flush_redis,
    free_port,
    seed_project,
    start,
    stop,
    suite,
    tar_gz,
    wait_for,
    wait_ready,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "demo"
REDIS_URL = "redis://127.0.0.1:6379/10"
REPO = "acme/attn"
PR = 5
TESTBED = "tb-gh"
CASE = "my-attention"


def _files(*folders: Path) -> dict[str, bytes]:
    """The bundle: the files of each folder in turn, a later one replacing an earlier one's."""
    out: dict[str, bytes] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                out[str(path.relative_to(folder))] = path.read_bytes()
    return out


@pytest.fixture(scope="module")
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        yield fake


def _allow(url: str, project: str, repo: str) -> None:
    """Let ``project`` report to ``repo``, as the service's admin does."""
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine)() as session:
            found = project_rows.get_by_name(session, project)
            assert found is not None
            project_service.allow_repository(session, project_id=found.id, repo=repo, added_by="the tests")
            session.commit()
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, github: FakeGitHub) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("ghstack")
    logs = tmp / "logs"
    logs.mkdir()
    flush_redis(REDIS_URL)
    name, url = create_database()
    procs = []
    try:
        project_name, submit, tokens = seed_project(url, "gh", (TESTBED,))
        _allow(url, project_name, REPO)
        wtok = tokens[TESTBED]
        port = free_port()
        env = {
            **base_env(tmp),
            "ATTNPROF_BROKER_URL": REDIS_URL,
            "ATTNPROF_DATABASE_URL": url,
            "ATTNPROF_SERVICE_URL": f"http://127.0.0.1:{port}",
            "ATTNPROF_PUBLIC_URL": f"http://127.0.0.1:{port}",
            "ATTNPROF_GITHUB_API_URL": github.url,
            "ATTNPROF_GITHUB_TOKEN": "test-token-1",
            "ATTNPROF_SWEEP__FEEDBACK_RETRY_S": "1",
            # Generous on a shared, loaded host: these tests are not about lost workers or lost messages.
            "ATTNPROF_SWEEP__HEARTBEAT_STALE_S": "60",
            "ATTNPROF_SWEEP__ANALYZING_STALE_S": "120",
        }
        s = Stack(
            url=f"http://127.0.0.1:{port}",
            database_url=url,
            env=env,
            submit_token=submit,
            project=project_name,
            worker_tokens={TESTBED: wtok},
            tmp=tmp,
        )
        s.procs["service"] = start("service", [*ATTNPROF, "serve", "--port", str(port)], env, logs, tmp)
        s.procs["analysis"] = start(
            "analysis", [*ATTNPROF, "worker", "--analysis", "--beat-schedule", str(tmp / "beat")], env, logs, tmp
        )
        wenv = {
            **{k: v for k, v in env.items() if k != "ATTNPROF_GITHUB_TOKEN"},  # a GPU host holds no GitHub token
            "ATTNPROF_DATABASE_URL": NO_DATABASE,
            "ATTNPROF_WORKER_TOKEN": wtok,
            "ATTNPROF_WORKER__TIMEOUT_S": "400",
            "ATTNPROF_WORKER__SCRATCH_DIR": str(tmp / "scratch"),
        }
        s.procs["profile"] = start(
            "profile", [*ATTNPROF, "worker", "--testbed", TESTBED, "--device", "cpu"], wenv, logs, tmp
        )
        procs = list(s.procs.values())
        wait_ready(procs)
        yield s
    finally:
        stop(procs)
        drop_database(name)
        flush_redis(REDIS_URL)


def _submit(stack: Stack, spec: str, files: dict[str, bytes], *, commit: str, branch: str, pr: int | None) -> str:
    data = {"testbed": TESTBED, "branch": branch, "commit": commit, "repo": REPO}
    if branch != "main":
        data["base_commit"] = "e2e-base"
    if pr is not None:
        data["pr"] = str(pr)
    with stack.http() as http:
        r = http.post(
            f"/api/v1/projects/{stack.project}/jobs",
            data=data,
            files={"spec": ("attnprof.toml", spec.encode()), "bundle": ("src.tar.gz", tar_gz(files))},
        )
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _states(github: FakeGitHub, sha: str) -> list[str]:
    return [st["state"] for st in github.statuses(REPO, sha)]


def _ours(stack: Stack, github: FakeGitHub) -> list[dict[str, Any]]:
    return [c for c in github.comments(REPO, PR) if c["body"].startswith(marker(stack.project))]


def _suspect(stack: Stack, run_id: str) -> list[str] | None:
    with stack.http() as http:
        run = http.get(f"/api/v1/projects/{stack.project}/runs/{run_id}").json()
    suspect: list[str] | None = run["document"]["run"]["suspect"]
    return suspect


def _regressed(stack: Stack, github: FakeGitHub, commit: str) -> dict[str, Any]:
    """Submit the regressed project on the pull request and check its status and comment."""
    spec = (DEMO / "project" / "attnprof.toml").read_text()
    job_id = _submit(stack, spec, _files(DEMO / "project", DEMO / "regressed"), commit=commit, branch="feat", pr=PR)
    wait_for(f"pending on {commit}", lambda: _states(github, commit) == ["pending"], 30, logs=stack.logs)
    job = stack.wait_status(job_id, ("done", "failed", "timed_out"), 400)
    assert job["status"] == "done", job
    verdict = "warn" if _suspect(stack, job["run_id"]) else "fail"
    assert job["verdict"] == verdict, job
    final = "failure" if verdict == "fail" else "success"
    # The verdict is committed first and its feedback sent after: the job reads done a moment before GitHub has it.
    wait_for(f"{final} on {commit}", lambda: _states(github, commit) == ["pending", final], 30, logs=stack.logs)
    status = github.statuses(REPO, commit)[1]
    assert status["context"] == f"attnprof/{stack.project}"
    assert status["target_url"] == f"{stack.url}/ui/p/{stack.project}/runs/{job['run_id']}"
    return job


def test_a_pull_request_regression_then_a_second_push_then_a_failing_target(stack: Stack, github: FakeGitHub) -> None:
    spec = (DEMO / "project" / "attnprof.toml").read_text()
    base_id = _submit(stack, spec, _files(DEMO / "project"), commit="e2e-base", branch="main", pr=None)
    base = stack.wait_status(base_id, ("done", "failed", "timed_out"), 400)
    assert base["status"] == "done" and base["verdict"] == "pass", base  # the first run of all, suspect or not
    wait_for("success on e2e-base", lambda: _states(github, "e2e-base") == ["pending", "success"], 30)
    assert github.comments(REPO, PR) == []  # a push to main has no pull request to comment on

    first = _regressed(stack, github, "e2e-pr1")
    ours = wait_for("the comment", lambda: _ours(stack, github), 30, logs=stack.logs)
    assert len(ours) == 1 and len(github.requests("POST")) == 5  # 4 statuses, 1 comment
    body = ours[0]["body"]
    assert f"**{first['verdict']}**" in body and "`e2e-pr1`" in body
    assert f"#### ⚠️ `{CASE}`: backend switch `cpu_flash` → " in body
    kernels = body.split("backend switch", 1)[1]
    assert "| Kernel | Phase | Baseline | Candidate | Bound |" in kernels and "(gone)" in kernels and "(new)" in kernels
    assert f"[run]({stack.url}/ui/p/{stack.project}/runs/{first['run_id']})" in body

    second = _regressed(stack, github, "e2e-pr2")
    wait_for("the comment's update", lambda: len(github.requests("PATCH")) == 1, 30, logs=stack.logs)
    ours = _ours(stack, github)
    assert len(ours) == 1 and "`e2e-pr2`" in ours[0]["body"] and "`e2e-pr1`" not in ours[0]["body"]
    assert len(github.requests("PATCH")) == 1
    assert f"runs/{second['run_id']})" in ours[0]["body"]

    boom = suite("boom", custom_case("boom", "faulty.targets:boom"))
    boom_id = _submit(stack, boom, FAULTY, commit="e2e-boom", branch="feat", pr=PR)
    job = stack.wait_status(boom_id, ("failed", "done", "timed_out"), 300)
    assert job["status"] == "failed" and job["verdict"] is None, job
    # A failure report is committed first and its feedback delivered after: the job reads failed a moment
    # before GitHub has the status and the comment.
    wait_for("the error status", lambda: _states(github, "e2e-boom") == ["pending", "error"], 30, logs=stack.logs)
    error = github.statuses(REPO, "e2e-boom")[1]
    assert error["description"].startswith("no verdict: job failed: every case failed (1): boom: RuntimeError")
    assert error["target_url"] == f"{stack.url}/ui/p/{stack.project}/jobs/{boom_id}"
    wait_for("the comment's update", lambda: len(github.requests("PATCH")) == 2, 30, logs=stack.logs)
    ours = _ours(stack, github)
    assert len(ours) == 1 and len(github.requests("PATCH")) == 2
    assert "**no verdict** (job failed)" in ours[0]["body"] and "boom from the user's factory" in ours[0]["body"]
    assert "| Kernel |" not in ours[0]["body"]  # the earlier push's table is gone, not left stale


def test_a_refused_final_status_is_delivered_by_the_sweep(stack: Stack, github: FakeGitHub) -> None:
    boom = suite("boom", custom_case("boom", "faulty.targets:boom"))
    job_id = _submit(stack, boom, FAULTY, commit="e2e-retry", branch="feat", pr=None)
    wait_for("pending", lambda: _states(github, "e2e-retry") == ["pending"], 30, logs=stack.logs)
    github.fail_next("500", "500")  # both tries of the delivery made while the worker's failure report waits
    job = stack.wait_status(job_id, ("failed", "done", "timed_out"), 300)
    assert job["status"] == "failed", job
    wait_for("the sweep to deliver the error", lambda: _states(github, "e2e-retry") == ["pending", "error"], 30)
    owed = [r for r in github.requests("POST") if r.path.endswith("/statuses/e2e-retry")]
    assert len(owed) == 4  # pending, two refused tries, the sweep's delivery
    # Paid: the note of the refused delivery is gone from the reason, and nothing more is sent.
    job = stack.job(job_id)
    assert job["reason"].startswith("every case failed (1): boom: RuntimeError") and "GitHub" not in job["reason"]
    assert job["status"] == "failed" and job["verdict"] is None
