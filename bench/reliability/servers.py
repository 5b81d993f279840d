"""The broker and the database of the benchmark's own: a Redis server and a Postgres cluster on free loopback
ports in temporary folders, never the shared ones (Redis is killed and Postgres stopped here)."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import pipeline_load as pipeline
from bench import service_seed as seeding
from bench.reliability.common import wait_for
from tests.pgcluster import Cluster, _bindir


@dataclass
class OwnRedis:
    """``redis-server`` as a child process on a free loopback port, its files in ``root``; killed and started
    again on the same port and folder (with ``aof``, it comes back with what its append-only file holds)."""

    root: Path
    aof: bool
    port: int = field(default_factory=pipeline.free_port)
    password: str = field(default_factory=lambda: secrets.token_hex(16))
    popen: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root)]
        argv += ["--daemonize", "no", "--save", "", "--requirepass", self.password, "--logfile", "redis.log"]
        argv += ["--appendonly", "yes" if self.aof else "no", "--appendfsync", "everysec"]
        self.popen = subprocess.Popen(argv, cwd=self.root, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_for("redis to answer", self.answers, 20, 0.05)

    def answers(self) -> bool:
        import redis

        try:
            r = redis.Redis.from_url(self.url(), socket_timeout=1)
            try:
                return bool(r.ping())
            finally:
                r.close()
        except redis.RedisError:
            return False

    def kill9(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait()

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url(), socket_timeout=5)

    def version(self) -> str:
        done = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
        return done.stdout.strip()


@contextmanager
def own_postgres() -> Iterator[Cluster]:
    """A Postgres cluster of the benchmark's own (``tests/pgcluster.py``): initdb on a free port in a temporary
    folder, as the postgres user when this runs as root; stopped and removed on the way out."""
    root = Path(tempfile.mkdtemp(prefix="attnprof-rel-pg-"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    cluster = Cluster(root=root, port=pipeline.free_port(), bindir=_bindir())
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        if (cluster.data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def admin_url(cluster: Cluster) -> str:
    return seeding.libpq_url(cluster.url())
