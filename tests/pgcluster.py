"""A Postgres cluster of a test's own, which the test may stop and start: the database outage tests.

``initdb`` and ``pg_ctl`` make it in a temporary folder and run it on a free loopback port (as the ``postgres``
user when the tests run as root: Postgres refuses to run as root). The shared cluster at 5432, which every other
test uses, is never stopped. ``cluster`` (module scope) is the fixture; modules import it by its function's name.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest


def _bindir() -> Path:
    """The folder of the newest installed Postgres' programs (Debian keeps them off PATH)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if not versions:
        raise RuntimeError("no pg_ctl on PATH nor under /usr/lib/postgresql: the outage tests need Postgres' programs")
    return Path(versions[-1]).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    root: Path
    port: int
    bindir: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of ``database`` on this cluster."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, program: str, *args: str, timeout_s: float = 60) -> None:
        argv = [str(self.bindir / program), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed ({done.returncode}): {done.stderr or done.stdout}")

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C",
                  "--no-sync", "--no-instructions")  # fmt: skip

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` ends every session (their clients read a terminated connection), ``immediate``
        drops them as a crash would."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        try:
            psycopg.connect(self.url().replace("+psycopg", ""), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def create_database(self) -> str:
        """A new empty database: its SQLAlchemy URL."""
        name = f"outage_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.url().replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        try:
            return (self.root / "server.log").read_text(errors="replace")
        except OSError:
            return ""


@pytest.fixture(scope="module", name="cluster")
def cluster_fixture() -> Iterator[Cluster]:
    """A running cluster of the module's own; stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="attnprof-pg-"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    cluster = Cluster(root=root, port=free_port(), bindir=_bindir())
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        if (cluster.data / "postmaster.pid").exists():
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
