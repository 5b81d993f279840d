"""``attnprof demo --once`` (what ``make demo`` runs, stopping after the verdicts): SQLite, the filesystem
broker, real Celery worker processes and the service, on one machine with nothing else installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_the_demo_names_its_regression(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNPROF_")}
    argv = [str(Path(sys.executable).parent / "attnprof"), "demo", "--once", "--port", "0", "--dir", str(tmp_path)]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((tmp_path / "logs").glob("*.log")))
    assert done.returncode == 0, done.stdout + done.stderr + logs
    out = done.stdout
    assert "verdict: pass" in out  # the first run of main
    named = "the planted regression, as the comparison names it: my-attention: the backend that ran changed"
    assert f"{named}: cpu_flash -> eager" in out
    assert "verdict: fail" in out or "the run was marked suspect" in out
    # with --once the service stops as the demo ends: it offers no link of its own to open afterwards, and says so
    assert "in the dashboard:" not in out and "--once: the service and the workers stop now" in out
    assert (tmp_path / "attnprof.db").is_file() and (tmp_path / "queue").is_dir()
    # everything it started is stopped: no process is left running in the demo's directory
    assert [pid for pid in _pids() if _cwd(pid) == tmp_path] == []


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _cwd(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None
