"""The CLI verbs as subprocesses against a real ``attnprof serve`` on a free port and a real Postgres database."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import svcdocs as docs
from conftest import REDIS_URL, create_database, drop_database

ATTNPROF = [str(Path(sys.executable).parent / "attnprof")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ATTNPROF, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    name, url = create_database()
    env = {**os.environ, "ATTNPROF_DATABASE_URL": url, "ATTNPROF_BROKER_URL": REDIS_URL}
    tmp = tmp_path_factory.mktemp("cli")
    port = _free_port()
    proc = None
    try:
        up = _run(env, "db", "upgrade")
        assert up.returncode == 0, up.stderr
        proc = subprocess.Popen(
            [*ATTNPROF, "serve", "--port", str(port)],
            env=env,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise AssertionError("attnprof serve did not come up")
        yield env, base, tmp
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        drop_database(name)


def test_admin_and_upload(server) -> None:
    env, base, tmp = server
    made = _run(env, "admin", "create-project", "cliproj", "--json")
    assert made.returncode == 0, made.stderr
    admin = json.loads(made.stdout)
    assert admin["project"]["name"] == "cliproj" and admin["token"].startswith("ap_")
    sub = json.loads(_run(env, "admin", "create-token", "cliproj", "--role", "submit", "--json").stdout)
    assert sub["role"] == "submit"
    assert _run(env, "admin", "create-token", "cliproj", "--role", "boss").returncode == 2
    assert _run(env, "admin", "create-project", "cliproj").returncode == 2
    wk = json.loads(_run(env, "admin", "create-worker-token", "--testbed", "h200-a", "--json").stdout)
    assert wk["testbed"] == "h200-a"
    who = httpx.get(f"{base}/api/v1/token", headers={"Authorization": f"Bearer {wk['token']}"}).json()
    assert who == {"role": "worker", "project": None, "testbed": "h200-a"}

    first, slow = tmp / "first.json", tmp / "slow.json"
    first.write_text(json.dumps(docs.h200()))
    slow.write_text(json.dumps(docs.h200(slower=1.15)))
    cenv = {**env, "ATTNPROF_SERVER": base, "ATTNPROF_TOKEN": sub["token"]}
    ok = _run(cenv, "upload", str(first), "--branch", "main", "--commit", "a1", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verdict"] == "pass"
    bad = _run(cenv, "upload", str(slow), "--branch", "pr", "--commit", "b1", "--base-commit", "a1", "--pr", "3")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "verdict: fail" in bad.stdout
    missing = _run(cenv, "upload", str(tmp / "nope.json"), "--branch", "main", "--commit", "x")
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    refused = _run({**cenv, "ATTNPROF_TOKEN": "ap_wrong"}, "upload", str(first), "--branch", "m", "--commit", "x")
    assert refused.returncode == 2 and "401" in refused.stderr
