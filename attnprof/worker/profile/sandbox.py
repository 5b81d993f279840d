"""Running the user's suite in a subprocess that can only hurt its own job (docs/architecture.md, "The jail"), inside
the jail that ``attnprof.worker.profile.jail`` builds around it (namespaces, filesystem, uid); this module holds what
applies with or without one.

- The environment starts empty and is filled from an allow-list: nothing the worker holds (its token, the
  broker's URL, any ``ATTNPROF_*`` setting, anything that looks like a credential) reaches user code.
- A wall-clock limit, and a watchdog on the resident memory of the whole process tree (every process of the
  subprocess's session, and every descendant). Not an address-space rlimit: CUDA reserves far more virtual
  address space than it ever touches, and such a limit breaks it.
- The subprocess leads its own session; whatever stops it (time, memory, a cancel, the job being lost)
  kills the whole tree with SIGKILL, and the tree is killed again after a normal exit to take any child the
  user's code left behind. On Linux the subprocess also dies with the worker (``PR_SET_PDEATHSIG``), so a
  worker killed with SIGKILL leaves no profiling running on its GPU.
- Output (stdout and stderr together) comes to the worker through a pipe, never through a file the job could
  replace: its size is bounded, and its last lines are kept in memory.
- With a cgroup per job (``attnprof.worker.profile.cgroup``), the memory limit counts everything the kernel charges to
the job
  (memfd, tmpfs, dirty page cache), and the process limit is the job's own, not its uid's.
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

from attnprof.core.own_processes import Process, own_processes, process_table
from attnprof.worker.profile.cgroup import JobCgroup

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

# Run first, in the subprocess: join the job's cgroups (while still the worker's uid, which may write them), become
# ``uid``/``gid`` when given (no groups, no new privileges), ask the kernel to
# SIGKILL it when the worker thread that started it dies (after the uid change, which would clear the request),
# bound the processes (threads included) its user may have, then become the real command. The parent's pid is
# checked after the request, closing the race where the worker died before it was made.
_LAUNCHER = (
    "import ctypes, os, resource, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "for procs in filter(None, sys.argv[5].split('\\n')):\n"
    "    with open(procs, 'w') as f:\n"
    "        f.write(str(os.getpid()))\n"
    "uid, gid = int(sys.argv[3]), int(sys.argv[4])\n"
    "if uid >= 0:\n"
    "    os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)\n"
    "    libc.prctl(38, 1, 0, 0, 0) == 0 or os._exit(126)\n"
    "libc.prctl(1, 9)\n"
    "os.getppid() == int(sys.argv[1]) or os._exit(137)\n"
    "n = int(sys.argv[2])\n"
    "n and resource.setrlimit(resource.RLIMIT_NPROC, (n, n))\n"
    "os.execv(sys.argv[6], sys.argv[6:])\n"
)

Stopped = Literal["timeout", "memory", "cancelled", "output", "disk"]


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
    # Processes and threads at once: the job's cgroup's pids limit, or without one RLIMIT_NPROC (which counts every
    # process of the job's uid, so it bounds jobs of one uid together); 0: unbounded.
    max_processes: int = 0
    output_bytes: int = 64 * 1024 * 1024  # stdout and stderr together, as the worker reads them
    disk_bytes: int = 0  # what the job's folder may hold; 0: unbounded


@dataclass(frozen=True)
class Finished:
    """How the subprocess ended. ``exit_code`` is negative for a signal (``-9``: SIGKILL)."""

    exit_code: int | None
    stopped: Stopped | None
    wall_s: float
    peak_rss_bytes: int
    tail: list[str]
    pids: frozenset[int] = frozenset()  # host PIDs of the tree, as seen at each poll
    output_bytes: int = 0
    disk_bytes: int = 0  # what the job's folder held when last measured
    processes_refused: int = 0  # forks refused at the job's cgroup's process limit


# --- the process tree, read from /proc ---------------------------------------------------------------------


def tree(root: int, table: Mapping[int, Process] | None = None, *, alive: bool = True) -> set[int]:
    """``root``, its descendants, and every process of the session ``root`` leads: the job's own processes, as
    ``attnprof.core.own_processes`` defines them for every judge of the GPU's other processes.

    ``alive=False`` once ``root`` was reaped: its pid may then name another process, so only the session
    (whose id the kernel does not hand out again while a member lives) and its descendants count.
    """
    return own_processes(root, table, alive=alive)


def tree_rss_bytes(root: int) -> int:
    """Resident memory of the whole tree of ``root``, in bytes (shared pages are counted in each process)."""
    table = process_table()
    return sum(table[pid].resident_bytes for pid in tree(root, table) if pid in table)


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


def _clean_lines(raw: bytes, lines: int) -> list[str]:
    text = _ANSI.sub("", raw.decode("utf-8", "replace")).replace("\r", "\n")
    kept = [ln.rstrip() for ln in text.split("\n") if ln.strip()]
    return [ln if len(ln) <= _LINE_CHARS else ln[: _LINE_CHARS - 1] + "…" for ln in kept[-lines:]]


def tail_lines(path: Path, lines: int) -> list[str]:
    """The last ``lines`` non-empty lines of a log file the worker wrote itself, ANSI colours removed, each cut at 400
    characters. Never for a file in a job's folder: that goes through ``handback``."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            raw = f.read()
    except OSError:
        return []
    return _clean_lines(raw, lines)


class Output(threading.Thread):
    """Reads the subprocess's output from its pipe: keeps the last 256 KiB in memory (and, when given, copies it to
    a log the worker owns, up to ``max_bytes``), counts every byte, and sets ``over`` past ``max_bytes``. The job
    never holds the file its output is kept in."""

    def __init__(self, fd: int, *, max_bytes: int, copy_to: Path | None = None) -> None:
        super().__init__(name="job-output", daemon=True)
        self._fd = fd
        self._max_bytes = max_bytes
        self._copy_to = copy_to
        self._kept = bytearray()
        self.total_bytes = 0
        self.over = threading.Event()

    def run(self) -> None:
        log = self._copy_to.open("wb") if self._copy_to is not None else None
        try:
            while chunk := os.read(self._fd, 65536):
                if log is not None and self.total_bytes < self._max_bytes:
                    log.write(chunk[: self._max_bytes - self.total_bytes])
                self.total_bytes += len(chunk)
                self._kept += chunk
                if len(self._kept) > 2 * _TAIL_BYTES:
                    del self._kept[: len(self._kept) - _TAIL_BYTES]
                if self.total_bytes > self._max_bytes:
                    self.over.set()
        except OSError:
            pass
        finally:
            if log is not None:
                log.close()

    def tail(self, lines: int) -> list[str]:
        return _clean_lines(bytes(self._kept[-_TAIL_BYTES:]), lines)


def die_with_parent(
    argv: Sequence[str],
    *,
    max_processes: int = 0,
    run_as: tuple[int, int] | None = None,
    join: Sequence[str] = (),
) -> list[str]:
    """``argv`` wrapped so that, on Linux, the process is SIGKILLed when the thread that starts it dies; it joins the
    cgroups whose ``cgroup.procs`` files ``join`` names (before anything else, while it still may), runs as ``run_as``
    (uid, gid: a root worker's job user) when given, and its user may hold at most ``max_processes`` processes and
    threads when not 0."""
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
        "\n".join(join),
        *argv,
    ]


def run(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    limits: ProcessLimits,
    log_path: Path | None = None,
    stop: threading.Event | None = None,
    lines: int = 40,
    run_as: tuple[int, int] | None = None,
    watch: Callable[[set[int]], None] | None = None,
    cgroup: JobCgroup | None = None,
    disk_bytes: Callable[[], int] | None = None,
    pass_fds: Sequence[int] = (),
) -> Finished:
    """Run ``argv`` under the limits (as ``run_as``, uid and gid, when given; inside ``cgroup`` when given, whose
    memory, with everything the kernel charges to it, is then what the memory limit bounds); ``stop`` set by another
    thread (a cancel) kills it; ``watch`` is called at each poll with every host PID of the tree seen so far;
    ``disk_bytes`` says what the job's folder holds (checked against ``limits.disk_bytes`` every second). Output goes
    through a pipe to the worker (``log_path``: a copy the worker writes, outside the job's reach). Never raises for
    what the subprocess does; raises ``OSError`` only when it cannot be started."""
    command = die_with_parent(
        argv,
        max_processes=0 if cgroup is not None else limits.max_processes,
        run_as=run_as,
        join=cgroup.procs_files if cgroup is not None else (),
    )
    started = time.monotonic()
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            pass_fds=tuple(pass_fds),
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    output = Output(read_end, max_bytes=limits.output_bytes, copy_to=log_path)
    output.start()
    stopped: Stopped | None = None
    peak = 0
    seen: set[int] = {proc.pid}
    disk_checked = 0.0
    used_disk = 0
    try:
        while True:
            try:
                code = proc.wait(timeout=limits.poll_s)
                break
            except subprocess.TimeoutExpired:
                pass
            table = process_table()
            members = tree(proc.pid, table)
            if cgroup is not None:
                members |= cgroup.members()
            seen |= members
            if watch is not None:
                watch(seen)
            if cgroup is not None:
                held = cgroup.memory_bytes()
            else:
                held = sum(table[pid].resident_bytes for pid in members if pid in table)
            peak = max(peak, held)
            if disk_bytes is not None and time.monotonic() - disk_checked >= 1.0:
                used_disk = disk_bytes()
                disk_checked = time.monotonic()
            if stop is not None and stop.is_set():
                stopped = "cancelled"
            elif held > limits.memory_bytes or (cgroup is not None and cgroup.oom_kills()):
                stopped = "memory"
                peak = max(peak, limits.memory_bytes)  # the cgroup holds it at the limit: the kernel's kill says so
            elif output.over.is_set():
                stopped = "output"
            elif limits.disk_bytes and used_disk >= limits.disk_bytes:
                stopped = "disk"
            elif time.monotonic() - started > limits.timeout_s:
                stopped = "timeout"
            if stopped is not None:
                _kill_all(proc.pid, cgroup)
                code = proc.wait()
                break
    finally:
        if proc.returncode is None:  # an exception in this thread: leave nothing running
            _kill_all(proc.pid, cgroup)
            proc.wait()
        _kill_all(proc.pid, cgroup, alive=False)  # whatever the user's code left behind in its session
        output.join(timeout=5)
        os.close(read_end)
    if stopped is None and cgroup is not None and cgroup.oom_kills():
        stopped = "memory"  # the kernel killed a process at the limit between two polls
        peak = max(peak, limits.memory_bytes)
    if stopped is None and output.total_bytes > limits.output_bytes:
        stopped = "output"
    if stopped is None and disk_bytes is not None and limits.disk_bytes:
        used_disk = disk_bytes()
        if used_disk >= limits.disk_bytes:
            stopped = "disk"
    return Finished(
        exit_code=code,
        stopped=stopped,
        wall_s=time.monotonic() - started,
        peak_rss_bytes=peak,
        tail=output.tail(lines),
        pids=frozenset(seen),
        output_bytes=output.total_bytes,
        disk_bytes=used_disk,
        processes_refused=cgroup.processes_refused() if cgroup is not None else 0,
    )


def _kill_all(root: int, cgroup: JobCgroup | None, *, alive: bool = True) -> None:
    kill_tree(root, alive=alive)
    if cgroup is not None:
        cgroup.kill()
