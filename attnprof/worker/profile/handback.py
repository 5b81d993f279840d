"""What a job hands back, read from its folder as hostile input (docs/isolation.md, section 2).

After a job, its folder holds whatever the job's code left there: links to the host's files, FIFOs that block
whoever opens them, device nodes, files of any size. The worker runs as root, so a plain ``open`` of
``/job/out/result.json`` reads whatever that name points to. Everything the worker reads there goes through
``Folder``:

- every path is walked from a directory handle the worker opened itself, one component at a time, each with
  ``O_NOFOLLOW`` (a link anywhere on the way is refused, not followed), and names are plain (no ``..``, no ``/``);
- the last component is opened with ``O_PATH`` first and checked with ``fstat``: only a regular file with one
  link is then opened for reading, through its own handle, so a FIFO or a device is never opened at all;
- every read is bounded in bytes (a file over the bound is refused, never read whole).

A refusal raises ``Refused``, whose message names the path as the job sees it (``/job/...``), never a host path.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


class Refused(Exception):
    """A path in the job's folder that is not read: missing, not a plain file, reached through a link, or too big."""


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _parts(relative: str | PurePosixPath) -> list[str]:
    parts = PurePosixPath(relative).parts
    if not parts or any(p in ("", ".", "..", "/") or "/" in p or "\0" in p for p in parts):
        raise Refused(f"{relative}: not a plain relative path")
    return list(parts)


class Folder:
    """A job's folder, held by a directory handle opened once (``O_NOFOLLOW``): ``shown`` is how the job sees it
    (``/job``), for messages."""

    def __init__(self, path: Path, *, shown: str = "/job") -> None:
        self.shown = shown
        self._fd = os.open(path, _DIR_FLAGS)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _name(self, parts: list[str]) -> str:
        return "/".join([self.shown.rstrip("/"), *parts])

    @contextlib.contextmanager
    def _parent(self, parts: list[str]) -> Iterator[int]:
        """A handle on the folder that holds ``parts[-1]``, walked without following any link."""
        fds: list[int] = []
        try:
            fd = self._fd
            for i, part in enumerate(parts[:-1]):
                try:
                    fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise Refused(f"{self._name(parts[: i + 1])}: {_why(exc)}") from None
                fds.append(fd)
            yield fd
        finally:
            for fd in fds:
                os.close(fd)

    def kind(self, relative: str | PurePosixPath) -> str | None:
        """``"file"``, ``"dir"``, what else it is (``"a FIFO"``), or ``None`` when absent (a link on the way:
        ``Refused``)."""
        parts = _parts(relative)
        with self._parent(parts) as parent:
            try:
                st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise Refused(f"{self._name(parts)}: {_why(exc)}") from None
        if stat.S_ISREG(st.st_mode):
            return "file"
        return "dir" if stat.S_ISDIR(st.st_mode) else _kind(st.st_mode)

    def read(self, relative: str | PurePosixPath, *, max_bytes: int) -> bytes:
        """The bytes of a regular file at ``relative``, at most ``max_bytes``; ``Refused`` otherwise (absent included:
        ``FileNotFoundError`` is raised for that, a subclass the caller can tell apart)."""
        parts = _parts(relative)
        shown = self._name(parts)
        with self._parent(parts) as parent:
            try:
                handle = os.open(parts[-1], os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            except FileNotFoundError:
                raise Missing(f"{shown}: no such file") from None
            except OSError as exc:
                raise Refused(f"{shown}: {_why(exc)}") from None
        try:
            st = os.fstat(handle)
            if not stat.S_ISREG(st.st_mode):
                raise Refused(f"{shown}: {_kind(st.st_mode)}, not a regular file: not read")
            if st.st_nlink != 1:
                raise Refused(f"{shown}: a file with {st.st_nlink} links: not read")
            if st.st_size > max_bytes:
                raise Refused(f"{shown}: {st.st_size:,} bytes, over the {max_bytes:,} a job may hand back: not read")
            # Reopened through its own handle: the name may have changed since, the inode checked above cannot.
            fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        finally:
            os.close(handle)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # /proc not mounted as expected: never read anything else
                raise Refused(f"{shown}: not a regular file: not read")
            chunks: list[bytes] = []
            left = max_bytes + 1
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise Refused(f"{shown}: over the {max_bytes:,} bytes a job may hand back: not read")
        return data


class Missing(Refused, FileNotFoundError):
    """The path is not there."""


def _why(exc: OSError) -> str:
    import errno

    if exc.errno == errno.ELOOP:
        return "a symbolic link: not followed"
    if exc.errno == errno.ENOTDIR:
        return "not a folder (a link or a file): not followed"
    if exc.errno == errno.ENOENT:
        return "no such file or folder"
    return exc.strerror or type(exc).__name__
