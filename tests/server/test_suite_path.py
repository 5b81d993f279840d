"""The suite's path in its repository: the contract's rule, what ``attnprof submit`` finds and sends, what the
service stores on the job (or refuses, naming the field, storing nothing), and migration 0010 both ways."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import inspect, select

from attnprof.client import source as client_source
from attnprof.contract.suite_path import SUITE_PATH_CHARS, SuitePathError, check_suite_path
from attnprof.server import migrate
from attnprof.server.db import make_engine
from attnprof.server.jobs.models import Job
from tests.server.documents import SPEC
from tests.worker.stack import ATTNPROF


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("attnprof.toml", "attnprof.toml"),
        ("./benches/attn.toml", "benches/attn.toml"),
        ("benches/llama 7b/suite.toml", "benches/llama 7b/suite.toml"),
        ("a" * SUITE_PATH_CHARS, "a" * SUITE_PATH_CHARS),
    ],
)
def test_a_relative_path_is_kept(raw: str, stored: str) -> None:
    assert check_suite_path(raw) == stored


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("", "empty"),
        ("/etc/attnprof.toml", "absolute"),
        ("C:/suite.toml", "absolute"),
        ("../other/suite.toml", "'..' part"),
        ("benches/../../suite.toml", "'..' part"),
        ("benches\\suite.toml", "backslash"),
        ("benches//suite.toml", "empty or '.' part"),
        ("benches/./suite.toml", "empty or '.' part"),
        ("bench\x00es.toml", "control character"),
        ("a" * (SUITE_PATH_CHARS + 1), f"{SUITE_PATH_CHARS + 1} characters"),
    ],
)
def test_a_path_that_leaves_the_repository_or_is_unbounded_is_refused(raw: str, says: str) -> None:
    with pytest.raises(SuitePathError, match="relative to the repository's root") as refused:
        check_suite_path(raw)
    assert says in str(refused.value)


def _git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env)


def test_the_client_finds_the_path_from_git_then_the_workspace_then_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    repo = tmp_path / "repo"
    (repo / "benches").mkdir(parents=True)
    suite = repo / "benches" / "attn.toml"
    suite.write_text(SPEC)
    _git(repo, "init", "-q", "-b", "main")
    assert client_source.suite_path(suite) == "benches/attn.toml"
    assert client_source.suite_path(repo / "benches" / ".." / "benches" / "attn.toml") == "benches/attn.toml"
    plain = tmp_path / "plain"
    (plain / "perf").mkdir(parents=True)
    (plain / "perf" / "s.toml").write_text(SPEC)
    assert client_source.suite_path(plain / "perf" / "s.toml") is None  # no git, no workspace, no source
    assert client_source.suite_path(plain / "perf" / "s.toml", source=plain) == "perf/s.toml"
    monkeypatch.setenv("GITHUB_WORKSPACE", str(plain))
    assert client_source.suite_path(plain / "perf" / "s.toml") == "perf/s.toml"


def test_submit_refuses_a_bad_suite_path_before_any_request(tmp_path: Path) -> None:
    suite = tmp_path / "attnprof.toml"
    suite.write_text(SPEC)
    argv = [*ATTNPROF, "submit", str(suite), "--server", "http://127.0.0.1:9", "--token", "t", "--testbed", "tb"]
    argv += ["--branch", "main", "--commit", "c1", "--suite-path", "../elsewhere/attnprof.toml"]
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert "--suite-path" in ran.stderr and "'..' part" in ran.stderr and "cannot reach" not in ran.stderr


def _submit(client, tenant, worker_token, **extra: str):
    data = {"testbed": worker_token[0], "branch": "main", "commit": "c1", **extra}
    files = {"spec": ("attnprof.toml", SPEC.encode())}
    return client.post(f"/api/v1/projects/{tenant.name}/jobs", files=files, data=data, headers=tenant.h("submit"))


def test_the_service_stores_the_path_on_the_job_and_refuses_a_bad_one(client, db, tenant, worker_token) -> None:
    r = _submit(client, tenant, worker_token, suite_path="./benches/attn.toml")
    assert r.status_code == 202, r.text
    shown = client.get(f"/api/v1/jobs/{r.json()['id']}", headers=tenant.h("read")).json()
    assert shown["suite_path"] == "benches/attn.toml"
    older = _submit(client, tenant, worker_token)  # an older client sends none
    assert (
        older.status_code == 202
        and client.get(f"/api/v1/jobs/{older.json()['id']}", headers=tenant.h("read")).json()["suite_path"] is None
    )
    before = set(db.scalars(select(Job.id)))
    for bad, says in (("../../etc/passwd", "'..' part"), ("/abs/suite.toml", "absolute"), ("x" * 501, "String")):
        refused = _submit(client, tenant, worker_token, suite_path=bad)
        assert refused.status_code == 422, refused.text
        detail = str(refused.json()["detail"])
        assert "suite_path" in detail and says in detail, detail
    assert set(db.scalars(select(Job.id))) == before  # nothing stored


NEW_RUN_COLUMNS = {"feedback_due_at", "feedback_attempts", "feedback_note"}


def test_migration_0010_adds_the_suite_path_and_the_runs_outbox_and_its_downgrade_drops_them(database_url) -> None:
    engine = make_engine(database_url)
    try:
        migrate.upgrade(database_url, "0009")
        inspected = inspect(engine)
        assert "suite_path" not in {c["name"] for c in inspected.get_columns("jobs")}
        assert not NEW_RUN_COLUMNS & {c["name"] for c in inspected.get_columns("runs")}
        migrate.upgrade(database_url, "0010")
        inspected = inspect(engine)
        assert "suite_path" in {c["name"] for c in inspected.get_columns("jobs")}
        assert {c["name"] for c in inspected.get_columns("runs")} >= NEW_RUN_COLUMNS
        run_indexes = {i["name"] for i in inspected.get_indexes("runs")}
        assert run_indexes >= {"ix_runs_pr", "ix_runs_feedback_due_at", "ix_runs_listing"}
        assert "ix_jobs_pr" in {i["name"] for i in inspected.get_indexes("jobs")}
        migrate.downgrade(database_url, "0009")
        inspected = inspect(engine)
        assert "suite_path" not in {c["name"] for c in inspected.get_columns("jobs")}
        assert not NEW_RUN_COLUMNS & {c["name"] for c in inspected.get_columns("runs")}
        assert "ix_jobs_pr" not in {i["name"] for i in inspected.get_indexes("jobs")}
        migrate.upgrade(database_url)  # and up again
    finally:
        engine.dispose()
