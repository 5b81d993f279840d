"""``attnprof serve --workers N``: several processes share one session key or the server does not start.

A cookie signed by one process must be read by the others: without a shared key each process would make up its
own and most page loads after a sign-in would land on a process that refuses the cookie."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from attnprof.server.config import Settings, missing_shared_secrets
from tests.pgcluster import free_port
from tests.pgtest import create_database, drop_database
from tests.server.process import ATTNPROF, seed, server_env

SECRET_VAR = "ATTNPROF_DASHBOARD__SESSION_SECRET"
SECRET = "0123456789abcdef" * 4


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    name, url = create_database()
    try:
        yield url
    finally:
        drop_database(name)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def _serve(env: dict[str, str], port: int, log: Path, workers: int) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [ATTNPROF, "serve", "--port", str(port), "--workers", str(workers)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield popen
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGTERM)
            try:
                popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait()


def test_several_workers_without_a_session_secret_refuse_to_start(database: str, tmp_path: Path) -> None:
    env = server_env(database)
    env.pop(SECRET_VAR, None)
    port = free_port()
    log = tmp_path / "serve.log"
    with _serve(env, port, log, workers=2) as popen:
        assert popen.wait(timeout=60) == 2
    text = log.read_text()
    assert SECRET_VAR in text and "--workers 2" in text and "openssl rand -hex 32" in text, text
    assert "Traceback" not in text
    assert not _listening(port)


def test_a_placeholder_secret_is_refused_by_name(database: str, tmp_path: Path) -> None:
    env = {**server_env(database), SECRET_VAR: "changeme"}
    log = tmp_path / "serve.log"
    with _serve(env, free_port(), log, workers=2) as popen:
        assert popen.wait(timeout=60) == 2
    text = log.read_text()
    assert "session_secret" in text and "at least 32 characters" in text, text


def test_one_worker_needs_no_shared_secret() -> None:
    assert missing_shared_secrets(Settings(), 1) == []
    assert missing_shared_secrets(Settings(), 3) == [SECRET_VAR]
    assert missing_shared_secrets(Settings(dashboard={"session_secret": SECRET}), 3) == []


def test_a_sign_in_holds_across_worker_processes(database: str, tmp_path: Path) -> None:
    """Signed in once, then 20 page loads each on a connection of its own (so the kernel hands them to either
    process): every one is signed in."""
    seeded = seed(database)
    env = {**server_env(database), SECRET_VAR: SECRET}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with _serve(env, port, tmp_path / "serve.log", workers=2) as popen:
        deadline = time.monotonic() + 90
        while True:
            assert popen.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        # No keep-alive: each request opens a new connection, accepted by whichever process the kernel picks.
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(base_url=base, timeout=30, limits=limits) as client:
            form = client.get("/ui/login")
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert csrf is not None
            signed = client.post("/ui/login", data={"token": seeded.read, "csrf": csrf.group(1), "next": ""})
            assert signed.status_code == 303, signed.text
            answers = [client.get(f"/ui/p/{seeded.project}").status_code for _ in range(20)]
        # the control: the same page without the cookie is sent to sign in
        stranger = httpx.get(f"{base}/ui/p/{seeded.project}", timeout=30)
    assert answers == [200] * 20
    assert stranger.status_code == 303 and stranger.headers["location"].startswith("/ui/login")
