"""The sandbox: environment scrubbing, the wall-clock limit, the memory watchdog, cancels, the process tree."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from attnprof.worker.profile import sandbox

PY = sys.executable


def _env(tmp: Path) -> dict[str, str]:
    (tmp / "home").mkdir(exist_ok=True)
    (tmp / "tmp").mkdir(exist_ok=True)
    return sandbox.scrubbed_env({"PATH": "/usr/bin:/bin"}, home=tmp / "home", tmp=tmp / "tmp", pythonpath=tmp)


def _dead(pid: int, wait_s: float = 5) -> bool:
    """Gone, or a zombie (killed, not yet reaped by whoever inherited it)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def _run(tmp: Path, code: str, **limits: float) -> sandbox.Finished:
    lim = sandbox.ProcessLimits(
        timeout_s=limits.get("timeout_s", 30), memory_bytes=int(limits.get("memory_bytes", 2**34))
    )
    return sandbox.run([PY, "-c", code], cwd=tmp, env=_env(tmp), log_path=tmp / "out.log", limits=lim, lines=5)


def test_the_environment_holds_no_secret(tmp_path: Path) -> None:
    source = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "3",
        "HOME": "/root",
        "ATTNPROF_WORKER_TOKEN": "ap_secret",
        "ATTNPROF_BROKER_URL": "redis://:pw@host/0",
        "ATTNPROF_DATABASE_URL": "postgresql://u:pw@db/x",
        "GITHUB_TOKEN": "ghp_x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "PYTHONPATH": "/worker/site",
        "HF_HOME": "/models",
        "MY_API_KEY": "k",
        "UNRELATED": "1",
    }
    env = sandbox.scrubbed_env(
        source,
        home=tmp_path / "h",
        tmp=tmp_path / "t",
        pythonpath=tmp_path / "src",
        extra=["HF_HOME", "MY_API_KEY", "ATTNPROF_DATABASE_URL", "GITHUB_TOKEN"],
    )
    assert env["PATH"] == "/usr/bin" and env["LANG"] == "C.UTF-8" and env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["HF_HOME"] == "/models"  # listed by the operator, and not secret-looking
    assert env["HOME"] == str(tmp_path / "h") and env["TMPDIR"] == str(tmp_path / "t")
    assert env["PYTHONPATH"] == str(tmp_path / "src")
    for name in (
        "ATTNPROF_WORKER_TOKEN",
        "ATTNPROF_BROKER_URL",
        "ATTNPROF_DATABASE_URL",
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "SSH_AUTH_SOCK",
        "MY_API_KEY",
        "UNRELATED",
    ):
        assert name not in env, name
    assert not any("pw" in v or "secret" in v for v in env.values())


def test_exit_code_and_the_last_lines(tmp_path: Path) -> None:
    done = _run(tmp_path, "import sys\nfor i in range(100): print(f'line {i}')\nsys.exit(3)")
    assert done.exit_code == 3 and done.stopped is None
    assert done.tail == [f"line {i}" for i in range(95, 100)]


def test_the_wall_clock_limit_kills_the_whole_tree(tmp_path: Path) -> None:
    code = (
        "import subprocess, time\n"
        f"child = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(60)'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    done = _run(tmp_path, code, timeout_s=1.5)
    assert done.stopped == "timeout" and done.exit_code == -9
    assert time.monotonic() - started < 10
    assert _dead(int((tmp_path / "child.pid").read_text()))
    assert done.tail == ["started"]


def test_a_child_left_behind_after_a_normal_exit_is_killed(tmp_path: Path) -> None:
    code = (
        "import subprocess\n"
        f"child = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(60)'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
    )
    done = _run(tmp_path, code)
    assert done.exit_code == 0
    assert _dead(int((tmp_path / "child.pid").read_text()))


def test_the_memory_watchdog_stops_a_tree_over_its_limit(tmp_path: Path) -> None:
    code = "import time\nblob = b'x' * (400 * 1024 * 1024)\nprint('allocated', flush=True)\ntime.sleep(60)\n"
    done = _run(tmp_path, code, memory_bytes=200 * 1024 * 1024)
    assert done.stopped == "memory"
    assert done.peak_rss_bytes > 200 * 1024 * 1024


def test_a_cancel_stops_it(tmp_path: Path) -> None:
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    lim = sandbox.ProcessLimits(timeout_s=30, memory_bytes=2**34)
    started = time.monotonic()
    done = sandbox.run(
        [PY, "-c", "import time; time.sleep(60)"],
        cwd=tmp_path,
        env=_env(tmp_path),
        log_path=tmp_path / "o.log",
        limits=lim,
        stop=stop,
    )
    assert done.stopped == "cancelled" and time.monotonic() - started < 5


def test_the_subprocess_sees_only_its_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNPROF_WORKER_TOKEN", "ap_do_not_leak")
    env = sandbox.scrubbed_env(dict(__import__("os").environ), home=tmp_path, tmp=tmp_path, pythonpath=tmp_path)
    lim = sandbox.ProcessLimits(timeout_s=30, memory_bytes=2**34)
    done = sandbox.run(
        [PY, "-c", "import os; print(sorted(os.environ))"],
        cwd=tmp_path,
        env=env,
        log_path=tmp_path / "o.log",
        limits=lim,
    )
    assert done.exit_code == 0
    assert "ATTNPROF" not in done.tail[-1] and "'HOME'" in done.tail[-1]


def test_tail_lines_strips_colours_and_cuts_long_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"\x1b[31mred\x1b[0m\n\n" + b"y" * 1000 + b"\nprogress 1\rprogress 2\n")
    lines = sandbox.tail_lines(log, 10)
    assert lines[0] == "red" and len(lines[1]) == 400 and lines[-2:] == ["progress 1", "progress 2"]
