"""One attempt's folder on the worker's host, and the job's part of it (docs/isolation.md, section 2).

``<scratch_root>/<job>-a<attempt>-<worker's tag>-XXXX/`` (the tag: ``attnprof.worker.profile.owner``) belongs to the
worker (mode 0700) and holds:

- ``job/``: the job's folder, ``/job`` inside the jail (the bundle in ``src``, the spec, ``home``, ``tmp``, ``out``).
  A root worker mounts a tmpfs of its own there, sized to the job's disk quota: a job that writes more gets
  ``ENOSPC``, the quota is the kernel's, and cleaning up is an unmount, which follows nothing the job made. Its
  pages are charged to the job's memory cgroup as it writes them. Elsewhere (an unprivileged worker) the folder is
  on the host's disk and the watchdog measures it (``used_bytes``) once a second.
- ``etc/``: the ``passwd``, ``group`` and other files the jail binds read-only at ``/etc`` (the worker's, out of
  the job's reach).

The job never sees the attempt's folder itself, only ``job/``; the worker reads back from ``job/`` only through
``handback``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from attnprof.contract.ids import JobId
from attnprof.worker.profile import owner

_OWNER = re.compile(r"-p(\d+)n(\d+)-[^-]+$")
_MNT_DETACH = 2
_MS_NOSUID, _MS_NODEV = 2, 4
_WALK_MAX_ENTRIES = 200_000


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Scratch:
    """One attempt's folder: ``path`` is the worker's, ``job`` the job's (``/job`` in the jail)."""

    path: Path
    mounted: bool

    @property
    def job(self) -> Path:
        return self.path / "job"

    @property
    def etc(self) -> Path:
        return self.path / "etc"

    def used_bytes(self) -> int:
        """What the job's folder holds, in bytes: the tmpfs's own count when mounted, else a walk that follows no
        link and stops after 200,000 entries (a folder with more is then reported at least this full)."""
        if self.mounted:
            with contextlib.suppress(OSError):
                st = os.statvfs(self.job)
                return (st.f_blocks - st.f_bfree) * st.f_frsize
            return 0
        return _walk_bytes(self.job)


def _walk_bytes(root: Path) -> int:
    total, seen = 0, 0
    todo = [str(root)]
    while todo and seen < _WALK_MAX_ENTRIES:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as entries:
            for entry in entries:
                seen += 1
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        todo.append(entry.path)
    return total


def _mount_tmpfs(target: Path, size_bytes: int) -> bool:
    """A tmpfs of ``size_bytes`` at ``target`` (a root worker); ``False`` where this process may not mount."""
    if os.geteuid() != 0:
        return False
    options = f"size={size_bytes},mode=0700".encode()
    # No set-uid bits and no device nodes count there, whatever the job leaves; exec stays (compiled kernels load).
    flags = _MS_NOSUID | _MS_NODEV
    done: int = _libc().mount(b"attnprof-job", str(target).encode(), b"tmpfs", flags, options)
    return done == 0


def _unmount(target: Path) -> None:
    # Detached: a file the job left open somewhere cannot keep the folder, and nothing inside is walked.
    _libc().umount2(str(target).encode(), _MNT_DETACH)


def make(root: Path, job_id: JobId, attempt: int, *, disk_bytes: int) -> Scratch:
    """A fresh folder for one attempt, named after the job, the attempt and this worker's pid, with the job's folder
    inside (a tmpfs of ``disk_bytes`` when this worker may mount one and ``disk_bytes`` is not 0)."""
    root.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{job_id}-a{attempt}-{owner.tag()}-", dir=root))
    (path / "etc").mkdir(mode=0o755)
    job = path / "job"
    job.mkdir(mode=0o700)
    mounted = bool(disk_bytes) and _mount_tmpfs(job, disk_bytes)
    for sub in ("src", "home", "tmp", "out"):
        (job / sub).mkdir(mode=0o700)
    return Scratch(path=path, mounted=mounted)


def _writable(path: str) -> None:
    """Let the worker remove entries of ``path`` (a folder the job made read-only), without following a link."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, stat.S_IRWXU)
    finally:
        os.close(fd)


def remove(path: Path) -> None:
    """Remove an attempt's folder whatever the job left in it: its tmpfs unmounted, the rest removed without
    following links (``shutil.rmtree`` works from directory handles here; a folder the job made read-only is
    made writable through a handle opened with ``O_NOFOLLOW``)."""
    if not path.is_dir() or path.is_symlink():
        return
    job = path / "job"
    if os.path.ismount(job):
        _unmount(job)

    def retry(func: object, failed: str, _exc: object) -> None:
        parent = os.path.dirname(failed)
        with contextlib.suppress(OSError):
            _writable(parent)
        with contextlib.suppress(OSError):
            if os.path.isdir(failed) and not os.path.islink(failed):
                _writable(failed)
                shutil.rmtree(failed, ignore_errors=True)
            else:
                os.unlink(failed)

    shutil.rmtree(path, onerror=retry)


def reap_stale(root: Path) -> list[Path]:
    """Remove the attempt folders of workers that are gone (a worker killed with SIGKILL cannot clean up after
    itself); returns what was removed. Folders of live workers, and of workers in another PID namespace (another
    container sharing the volume), are left alone."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for path in root.iterdir():
        match = _OWNER.search(path.name)
        if match and path.is_dir() and not path.is_symlink() and owner.gone(int(match.group(1)), int(match.group(2))):
            remove(path)
            removed.append(path)
    return removed
