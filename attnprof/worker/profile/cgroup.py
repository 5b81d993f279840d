"""A control group per job: the limits that count everything a job holds (docs/isolation.md, section 3).

A watchdog that sums the resident set of the job's processes misses what a job can hold without it: a ``memfd``,
files in the jail's ``/tmp`` and ``/dev/shm`` (tmpfs), the page cache its writes dirty. The kernel charges all of
these to the memory controller of the cgroup whose process caused them, and the pids controller counts the job's
processes and threads on their own, not per uid (``RLIMIT_NPROC`` counts every process of a uid, so jobs that run
as one uid would draw on one budget). So each job gets a cgroup of its own, below the worker's: ``memory`` at the
job's limit (swap included where the kernel accounts it), ``pids`` at its process limit. The worker's launcher
joins it before it starts the jail, so everything the job starts is inside.

Both layouts are handled: the unified hierarchy (cgroup v2) and the legacy one (v1, a hierarchy per controller).
In v2 a cgroup with processes cannot hand controllers to children, so the worker first moves itself into a leaf of
its own (``attnprof-worker-<pid>``) and enables ``memory`` and ``pids`` for its siblings.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from attnprof.worker.profile import owner

_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "pids")


# A job's cgroup (``attnprof-<job>-a<attempt>-<tag>``), a worker's own leaf (``attnprof-worker-<tag>``) or its
# self-test's, each with its worker's tag (``attnprof.worker.profile.owner``).
_STALE = re.compile(r"^attnprof-.*-p(\d+)n(\d+)$")


class CgroupUnavailable(Exception):
    """No cgroup can be made for jobs here; the message says what is missing."""


def _read(path: Path) -> str:
    return path.read_text().strip()


def _stat(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[name] = int(value)
    return out


def _own_paths(proc_cgroup: str) -> dict[str, str]:
    """controller (``""`` for the unified hierarchy) -> this process's cgroup path, from ``/proc/self/cgroup``."""
    out: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            out[controller] = parts[2]
    return out


def _mounts() -> dict[str, tuple[Path, str]]:
    """controller (``""``: the unified hierarchy) -> where its hierarchy is mounted, and which of its cgroups the
    mount shows at that point (``/`` for the whole hierarchy; a container's own cgroup where only that is mounted)."""
    found: dict[str, tuple[Path, str]] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, extra = left.split(), right.split()
            if len(fields) < 5 or len(extra) < 3:
                continue
            root, point = fields[3], Path(fields[4])
            if extra[0] == "cgroup2":
                found.setdefault("", (point, root))
            elif extra[0] == "cgroup":
                for option in extra[2].split(","):
                    if option in _CONTROLLERS:
                        found.setdefault(option, (point, root))
    return found


def _folder(mount: tuple[Path, str], own: str) -> Path:
    """Where this process's cgroup ``own`` (as ``/proc/self/cgroup`` names it) is under ``mount``."""
    point, root = mount
    own_path, root_path = PurePosixPath(own), PurePosixPath(root)
    if root_path != PurePosixPath("/") and own_path.is_relative_to(root_path):
        own_path = PurePosixPath("/") / own_path.relative_to(root_path)
    return point / str(own_path).lstrip("/")


@dataclass(frozen=True)
class JobCgroup:
    """One job's cgroup: a folder in the unified hierarchy, or one per controller in the legacy one."""

    version: Literal[1, 2]
    dirs: tuple[Path, ...]  # v2: (the cgroup,); v1: (memory, pids)

    @property
    def procs_files(self) -> list[str]:
        """The files the launcher writes its pid to, to join (before it drops its privileges)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def _memory(self) -> Path:
        return self.dirs[0]

    def _pids(self) -> Path:
        return self.dirs[-1]

    def memory_bytes(self) -> int:
        """What the job holds now, in bytes: the memory charged to it less the file cache the kernel could drop
        (inactive files), as ``docker stats`` and the kubelet count a working set. Includes memfd, tmpfs and
        dirty page cache."""
        if self.version == 2:
            used = _int(self._memory() / "memory.current")
            inactive = _stat(self._memory() / "memory.stat").get("inactive_file", 0)
        else:
            used = _int(self._memory() / "memory.usage_in_bytes")
            inactive = _stat(self._memory() / "memory.stat").get("total_inactive_file", 0)
        return max(0, used - inactive)

    def oom_kills(self) -> int:
        """Processes the kernel killed because the job reached its memory limit."""
        if self.version == 2:
            return _stat(self._memory() / "memory.events").get("oom_kill", 0)
        return _stat(self._memory() / "memory.oom_control").get("oom_kill", 0)

    def processes_refused(self) -> int:
        """Forks and clones refused because the job held its limit of processes and threads."""
        return _stat(self._pids() / "pids.events").get("max", 0)

    def members(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        return found

    def kill(self, *, timeout_s: float = 5.0) -> None:
        """SIGKILL everything in the cgroup, until it is empty (or ``timeout_s`` passed)."""
        if self.version == 2 and (self.dirs[0] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (self.dirs[0] / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + timeout_s
        while (pids := self.members()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill what is left and remove the cgroup (a member still being reaped keeps it busy: tried for 5 s; one left
        behind is removed by ``Cgroups.reap_stale`` at a later job)."""
        self.kill()
        for d in self.dirs:
            for _ in range(250):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the last member is being reaped
                    time.sleep(0.02)


def _int(path: Path) -> int:
    try:
        return int(_read(path))
    except (OSError, ValueError):
        return 0


@dataclass(frozen=True)
class Cgroups:
    """Where this worker makes its jobs' cgroups: ``parents`` holds one folder (v2) or the memory and pids ones (v1)."""

    version: Literal[1, 2]
    parents: tuple[Path, ...]

    @classmethod
    def find(cls, parent: str = "") -> Cgroups:
        """The hierarchy this worker can make job cgroups in, or ``CgroupUnavailable`` saying why none. ``parent``: the
        cgroup (a path in the hierarchy, ``/attnprof``) to make them below, made if missing; empty: the worker's
        own cgroup, which works where the memory and pids controllers are delegated to it (a container's)."""
        own = _own_paths(Path("/proc/self/cgroup").read_text())
        mounts = _mounts()
        if "" in mounts and "" in own and set(_CONTROLLERS) <= set(_controllers(mounts[""][0] / "cgroup.controllers")):
            if parent:
                return cls._unified_below(mounts[""][0], parent)
            return cls._unified(_folder(mounts[""], own[""]))
        if all(c in mounts and c in own for c in _CONTROLLERS):
            if parent:
                parents = tuple(_folder(mounts[c], parent) for c in _CONTROLLERS)
                for folder in parents:
                    with contextlib.suppress(FileExistsError):
                        folder.mkdir(parents=True)
            else:
                parents = tuple(_folder(mounts[c], own[c]) for c in _CONTROLLERS)
            for folder in parents:
                if not os.access(folder, os.W_OK):
                    raise CgroupUnavailable(f"{folder} is not writable by this worker (a root worker, or delegation)")
            return cls(version=1, parents=parents)
        raise CgroupUnavailable(
            "neither a cgroup v2 hierarchy with the memory and pids controllers nor v1 memory and pids hierarchies "
            "are mounted here"
        )

    @classmethod
    def _unified_below(cls, mount: Path, parent: str) -> Cgroups:
        """The configured ``parent`` (v2), made with the memory and pids controllers enabled down to it: a cgroup of
        the worker's choosing, holding no process, so it may hand them to its jobs' cgroups."""
        folder = mount / parent.strip("/")
        if folder == mount or not folder.is_relative_to(mount):
            raise CgroupUnavailable(f"the cgroup parent {parent!r} is not a cgroup below the hierarchy's root")
        parts = folder.relative_to(mount).parts
        way = [mount, *(mount.joinpath(*parts[: i + 1]) for i in range(len(parts)))]
        try:
            for step, below in itertools.pairwise(way):
                below.mkdir(exist_ok=True)
                if not set(_CONTROLLERS) <= set(_controllers(step / "cgroup.subtree_control")):
                    (step / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in _CONTROLLERS))
            if not set(_CONTROLLERS) <= set(_controllers(folder / "cgroup.subtree_control")):
                (folder / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in _CONTROLLERS))
        except OSError as exc:
            why = exc.strerror or exc
            raise CgroupUnavailable(f"cannot enable memory and pids down to {folder}: {why}") from None
        return cls(version=2, parents=(folder,))

    @classmethod
    def _unified(cls, parent: Path) -> Cgroups:
        if parent.name.startswith("attnprof-worker-"):
            parent = parent.parent  # this process already moved itself (or was started) into a worker's leaf
        if not os.access(parent, os.W_OK):
            raise CgroupUnavailable(f"{parent} is not writable by this worker (a root worker, or delegation)")
        missing = set(_CONTROLLERS) - set(_controllers(parent / "cgroup.controllers"))
        if missing:
            raise CgroupUnavailable(
                f"the {' and '.join(sorted(missing))} controller(s) are not delegated to this worker's cgroup "
                f"{parent}: set ATTNPROF_WORKER__CGROUP_PARENT to a cgroup where they are (e.g. /attnprof, below the "
                "root of a host the worker runs on as root)"
            )
        enabled = set(_controllers(parent / "cgroup.subtree_control"))
        if not set(_CONTROLLERS) <= enabled:
            # A cgroup with processes cannot enable controllers for children: its processes (this worker, and in a
            # container whose cgroup this is, the others beside it) move to a leaf first, as container init systems
            # do with the cgroup they are given.
            leaf = parent / f"attnprof-worker-{owner.tag()}"
            try:
                leaf.mkdir(exist_ok=True)
                for pid in _read(parent / "cgroup.procs").split():
                    with contextlib.suppress(OSError):  # gone meanwhile, or a kernel thread that stays
                        (leaf / "cgroup.procs").write_text(pid)
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in _CONTROLLERS))
            except OSError as exc:
                why = exc.strerror or exc
                raise CgroupUnavailable(f"cannot enable memory and pids below {parent}: {why}") from None
        return cls(version=2, parents=(parent,))

    def reap_stale(self) -> list[str]:
        """Remove the job cgroups (and v2 worker leaves) of workers that are gone, killed before they could remove
        their own; returns their names. Never one of a worker in another PID namespace: its pid means nothing here."""
        removed: list[str] = []
        for parent in self.parents:
            with contextlib.suppress(OSError):
                for child in parent.iterdir():
                    match = _STALE.match(child.name)
                    if match is None or not child.is_dir() or not owner.gone(int(match.group(1)), int(match.group(2))):
                        continue
                    JobCgroup(version=self.version, dirs=(child,)).remove()
                    if not child.exists():
                        removed.append(child.name)
        return removed

    def create(self, name: str, *, memory_bytes: int, max_processes: int) -> JobCgroup:
        """A new cgroup for one job, with its limits set; ``CgroupUnavailable`` when it cannot be made."""
        dirs = tuple(p / name for p in self.parents)
        job = JobCgroup(version=self.version, dirs=dirs)
        try:
            for d in dirs:
                d.mkdir()
            if self.version == 2:
                (dirs[0] / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):  # no swap accounting on this kernel: nothing to bound
                    (dirs[0] / "memory.swap.max").write_text("0")
                (dirs[0] / "pids.max").write_text(str(max_processes))
            else:
                memory, pids = dirs
                (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):
                    (memory / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                (pids / "pids.max").write_text(str(max_processes))
        except OSError as exc:
            job.remove()
            raise CgroupUnavailable(f"cannot make the job's cgroup {dirs[0]}: {exc.strerror or exc}") from None
        return job

    def self_test(self) -> None:
        """Make a cgroup, check its limits read back and that a process can join it, and remove it."""
        job = self.create(f"attnprof-selftest-{owner.tag()}", memory_bytes=64 * 1024 * 1024, max_processes=16)
        try:
            limit = job.dirs[0] / ("memory.max" if self.version == 2 else "memory.limit_in_bytes")
            if _int(limit) > 64 * 1024 * 1024:
                raise CgroupUnavailable(f"the memory limit does not hold in {job.dirs[0]}")
            join = (
                "import os, sys, time\n"
                "for p in sys.argv[1:]:\n"
                "    open(p, 'w').write(str(os.getpid()))\n"
                "time.sleep(5)\n"
            )
            child = subprocess.Popen([sys.executable, "-S", "-c", join, *job.procs_files])
            deadline = time.monotonic() + 5
            while child.pid not in job.members() and time.monotonic() < deadline and child.poll() is None:
                time.sleep(0.01)
            joined = child.pid in job.members()
            job.kill()
            child.wait()
            if not joined:
                raise CgroupUnavailable(f"a process cannot join {job.dirs[0]}")
        finally:
            job.remove()


def _controllers(path: Path) -> list[str]:
    try:
        return _read(path).split()
    except OSError:
        return []
