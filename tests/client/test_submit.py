"""The CI client: bundles from a source directory, git provenance, exit codes, what it imports, and its retries
(against a scripted server, then a real stack whose Postgres and service restart while ``submit --wait`` runs)."""

from __future__ import annotations

import email.utils
import io
import itertools
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from attnprof.client import http as client
from attnprof.client import source as client_source
from attnprof.client.cli import EXIT_FAIL, EXIT_NO_VERDICT, EXIT_PASS, exit_code
from attnprof.contract.provenance import Provenance
from attnprof.contract.public_api import JobAnswer, JobCreatedAnswer
from tests.pgcluster import Cluster, cluster_fixture  # noqa: F401 (cluster_fixture: the fixture named cluster)
from tests.worker.stack import (
    ATTNPROF,
    NO_DATABASE,
    SDPA_CASE,
    base_env,
    flush_redis,
    free_port,
    seed_project,
    sql,
    start,
    stop,
    suite,
    wait_for,
    wait_ready,
)


def _git(root: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return sorted(m.name for m in tar.getmembers())


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("GITHUB_REPOSITORY", "GITHUB_HEAD_REF", "GITHUB_REF_NAME"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "kern.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "attnprof.toml").write_text("[suite]\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "remote", "add", "origin", "git@github.com:acme/kernels.git")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "one")
    (root / "pkg" / "two.py").write_text("y = 2\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "two")
    return root


def test_the_bundle_is_what_git_would_track(repo: Path) -> None:
    (repo / "debug.log").write_text("noise")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_bytes(b"\0" * 100)
    (repo / "pkg" / "new.py").write_text("z = 3\n")  # untracked, not ignored: the user's working copy goes
    (repo / "pkg" / "link.py").symlink_to("/etc/passwd")
    built = client_source.build_bundle(repo)
    assert _names(built.data) == [".gitignore", "attnprof.toml", "pkg/kern.py", "pkg/new.py", "pkg/two.py"]
    assert built.skipped_links == ["pkg/link.py"]
    assert client_source.build_bundle(repo).data == built.data  # deterministic: stored once by the service


def test_outside_git_the_usual_folders_and_gitignore_are_left_out(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    for name in ("pkg/a.py", "pkg/__pycache__/a.cpython-311.pyc", ".venv/lib/x.py", "data/big.npy", "notes.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    (root / ".gitignore").write_text("data/\n*.txt\n")
    assert _names(client_source.build_bundle(root).data) == [".gitignore", "pkg/a.py"]


def test_limits(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(os.urandom(5000))
    with pytest.raises(client_source.SourceError, match="limit"):
        client_source.build_bundle(tmp_path, max_unpacked_bytes=1000)
    with pytest.raises(client_source.SourceError, match="limit"):
        client_source.build_bundle(tmp_path, max_bytes=1000)
    with pytest.raises(client_source.SourceError, match="not a directory"):
        client_source.build_bundle(tmp_path / "missing")


def test_provenance_from_git(repo: Path) -> None:
    main_head = _git(repo, "rev-parse", "HEAD")
    first = _git(repo, "rev-parse", "HEAD~1")
    on_main = client_source.git_info(repo)
    # On the default branch the base is the parent: the run compares with what came before it.
    assert (on_main.commit, on_main.branch, on_main.repo, on_main.base_commit) == (
        main_head,
        "main",
        "acme/kernels",
        first,
    )
    assert on_main.ancestors == [first]
    _git(repo, "checkout", "-q", "-b", "feature")
    (repo / "pkg" / "kern.py").write_text("x = 2\n")
    _git(repo, "commit", "-q", "-am", "faster?")
    on_branch = client_source.git_info(repo)
    assert on_branch.branch == "feature" and on_branch.base_commit == main_head
    assert on_branch.ancestors == [main_head, first]
    given = client_source.git_info(repo, base_commit=first)
    assert given.base_commit == first and given.ancestors == [first]


def test_a_folder_its_checkout_ignores_is_bundled_as_a_plain_folder(repo: Path) -> None:
    # `make demo` copies the demo project under the checkout's ignored out/: git would track none of it.
    source = repo / "build" / "project"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "attn.py").write_text("a = 1\n")
    (source / "attnprof.toml").write_text("[suite]\n")
    (source / "trace.log").write_text("noise")
    (source / ".gitignore").write_text("*.log\n")
    assert _names(client_source.build_bundle(source).data) == [".gitignore", "attnprof.toml", "pkg/attn.py"]
    info = client_source.git_info(source)
    assert (info.commit, info.base_commit, info.ancestors) == (None, None, [])


def test_no_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/k")
    monkeypatch.setenv("GITHUB_HEAD_REF", "")
    monkeypatch.setenv("GITHUB_REF_NAME", "release")
    info = client_source.git_info(tmp_path)
    assert (info.commit, info.branch, info.repo, info.base_commit, info.ancestors) == (
        None,
        "release",
        "acme/k",
        None,
        [],
    )


def _job(**fields: Any) -> JobAnswer:
    return JobAnswer.model_validate({"id": "j1", "attempts": 1, **fields})


def test_exit_codes() -> None:
    done = {"status": "done", "reason": None}
    assert exit_code(_job(**done, verdict="pass"), True) == (EXIT_PASS, "verdict: pass")
    assert exit_code(_job(**done, verdict="warn"), True)[0] == EXIT_PASS
    assert exit_code(_job(**done, verdict="fail"), True) == (EXIT_FAIL, "verdict: fail")
    assert exit_code(_job(status="failed", reason="every case failed"), True) == (
        EXIT_NO_VERDICT,
        "no verdict: the job failed: every case failed",
    )
    assert exit_code(_job(status="timed_out", reason="timed out: ..."), True)[1].startswith(
        "no verdict: the job timed out"
    )
    assert exit_code(_job(status="cancelled", reason="cancelled by a user"), True)[0] == EXIT_NO_VERDICT
    assert exit_code(_job(status="running"), False) == (
        EXIT_NO_VERDICT,
        "no verdict: the wait ran out while the job was running",
    )
    assert exit_code(None, False)[0] == EXIT_NO_VERDICT


def test_submit_imports_no_server_package_and_no_torch(tmp_path: Path) -> None:
    (tmp_path / "attnprof.toml").write_text("[suite]\n")
    probe = (
        "import atexit, sys\n"
        "heavy = {'fastapi', 'starlette', 'sqlalchemy', 'alembic', 'celery', 'torch', 'psycopg'}\n"
        "atexit.register(lambda: print('loaded:', sorted({m.split('.')[0] for m in sys.modules} & heavy)))\n"
        "from attnprof.cli import main\n"
        "main(['submit', sys.argv[1], '--source', sys.argv[2], '--server', 'http://127.0.0.1:9', '--token', 't',"
        " '--testbed', 'x', '--branch', 'b', '--commit', 'c', '--wait', '--timeout', '2'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "attnprof.toml"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("ATTNPROF_")},
    )
    assert done.returncode == 3, done.stderr  # no service within --timeout: no verdict, not bad input
    assert "the service at http://127.0.0.1:9 was unreachable for" in done.stderr
    assert "ConnectError" in done.stderr
    assert "loaded: []" in done.stdout


# --- retries: a scripted HTTP server on loopback answers each request with the next answer of its script ---------


@dataclass
class Scripted:
    """What a scripted server answers, in order (the last answer repeats), and what it was sent."""

    answers: list[tuple[int, dict[str, str], dict[str, Any]]]
    seen: list[tuple[float, str, str, dict[str, str]]] = field(default_factory=list)  # (time, method, path, headers)
    bodies: list[bytes] = field(default_factory=list)
    url: str = ""


@contextmanager
def scripted(*answers: tuple[int, dict[str, str], dict[str, Any]]) -> Iterator[Scripted]:
    script = Scripted(list(answers))

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            script.bodies.append(self.rfile.read(length))
            script.seen.append((time.monotonic(), self.command, self.path, dict(self.headers)))
            status, headers, body = script.answers[0] if len(script.answers) == 1 else script.answers.pop(0)
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = _answer

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    script.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield script
    finally:
        server.shutdown()
        server.server_close()


UNAVAILABLE = {"error": "unavailable", "detail": "the database is unavailable (OperationalError); retry in 5 s"}
JOB = {"id": "j1", "status": "queued"}


def _submit(http: Any, deadline: float) -> JobCreatedAnswer:
    return client.submit_job(
        http,
        project="p",
        spec="[suite]\n",
        testbed="tb",
        provenance=Provenance(branch="b", commit="c"),
        idempotency_key="k-1",
        deadline=deadline,
    )


def test_submission_retries_5xx_and_429_under_one_idempotency_key_and_honours_retry_after() -> None:
    with (
        scripted(
            (503, {"Retry-After": "1"}, UNAVAILABLE),
            (500, {}, {"error": "internal_error", "detail": "x"}),
            (502, {}, {}),
            (429, {"Retry-After": "0"}, {"error": "rate_limited", "detail": "retry in 0 s"}),
            (504, {}, {}),
            (202, {}, JOB),
        ) as server,
        client.connect(server.url, "t") as http,
    ):
        assert _submit(http, client.deadline_in(30)).model_dump(exclude_unset=True) == JOB
    keys = [headers.get("Idempotency-Key") for _, _, _, headers in server.seen]
    assert keys == ["k-1"] * 6  # one key: the service stores one job however often it is sent
    times = [t for t, *_ in server.seen]
    assert times[1] - times[0] >= 0.95  # Retry-After: 1 was waited
    assert all(b - a < 2 for a, b in itertools.pairwise(times))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422])
def test_a_4xx_other_than_429_is_final_at_once(status: int) -> None:
    refusal = f"the service answered {status}: bad: the field x"
    with (
        scripted((status, {}, {"error": "bad", "detail": "the field x"})) as server,
        client.connect(server.url, "t") as http,
        pytest.raises(client.SubmitError, match=refusal),
    ):
        _submit(http, client.deadline_in(30))
    assert len(server.seen) == 1


def test_a_service_that_never_comes_back_is_unreachable_at_the_deadline() -> None:
    # A Retry-After far past the budget is waited only until the deadline.
    with scripted((503, {"Retry-After": "3600"}, UNAVAILABLE)) as server, client.connect(server.url, "t") as http:
        started = time.monotonic()
        with pytest.raises(client.Unreachable) as caught:
            _submit(http, client.deadline_in(2))
    elapsed_s = time.monotonic() - started
    assert 2 <= elapsed_s < 4, elapsed_s
    assert caught.value.down_s >= 2
    assert str(caught.value).startswith(f"the service at {server.url} was unreachable for 2 s")
    assert "503 unavailable: the database is unavailable" in str(caught.value)
    assert len(server.seen) == 2  # the first try, and one at the deadline


def test_retry_after_is_read_as_seconds_or_a_date_and_bounded() -> None:
    def after(value: str) -> float | None:
        return client.retry_after_s(httpx.Response(503, headers={"Retry-After": value}))

    assert after("3") == 3 and after("0") == 0 and after("-5") == 0
    assert after("86400") == client.RETRY_AFTER_MAX_S
    soon = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    assert 15 <= (after(soon) or 0) <= 21
    assert after("soon") is None and client.retry_after_s(httpx.Response(503)) is None


def test_wait_polls_through_an_outage_and_exits_by_the_verdict(tmp_path: Path) -> None:
    spec = tmp_path / "attnprof.toml"
    spec.write_text("[suite]\n")
    done = {**JOB, "status": "done", "verdict": "fail", "attempts": 1, "reason": None}
    with scripted(
        (503, {"Retry-After": "0"}, UNAVAILABLE),  # the token lookup, while the database restarts
        (200, {}, {"project": "p"}),
        (503, {"Retry-After": "0"}, UNAVAILABLE),  # the submission
        (202, {}, JOB),
        (200, {}, {**JOB, "attempts": 1}),
        (503, {"Retry-After": "0"}, UNAVAILABLE),  # polls during a second outage
        (500, {}, {}),
        (200, {}, done),
        (503, {"Retry-After": "0"}, UNAVAILABLE),  # the comparison
        (404, {}, {"error": "not_found", "detail": "no comparison"}),
    ) as server:
        argv = ["submit", str(spec), "--server", server.url, "--token", "t", "--testbed", "tb", "--branch", "b"]
        argv += ["--commit", "c", "--wait", "--timeout", "60", "--json"]
        ran = subprocess.run([*ATTNPROF, *argv], capture_output=True, text=True, timeout=90, env=_client_env())
    assert ran.returncode == 1, ran.stderr  # the verdict (fail), not 2
    assert json.loads(ran.stdout)["reason"] == "verdict: fail"
    posts = [h.get("Idempotency-Key") for _, method, _, h in server.seen if method == "POST"]
    assert len(posts) == 2 and posts[0] == posts[1]


def test_several_testbeds_make_a_matrix_waited_for_whole_and_the_worst_verdict_decides(tmp_path: Path) -> None:
    spec = tmp_path / "attnprof.toml"
    spec.write_text('[suite]\nname = "s"\ntestbeds = ["h100", "h200"]\n')
    matrix = {
        "id": "j1",
        "status": "queued",
        "matrix_id": "m1",
        "jobs": [
            {"id": "j1", "testbed": "h100", "status": "queued"},
            {"id": "j2", "testbed": "h200", "status": "queued"},
        ],
    }
    passed = {**JOB, "status": "done", "verdict": "pass", "attempts": 1, "reason": None}
    failed = {**JOB, "id": "j2", "status": "done", "verdict": "fail", "attempts": 1, "reason": None}
    with scripted((200, {}, {"project": "p"}), (202, {}, matrix), (200, {}, passed), (200, {}, failed)) as server:
        # No --testbed: the suite's two are sent, and the service makes a job on each.
        argv = ["submit", str(spec), "--server", server.url, "--token", "t", "--branch", "b", "--commit", "c"]
        ran = subprocess.run(
            [*ATTNPROF, *argv, "--wait", "--timeout", "60", "--json"],
            capture_output=True,
            text=True,
            timeout=90,
            env=_client_env(),
        )
    assert ran.returncode == 1, ran.stderr  # the H200's fail decides
    out = json.loads(ran.stdout)
    assert out["exit"] == 1 and out["job"]["id"] == "j2"  # the worst testbed's job stands for the matrix
    assert out["reason"] == "h100: verdict: pass; h200: verdict: fail"
    assert [(j["testbed"], j["exit"], j["reason"]) for j in out["matrix"]] == [
        ("h100", 0, "verdict: pass"),
        ("h200", 1, "verdict: fail"),
    ]
    post = next(b for (_, method, _, _), b in zip(server.seen, server.bodies, strict=True) if method == "POST")
    assert b'name="testbeds"\r\n\r\nh100,h200\r\n' in post and b'name="testbed"\r\n' not in post
    with scripted((200, {}, {"project": "p"}), (202, {}, matrix)) as server:
        argv = ["submit", str(spec), "--server", server.url, "--token", "t", "--branch", "b", "--commit", "c"]
        ran = subprocess.run(
            [*ATTNPROF, *argv, "--testbed", "h100, h200"], capture_output=True, text=True, timeout=90, env=_client_env()
        )
    assert ran.returncode == 0, ran.stderr
    assert "job j1 queued on testbed h100\njob j2 queued on testbed h200\n" in ran.stdout
    no_testbed = tmp_path / "plain.toml"
    no_testbed.write_text('[suite]\nname = "s"\n')
    ran = subprocess.run(
        [*ATTNPROF, "submit", str(no_testbed), "--server", "http://127.0.0.1:9", "--token", "t"],
        capture_output=True,
        text=True,
        timeout=90,
        env=_client_env(),
    )
    assert ran.returncode == 2 and "the suite's [suite] testbeds) is needed" in ran.stderr


def test_upload_retries_and_exits_3_when_the_service_never_comes_back(tmp_path: Path) -> None:
    doc = tmp_path / "result.json"
    doc.write_text("{}")
    with scripted((503, {"Retry-After": "1"}, UNAVAILABLE)) as server:
        argv = ["upload", str(doc), "--server", server.url, "--token", "t", "--project", "p", "--branch", "b"]
        argv += ["--commit", "c", "--timeout", "3"]
        started = time.monotonic()
        ran = subprocess.run([*ATTNPROF, *argv], capture_output=True, text=True, timeout=60, env=_client_env())
    assert ran.returncode == 3, ran.stderr
    assert f"the service at {server.url} was unreachable for 3 s" in ran.stderr
    assert time.monotonic() - started < 15
    assert len(server.seen) >= 3


def _client_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ATTNPROF_")}


# --- the real thing: Postgres stopped and started, the service restarted, while `submit --wait` runs -----------

OUTAGE_REDIS = "redis://127.0.0.1:6379/15"


def test_submit_wait_outlives_database_and_service_restarts(cluster: Cluster, tmp_path: Path) -> None:
    database_url = cluster.create_database()
    flush_redis(OUTAGE_REDIS)
    _, submit_token, tokens = seed_project(database_url, "outage", ("tb-outage",))
    logs = tmp_path / "logs"
    logs.mkdir()
    port = free_port()
    env = {**_stack_env(tmp_path), "ATTNPROF_BROKER_URL": OUTAGE_REDIS, "ATTNPROF_DATABASE_URL": database_url}
    env["ATTNPROF_SERVICE_URL"] = f"http://127.0.0.1:{port}"
    serve = [*ATTNPROF, "serve", "--port", str(port)]
    procs = [start("service", serve, env, logs, tmp_path)]
    procs.append(
        start(
            "analysis",
            [*ATTNPROF, "worker", "--analysis", "--beat-schedule", str(tmp_path / "beat")],
            env,
            logs,
            tmp_path,
        )
    )
    spec = tmp_path / "attnprof.toml"
    spec.write_text(suite("outage", SDPA_CASE))
    argv = [*ATTNPROF, "submit", str(spec), "--testbed", "tb-outage", "--branch", "main", "--commit", "c0ffee"]
    argv += ["--server", f"http://127.0.0.1:{port}", "--token", submit_token, "--wait", "--timeout", "240", "--json"]
    waiting: subprocess.Popen[str] | None = None
    try:
        wait_ready(procs)
        wait_for("the service", lambda: _healthy(port), 60, logs=procs)
        cluster.stop()
        waiting = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_client_env())
        wait_for("503s", lambda: "the database is unavailable" in procs[0].text(), 30, logs=procs)
        time.sleep(2)  # the client keeps retrying its token lookup
        cluster.start()
        wait_for("the job", lambda: sql(database_url, "SELECT id FROM jobs"), 60, logs=procs)
        # While the client waits: the service and its database go down together and come back.
        stop([procs[0]])
        cluster.stop()
        time.sleep(2)
        cluster.start()
        procs[0] = start("service", serve, env, logs, tmp_path)
        wenv = {**env, "ATTNPROF_DATABASE_URL": NO_DATABASE, "ATTNPROF_WORKER_TOKEN": tokens["tb-outage"]}
        wenv["ATTNPROF_WORKER__SCRATCH_DIR"] = str(tmp_path / "scratch")
        procs.append(
            start("profile", [*ATTNPROF, "worker", "--testbed", "tb-outage", "--device", "cpu"], wenv, logs, tmp_path)
        )
        out, err = waiting.communicate(timeout=240)
        assert waiting.returncode in (0, 1), err + "".join(f"\n--- {p.name} ---\n{p.text()[-3000:]}" for p in procs)
        answer = json.loads(out)
        assert answer["job"]["status"] == "done" and answer["reason"].startswith("verdict: ")
        assert sql(database_url, "SELECT count(*) FROM jobs") == [(1,)]  # the retried submission made one job
    finally:
        if waiting is not None and waiting.poll() is None:
            waiting.kill()
        stop(procs)


def _stack_env(tmp: Path) -> dict[str, str]:
    """The stack's environment, with the tests' PYTHONPATH where one is set (the code under test)."""
    path = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    return {**base_env(tmp), **path}


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_submit_wait_exits_3_within_its_timeout_when_the_database_never_comes_back(tmp_path: Path) -> None:
    port = free_port()
    nowhere = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none"
    env = {**_stack_env(tmp_path), "ATTNPROF_BROKER_URL": OUTAGE_REDIS, "ATTNPROF_DATABASE_URL": nowhere}
    service = start("service", [*ATTNPROF, "serve", "--port", str(port)], env, tmp_path, tmp_path)
    spec = tmp_path / "attnprof.toml"
    spec.write_text(suite("never", SDPA_CASE))
    argv = [*ATTNPROF, "submit", str(spec), "--testbed", "tb", "--branch", "main", "--commit", "c1"]
    argv += ["--server", f"http://127.0.0.1:{port}", "--token", "ap_x", "--wait", "--timeout", "5"]
    try:
        wait_for("the service", lambda: _healthy(port), 60, logs=[service])
        started = time.monotonic()
        ran = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_client_env())
        elapsed_s = time.monotonic() - started
    finally:
        stop([service])
    assert ran.returncode == 3, ran.stderr
    assert f"the service at http://127.0.0.1:{port} was unreachable for 5 s" in ran.stderr
    assert "503 unavailable: the database is unavailable" in ran.stderr
    assert elapsed_s < 5 + 8, elapsed_s  # the budget, a last try, and the interpreter's start
