"""``attnprof serve`` as a process of its own, for the service tests that need a real server rather than the
in-process test client: its database made unreachable under it, an answer lost on the way back.

The database it serves is migrated with Alembic and seeded through committed sessions (another process reads
it), so these tests work in a database of their own, never in the rolled-back one of ``pgtest``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from attnprof.server import migrate
from attnprof.server.auth import service as auth
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.projects import service as projects
from attnprof.server.testbeds import service as testbeds
from tests.pgcluster import free_port
from tests.server.stack import REDIS_URL

ATTNPROF = str(Path(sys.executable).parent / "attnprof")


@dataclass(frozen=True)
class Seeded:
    """A project of the test's own and its tokens; ``worker``: a worker token bound to ``testbed``."""

    project: str
    submit: str
    read: str
    testbed: str
    worker: str


def seed(database_url: str) -> Seeded:
    """Migrate the database at ``database_url`` to head and make a project, its tokens and a testbed."""
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            project = projects.create(session, name=f"outage-{uuid.uuid4().hex[:8]}")
            submit = auth.create_project_token(session, project_id=project.id, role="submit")[1]
            read = auth.create_project_token(session, project_id=project.id, role="read")[1]
            testbed = f"tb-{uuid.uuid4().hex[:8]}"
            worker = auth.create_worker_token(session, testbed_id=testbeds.ensure(session, testbed).id)[1]
            session.commit()
            return Seeded(project=project.name, submit=submit, read=read, testbed=testbed, worker=worker)
    finally:
        engine.dispose()


@dataclass
class Server:
    url: str
    log: Path
    popen: subprocess.Popen[bytes]

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def server_env(database_url: str) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        ATTNPROF_DATABASE_URL=database_url,
        ATTNPROF_BROKER_URL=REDIS_URL,
        ATTNPROF_PUBLIC_URL="http://attnprof.test",
        ATTNPROF_RATE_LIMIT__REQUESTS_PER_MINUTE="60000",
        ATTNPROF_RATE_LIMIT__BURST="10000",
    )
    return env


@contextmanager
def serve(
    database_url: str, logs: Path, *, port: int | None = None, workers: int = 1, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """``attnprof serve`` on ``port`` (a free one by default) for ``database_url``, up once ``/healthz`` answers
    (which needs no database); stopped when the block ends. ``env`` adds to or overrides ``server_env``'s."""
    port = port or free_port()
    log = logs / f"serve-{port}-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [ATTNPROF, "serve", "--port", str(port), "--workers", str(workers)],
            env={**server_env(database_url), **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(url=f"http://127.0.0.1:{port}", log=log, popen=popen)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert popen.poll() is None, server.text()
            try:
                if httpx.get(f"{server.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the server did not start: {server.text()}"
            time.sleep(0.1)
        yield server
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
