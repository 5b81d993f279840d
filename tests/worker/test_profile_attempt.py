"""One attempt as plain code (``attnprof.worker.profile.profile.run_job``) against a stand-in for the service's HTTP
API: the paths that need no profiling, and the scratch directory, removed whatever happens."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from attnprof.contract.worker_api import ClaimAnswer, HeartbeatAnswer, WorkerResultAnswer
from attnprof.worker.profile import profile
from attnprof.worker.profile import scratch as scratches
from attnprof.worker.profile.api import Stale, Unreachable
from tests.worker.stack import tar_gz


class FakeAPI:
    """The service as the worker sees it; records what it was told."""

    def __init__(self, spec: str = "", data: bytes | None = None, **fail: Exception) -> None:
        self.spec = spec
        self.data = data
        self.fail = fail
        self.calls: list[tuple[str, Any]] = []
        self.secrets: list[str] = []
        self.tokens: list[str] = []
        self.cancelled = threading.Event()

    def __enter__(self) -> FakeAPI:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def _maybe(self, name: str) -> None:
        if name in self.fail:
            raise self.fail[name]

    def claim(self, job_id: str, attempt: int, worker: str, secret: str) -> ClaimAnswer:
        self.calls.append(("claim", attempt))
        self.secrets.append(secret)
        self._maybe("claim")
        return ClaimAnswer.model_validate(
            {
                "id": job_id,
                "attempt": attempt,
                "spec": self.spec,
                "bundle_sha256": "x" if self.data else None,
                "repo": None,
                "commit": "c0ffee",
                "testbed": "tb",
                "token": f"apj_{job_id}",
                "lease_s": 60.0,
            }
        )

    def for_job(self, token: str) -> FakeAPI:
        """The attempt's client: the same stand-in, noting the token it was made with."""
        self.tokens.append(token)
        return self

    def heartbeat(self, job_id: str, attempt: int) -> HeartbeatAnswer:
        self.calls.append(("heartbeat", attempt))
        cancelled = self.cancelled.is_set()
        return HeartbeatAnswer(status="cancelled" if cancelled else "running", cancelled=cancelled)

    def bundle(self, job_id: str, *, max_bytes: int) -> bytes:
        self._maybe("bundle")
        assert self.data is not None
        return self.data

    def result(self, job_id: str, attempt: int, document: dict[str, Any]) -> WorkerResultAnswer:
        self.calls.append(("result", document))
        self._maybe("result")
        return WorkerResultAnswer.model_validate({"run_id": "r1", "status": "analyzing", "duplicate": False})

    def trace(self, job_id: str, attempt: int, name: str, data: bytes) -> None:
        self.calls.append(("trace", name))

    def failure(self, job_id: str, attempt: int, reason: str, *, timed_out: bool, retry: bool) -> None:
        self.calls.append(("failure", (reason, timed_out, retry)))
        self._maybe("failure")


def _cfg(tmp: Path, **kw: Any) -> profile.ProfileConfig:
    base: dict[str, Any] = {
        "service_url": "http://127.0.0.1:9",
        "token": "ap_x",
        "device": "cpu",
        "timeout_s": 60.0,
        "memory_limit_bytes": 2**33,
        "heartbeat_s": 0.1,
        "scratch_root": tmp / "scratch",
        "cache_dir": tmp / "cache",
        "output_lines": 10,
        "pass_env": (),
        "bundle_bytes": 1 << 20,
        "bundle_unpacked_bytes": 1 << 20,
        "bundle_members": 100,
    }
    base.update(kw)
    return profile.ProfileConfig(**base)


def _reported(api: FakeAPI) -> list[Any]:
    return [v for k, v in api.calls if k == "failure"]


def test_bad_input_is_reported_and_the_scratch_removed(tmp_path: Path) -> None:
    api = FakeAPI(spec='[suite]\nname = "s"\n\n[[cases]]\nname = "c"\ntarget = "sdpa"\nhed_dim = 64\n')
    assert profile.run_job("j1", 1, "apc_secret", _cfg(tmp_path), api=lambda: api) == "failed"
    ((reason, timed_out, retry),) = _reported(api)
    assert reason.startswith("the suite could not run (bad input, exit code 2)") and "hed_dim" in reason
    assert not timed_out and not retry
    # Claimed with the message's secret; everything after the claim went through the attempt's job token.
    assert api.secrets == ["apc_secret"] and set(api.tokens) == {"apj_j1"}
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_refused_bundle_is_reported_and_nothing_escapes(tmp_path: Path) -> None:
    api = FakeAPI(spec="x", data=tar_gz({"../escape.py": b"print('out')"}))
    assert profile.run_job("j2", 1, "apc_secret", _cfg(tmp_path), api=lambda: api) == "failed"
    ((reason, _, retry),) = _reported(api)
    assert reason.startswith("the bundle was refused on the worker: bundle: member '../escape.py' leaves the bundle")
    assert not retry and not (tmp_path / "escape.py").exists()
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_worker_error_is_retried_and_the_scratch_removed(tmp_path: Path) -> None:
    api = FakeAPI(spec="x", data=b"\x1f\x8b", bundle=RuntimeError("disk on fire"))
    assert profile.run_job("j3", 1, "apc_secret", _cfg(tmp_path), api=lambda: api) == "failed"
    ((reason, _, retry),) = _reported(api)
    assert reason == "the worker failed: RuntimeError: disk on fire" and retry
    assert list((tmp_path / "scratch").iterdir()) == []


def test_an_unreachable_service_leaves_the_job_to_the_sweeper_and_the_scratch_removed(tmp_path: Path) -> None:
    api = FakeAPI(spec="not toml [", failure=Unreachable("down"))
    assert profile.run_job("j4", 1, "apc_secret", _cfg(tmp_path), api=lambda: api) == "unreachable"
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_stale_delivery_is_dropped_without_a_trace(tmp_path: Path) -> None:
    api = FakeAPI(claim=Stale("409 conflict: attempt 1 is stale"))
    assert profile.run_job("j5", 1, "apc_secret", _cfg(tmp_path), api=lambda: api) == "dropped"
    assert api.calls == [("claim", 1)] and api.tokens == []
    assert not (tmp_path / "scratch").exists() or list((tmp_path / "scratch").iterdir()) == []


def test_a_job_cancelled_before_the_run_reports_nothing(tmp_path: Path) -> None:
    api = FakeAPI(spec="x", data=tar_gz({"big.bin": b"0" * 10}))
    api.cancelled.set()
    slow = threading.Event()
    original = profile.archive.unpack

    def unpack(*a: Any, **kw: Any) -> int:
        slow.wait(0.5)  # long enough for a heartbeat to say "cancelled"
        return original(*a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profile.archive, "unpack", unpack)
        assert profile.run_job("j6", 1, "apc_secret", _cfg(tmp_path), api=lambda: api) == "cancelled"
    assert _reported(api) == [] and list((tmp_path / "scratch").iterdir()) == []


def test_scratch_left_by_a_dead_worker_is_reaped(tmp_path: Path) -> None:
    root = tmp_path / "root"
    dead = scratches.make(root, "job-a", 1, disk_bytes=0).path
    mine = scratches.make(root, "job-b", 1, disk_bytes=0).path
    elsewhere = scratches.make(root, "job-c", 1, disk_bytes=0).path
    gone = root / dead.name.replace(f"-p{os.getpid()}n", "-p999999n")
    dead.rename(gone)
    (gone / "job" / "src" / "ro").write_text("x")
    (gone / "job" / "src" / "ro").chmod(0o400)
    (gone / "job" / "src").chmod(0o500)
    # A worker of another PID namespace (another container on a shared volume): pid 999999 means nothing here, so
    # its folder is never reaped, alive or not.
    other = root / re.sub(r"-p\d+n\d+-", "-p999999n1-", elsewhere.name)
    elsewhere.rename(other)
    assert scratches.reap_stale(root) == [gone]
    assert not gone.exists() and mine.exists() and other.exists()


def test_a_profile_worker_loads_no_database_server_or_torch_code() -> None:
    import subprocess
    import sys

    # The app is built the way the start builds it: from the GPU worker's own settings, given in code.
    probe = (
        "import sys\n"
        "from attnprof.worker.profile.app import make_app\n"
        "from attnprof.worker.profile.settings import GpuWorkerSettings\n"
        "import attnprof.worker.profile.device\n"
        "app = make_app(GpuWorkerSettings(broker_url='redis://127.0.0.1:6379/0', worker_token='ap_probe'))\n"
        "print(sorted(n for n in app.tasks if not n.startswith('celery.')))\n"
        "heavy = {'service', 'sqlalchemy', 'alembic', 'psycopg', 'fastapi', 'starlette', 'torch'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
        "print('database_url' in GpuWorkerSettings.model_fields)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[:3] == ["['profile.run']", "[]", "False"], done.stdout + done.stderr
