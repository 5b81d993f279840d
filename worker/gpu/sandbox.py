"""Running the user's suite in a subprocess that can only hurt its own job (DESIGN 6), inside the jail that
``worker.gpu.jail`` builds around it (namespaces, filesystem, uid); this module holds what applies with or without one.

- The environment starts empty and is filled from an allow-list: nothing the worker holds (its token, the
  broker's URL, any ``ATTNPROF_*`` setting, anything that looks like a credential) reaches user code.
- A wall-clock limit, and a watchdog on the resident memory of the whole process tree (every process of the
  subprocess's session, and every descendant). Not an address-space rlimit: CUDA reserves far more virtual
  address space than it ever touches, and such a limit breaks it.
- The subprocess leads its own session; whatever stops it (time, memory, a cancel, the job being lost)
  kills the whole tree with SIGKILL, and the tree is killed again after a normal exit to take any child the
  user's code left behind. On Linux the subprocess also dies with the worker (``PR_SET_PDEATHSIG``), so a
  worker killed with SIGKILL leaves no profiling running on its GPU.
- Output (stdout and stderr together) goes to a file in the scratch directory; its last lines are kept.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# Variables passed through when the worker has them: locale, the GPU it was given, where CUDA lives, and
# the thread counts that decide CPU timings. Nothing else.
ALLOWED_ENV = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
# A name like these is never passed, even when an operator lists it in ``pass_env``.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|PRIVATE|ACCESS_?KEY|AUTH|COOKIE|SESSION", re.I)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TAIL_BYTES = 256 * 1024
_LINE_CHARS = 400

# Run first, in the subprocess: become ``uid``/``gid`` when given (no groups, no new privileges), ask the kernel to
# SIGKILL it when the worker thread that started it dies (after the uid change, which would clear the request),
# bound the processes (threads included) its user may have, then become the real command. The parent's pid is
# checked after the request, closing the race where the worker died before it was made.
_LAUNCHER = (
    "import ctypes, os, resource, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "uid, gid = int(sys.argv[3]), int(sys.argv[4])\n"
    "if uid >= 0:\n"
    "    os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)\n"
    "    libc.prctl(38, 1, 0, 0, 0) == 0 or os._exit(126)\n"
    "libc.prctl(1, 9)\n"
    "os.getppid() == int(sys.argv[1]) or os._exit(137)\n"
    "n = int(sys.argv[2])\n"
    "n and resource.setrlimit(resource.RLIMIT_NPROC, (n, n))\n"
    "os.execv(sys.argv[5], sys.argv[5:])\n"
)

Stopped = Literal["timeout", "memory", "cancelled"]


def is_passable(name: str) -> bool:
    """Whether an environment variable may reach user code at all."""
    return not name.startswith("ATTNPROF_") and not _SECRET_NAME.search(name)


def scrubbed_env(
    source: Mapping[str, str],
    *,
    home: Path,
    tmp: Path,
    pythonpath: Path,
    extra: Sequence[str] = (),
    library_paths: Sequence[Path] = (),
) -> dict[str, str]:
    """The subprocess's whole environment: the allow-list (plus ``extra``, minus anything secret-looking) taken
    from ``source``, then a home, temporary directory and caches inside the job's scratch directory. The job's
    source comes first on ``PYTHONPATH``, then ``library_paths`` (where the profiler is, when not installed)."""
    env: dict[str, str] = {}
    for name in (*ALLOWED_ENV, *extra):
        if is_passable(name) and name in source:
            env[name] = source[name]
    env.setdefault("PATH", os.defpath)
    env.update(
        HOME=str(home),
        TMPDIR=str(tmp),
        TMP=str(tmp),
        TEMP=str(tmp),
        PYTHONPATH=os.pathsep.join(str(p) for p in (pythonpath, *library_paths)),
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONFAULTHANDLER="1",  # a segfault in user code prints the Python stack into the kept output
    )
    # Compile caches live with the job: a cache shared between jobs would let one job's code change another's
    # kernels. An operator who trusts every submitter may pass shared ones through ``extra``.
    env.setdefault("XDG_CACHE_HOME", str(home / ".cache"))
    env.setdefault("TRITON_CACHE_DIR", str(home / ".triton"))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp / "inductor"))
    env.setdefault("MPLCONFIGDIR", str(tmp / "matplotlib"))
    return env


@dataclass(frozen=True)
class ProcessLimits:
    """Bounds of one run: wall-clock seconds, resident bytes of the tree, and how often they are checked."""

    timeout_s: float
    memory_bytes: int
    poll_s: float = 0.25
    max_processes: int = 0  # processes and threads of the job's user at once (RLIMIT_NPROC); 0: unbounded


@dataclass(frozen=True)
class Finished:
    """How the subprocess ended. ``exit_code`` is negative for a signal (``-9``: SIGKILL)."""

    exit_code: int | None
    stopped: Stopped | None
    wall_s: float
    peak_rss_bytes: int
    tail: list[str]
    pids: frozenset[int] = frozenset()  # host PIDs of the tree, as seen at each poll


# --- the process tree, read from /proc ---------------------------------------------------------------------

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _table() -> dict[int, tuple[int, int, int]]:
    """pid -> (parent pid, session id, resident bytes) of every process we can read."""
    out: dict[int, tuple[int, int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read().decode("ascii", "replace")
        except OSError:  # it exited meanwhile
            continue
        # The command name is in parentheses and may hold spaces: the fields that follow come after the last ')'.
        fields = raw[raw.rfind(")") + 2 :].split()
        try:
            out[int(name)] = (int(fields[1]), int(fields[3]), int(fields[21]) * _PAGE_BYTES)
        except (IndexError, ValueError):
            continue
    return out


def tree(root: int, table: Mapping[int, tuple[int, int, int]] | None = None, *, alive: bool = True) -> set[int]:
    """``root``, its descendants, and every process of the session ``root`` leads.

    ``alive=False`` once ``root`` was reaped: its pid may then name another process, so only the session
    (whose id the kernel does not hand out again while a member lives) and its descendants count.
    """
    table = _table() if table is None else table
    found = {pid for pid, (_, sid, _) in table.items() if sid == root}
    if alive and root in table:
        found.add(root)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tree_rss_bytes(root: int) -> int:
    """Resident memory of the whole tree of ``root``, in bytes (shared pages are counted in each process)."""
    table = _table()
    return sum(table[pid][2] for pid in tree(root, table) if pid in table)


def kill_tree(root: int, *, alive: bool = True) -> None:
    """SIGKILL the process group ``root`` leads, then any process of its session or descendant that left it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGKILL)
    for pid in tree(root, alive=alive):
        if pid == os.getpid():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


# --- running ---------------------------------------------------------------------------------------------


def tail_lines(path: Path, lines: int) -> list[str]:
    """The last ``lines`` non-empty lines of a log file, ANSI colours removed, each cut at 400 characters."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            raw = f.read()
    except OSError:
        return []
    text = _ANSI.sub("", raw.decode("utf-8", "replace")).replace("\r", "\n")
    kept = [ln.rstrip() for ln in text.split("\n") if ln.strip()]
    return [ln if len(ln) <= _LINE_CHARS else ln[: _LINE_CHARS - 1] + "…" for ln in kept[-lines:]]


def die_with_parent(argv: Sequence[str], *, max_processes: int = 0, run_as: tuple[int, int] | None = None) -> list[str]:
    """``argv`` wrapped so that, on Linux, the process is SIGKILLed when the thread that starts it dies; it runs as
    ``run_as`` (uid, gid: a root worker's job user) when given, and its user may hold at most ``max_processes``
    processes and threads when not 0."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    uid, gid = run_as or (-1, -1)
    return [
        sys.executable,
        "-S",
        "-E",
        "-c",
        _LAUNCHER,
        str(os.getpid()),
        str(max_processes),
        str(uid),
        str(gid),
        *argv,
    ]


def run(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    log_path: Path,
    limits: ProcessLimits,
    stop: threading.Event | None = None,
    lines: int = 40,
    run_as: tuple[int, int] | None = None,
    watch: Callable[[set[int]], None] | None = None,
) -> Finished:
    """Run ``argv`` under the limits (as ``run_as``, uid and gid, when given); ``stop`` set by another thread (a
    cancel) kills it; ``watch`` is called at each poll with every host PID of the tree seen so far. Never raises
    for what the subprocess does; raises ``OSError`` only when it cannot be started."""
    command = die_with_parent(argv, max_processes=limits.max_processes, run_as=run_as)
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    stopped: Stopped | None = None
    peak = 0
    seen: set[int] = {proc.pid}
    try:
        while True:
            try:
                code = proc.wait(timeout=limits.poll_s)
                break
            except subprocess.TimeoutExpired:
                pass
            table = _table()
            members = tree(proc.pid, table)
            seen |= members
            if watch is not None:
                watch(seen)
            rss = sum(table[pid][2] for pid in members if pid in table)
            peak = max(peak, rss)
            if stop is not None and stop.is_set():
                stopped = "cancelled"
            elif rss > limits.memory_bytes:
                stopped = "memory"
            elif time.monotonic() - started > limits.timeout_s:
                stopped = "timeout"
            if stopped is not None:
                kill_tree(proc.pid)
                code = proc.wait()
                break
    finally:
        if proc.returncode is None:  # an exception in this thread: leave nothing running
            kill_tree(proc.pid)
            proc.wait()
        kill_tree(proc.pid, alive=False)  # whatever the user's code left behind in its session
    return Finished(
        exit_code=code,
        stopped=stopped,
        wall_s=time.monotonic() - started,
        peak_rss_bytes=peak,
        tail=tail_lines(log_path, lines),
        pids=frozenset(seen),
    )
