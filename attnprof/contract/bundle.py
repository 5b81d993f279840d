"""Source bundles (tar.gz): the rules every member must follow, a bounded reader, and a safe unpacker.

Plain code with no web framework: the service checks a bundle on arrival (``attnprof.server.jobs.bundle``) and the
profile worker checks it again as it unpacks it on the GPU host (it trusts nothing it downloads). Both read
the archive through one walk (:func:`_entries`), member list rules and file data alike, so the service
refuses exactly the bundles that the worker would refuse.

Refused: absolute paths, ``..`` components, links, devices and FIFOs; a name with a NUL byte, a path longer
than :data:`MAX_PATH_BYTES` or a component longer than :data:`MAX_NAME_BYTES` (Linux's limit); two members
for one path (``a/./b`` is ``a/b``), a file and a directory of the same path in either order, a member under
a path that an earlier member made a file; more than ``max_members`` members or directories (named or
implied by a member's path), more than ``max_unpacked_bytes`` of file data in total; an archive that is not
a tar.gz or whose data ends early. The gzip stream is decompressed with a bound, so a decompression bomb
stops at the limit instead of filling memory or disk.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# Headers and padding add to the file data: a tar stream may exceed the data it holds by this much per member.
_TAR_OVERHEAD_BYTES = 1024
MAX_PATH_BYTES = 1024
MAX_NAME_BYTES = 255
# The bounds' defaults (``ATTNPROF_LIMITS__BUNDLE_*``), one set of numbers for the service that accepts a bundle
# and the worker that unpacks it.
DEFAULT_BUNDLE_BYTES = 50 * 1024 * 1024
DEFAULT_BUNDLE_UNPACKED_BYTES = 500 * 1024 * 1024
DEFAULT_BUNDLE_MEMBERS = 10_000
_CHUNK_BYTES = 1024 * 1024
# What a damaged or hostile archive makes tarfile and zlib raise while reading it (all in memory).
_BROKEN = (tarfile.TarError, zlib.error, EOFError, OSError, ValueError, OverflowError)


class BundleRefused(ValueError):
    """The bundle breaks a rule; ``too_large`` when the rule broken is a size limit."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


class _Bounded(io.RawIOBase):
    """Decompresses gzip lazily and refuses to yield more than ``limit`` bytes."""

    def __init__(self, data: bytes, limit: int) -> None:
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._src = io.BytesIO(data)
        self._buf = b""
        self._out = 0
        self._limit = limit

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buf:
            chunk = self._src.read(64 * 1024)
            if not chunk:
                self._buf = self._d.flush()
                if not self._buf:
                    return 0
                break
            self._buf = self._d.decompress(chunk)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        self._out += n
        if self._out > self._limit:
            raise BundleRefused(f"the bundle unpacks to more than {self._limit} bytes", too_large=True)
        return n


def _shown(name: str) -> str:
    """A member's name for a message: names can be long (a pax header holds any length), messages are not."""
    return repr(name) if len(name) <= 100 else repr(name[:100]) + "..."


def check_member(member: tarfile.TarInfo) -> None:
    """Raise ``BundleRefused`` unless ``member`` is a plain file or directory inside the bundle."""
    name = member.name
    path = PurePosixPath(name)
    if name.startswith(("/", "\\")) or path.is_absolute() or (len(name) > 1 and name[1] == ":"):
        raise BundleRefused(f"bundle: member {_shown(name)} has an absolute path")
    if ".." in path.parts or ".." in name.replace("\\", "/").split("/"):
        raise BundleRefused(f"bundle: member {_shown(name)} leaves the bundle (..)")
    if member.issym() or member.islnk():
        raise BundleRefused(f"bundle: member {_shown(name)} is a link")
    if not (member.isfile() or member.isdir()):
        raise BundleRefused(f"bundle: member {_shown(name)} is a device, FIFO or other special file")
    if "\0" in name:
        raise BundleRefused(f"bundle: member {_shown(name)} has a NUL byte in its name")
    try:
        encoded = os.fsencode(name)
    except UnicodeEncodeError as exc:
        raise BundleRefused(f"bundle: member {_shown(name)} has a name that is not a file name") from exc
    if len(encoded) > MAX_PATH_BYTES:
        raise BundleRefused(
            f"bundle: member {_shown(name)} has a path of {len(encoded)} bytes; at most {MAX_PATH_BYTES}"
        )
    for part in path.parts:
        if len(os.fsencode(part)) > MAX_NAME_BYTES:
            raise BundleRefused(
                f"bundle: member {_shown(name)} has a path component longer than {MAX_NAME_BYTES} bytes"
            )


class _Node:
    """A path of the bundle: a file, a directory a member named, or a directory a member's path implies."""

    __slots__ = ("children", "kind")

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "file", "dir" or "implied"
        self.children: dict[str, _Node] = {}


class MemberList:
    """The paths that the members read so far make, and the rules between members (one path, one member).

    :meth:`add` checks the next member and says which directories it makes, parents first, so the unpacker
    creates exactly the tree that was checked and never meets a path that is already there.
    """

    def __init__(self, *, max_dirs: int) -> None:
        self._root = _Node("implied")
        self._dirs = 0
        self._max_dirs = max_dirs

    def _new_dir(self, parent: _Node, part: str, kind: str) -> _Node:
        self._dirs += 1
        if self._dirs > self._max_dirs:
            raise BundleRefused(f"bundle: more than {self._max_dirs} directories")
        node = parent.children[part] = _Node(kind)
        return node

    def add(self, member: tarfile.TarInfo) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
        """Check ``member``; returns its path (components) and the directories it makes, parents first."""
        check_member(member)
        name = member.name
        parts = PurePosixPath(name).parts
        made: list[tuple[str, ...]] = []
        if not parts:  # "." or "./": the bundle's own folder
            if not member.isdir():
                raise BundleRefused(f"bundle: member {_shown(name)} is a file where the bundle's root folder is")
            if self._root.kind == "dir":
                raise BundleRefused(f"bundle: member {_shown(name)} appears twice")
            self._root.kind = "dir"
            return parts, made
        node = self._root
        for depth, part in enumerate(parts[:-1], start=1):
            child = node.children.get(part)
            if child is None:
                child = self._new_dir(node, part, "implied")
                made.append(parts[:depth])
            elif child.kind == "file":
                file = _shown("/".join(parts[:depth]))
                raise BundleRefused(
                    f"bundle: member {_shown(name)} is under {file}, which an earlier member made a file"
                )
            node = child
        last, kind = parts[-1], ("dir" if member.isdir() else "file")
        existing = node.children.get(last)
        if existing is None:
            if kind == "dir":
                self._new_dir(node, last, "dir")
                made.append(parts)
            else:
                node.children[last] = _Node("file")
        elif existing.kind == "implied" and kind == "dir":
            existing.kind = "dir"
        elif existing.kind == "implied":
            raise BundleRefused(
                f"bundle: member {_shown(name)} is a file, but earlier members are inside it (a directory)"
            )
        elif existing.kind == kind:
            raise BundleRefused(f"bundle: member {_shown(name)} appears twice")
        else:
            raise BundleRefused(f"bundle: member {_shown(name)} is both a file and a directory")
        return parts, made


@dataclass
class _Entry:
    """A checked member: its path, the directories it makes, and its data (``None`` for a directory)."""

    parts: tuple[str, ...]
    made: list[tuple[str, ...]]
    data: Iterator[bytes] | None


def _chunks(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Iterator[bytes]:
    try:
        source = tar.extractfile(member)
        if source is None:
            raise BundleRefused(f"bundle: member {_shown(member.name)} has no data")
        while chunk := source.read(_CHUNK_BYTES):
            yield chunk
    except BundleRefused:
        raise
    except _BROKEN as exc:
        raise BundleRefused(f"bundle: not a valid tar.gz: member {_shown(member.name)}: {exc}") from exc


def _entries(data: bytes, *, max_bytes: int, max_unpacked_bytes: int, max_members: int) -> Iterator[_Entry]:
    """Each member of the archive, checked against the rules and the members before it.

    A file's ``data`` must be read to its end before the next entry is asked for (the archive is a stream):
    a check reads it as the unpacker does, so an archive whose data ends early is refused by both.
    """
    if len(data) > max_bytes:
        raise BundleRefused(f"the bundle is {len(data)} bytes; the limit is {max_bytes}", too_large=True)
    if data[:2] != b"\x1f\x8b":
        raise BundleRefused("bundle: not gzip (expected a .tar.gz)")
    stream = io.BufferedReader(_Bounded(data, max_unpacked_bytes + _TAR_OVERHEAD_BYTES * (max_members + 2)))
    seen = MemberList(max_dirs=max_members)
    members = 0
    total = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                members += 1
                if members > max_members:
                    raise BundleRefused(f"bundle: more than {max_members} members")
                parts, made = seen.add(member)
                total += max(member.size, 0)
                if total > max_unpacked_bytes:
                    raise BundleRefused(f"the bundle unpacks to more than {max_unpacked_bytes} bytes", too_large=True)
                yield _Entry(parts, made, _chunks(tar, member) if member.isfile() else None)
    except BundleRefused:
        raise
    except _BROKEN as exc:
        raise BundleRefused(f"bundle: not a valid tar.gz: {exc}") from exc
    if members == 0:
        raise BundleRefused("bundle: the archive is empty")


def check(data: bytes, *, max_bytes: int, max_unpacked_bytes: int, max_members: int) -> int:
    """Validate a tar.gz bundle without unpacking it (its data is read, not kept); returns its member count."""
    count = 0
    for entry in _entries(data, max_bytes=max_bytes, max_unpacked_bytes=max_unpacked_bytes, max_members=max_members):
        count += 1
        for _ in entry.data or ():
            pass
    return count


def unpack(data: bytes, dest: Path, *, max_bytes: int, max_unpacked_bytes: int, max_members: int) -> int:
    """Unpack a bundle into ``dest`` (made if missing, empty otherwise); returns the number of files written.

    Only plain files and directories are created, with the archive's owners and modes ignored (files 0644,
    directories 0755), each file opened with ``O_NOFOLLOW | O_EXCL`` so that nothing written can land
    outside ``dest``. A bad archive raises ``BundleRefused`` and nothing else (an ``OSError`` is the host's:
    a full disk, an unwritable or non-empty ``dest``); it may leave part of it in ``dest``: the caller
    removes ``dest``.
    """
    root = dest.resolve()
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    written = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for entry in _entries(data, max_bytes=max_bytes, max_unpacked_bytes=max_unpacked_bytes, max_members=max_members):
        for parts in entry.made:
            os.mkdir(root.joinpath(*parts), 0o755)
        if entry.data is None:
            continue
        fd = os.open(root.joinpath(*entry.parts), flags, 0o644)
        with os.fdopen(fd, "wb") as out:
            for chunk in entry.data:
                out.write(chunk)
        written += 1
    return written


# A file of a bundle: its path in the bundle, its size in bytes, whether it is executable, and its content (a
# file read when it is packed, or the bytes).
Member = tuple[str, int, bool, Path | bytes]


def pack(members: Iterable[Member]) -> bytes:
    """The tar.gz of ``members`` (given sorted by path): files only, modes 0644 or 0755, no owners, time 0, and
    a gzip header without a time or a name (``tarfile``'s ``w:gz`` would write the current time there, so the
    same files a second later would make other bytes)."""
    buf = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=6, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name, size_bytes, executable, content in members:
            info = tarfile.TarInfo(name)
            info.size = size_bytes
            info.mode = 0o755 if executable else 0o644
            info.mtime = 0
            with content.open("rb") if isinstance(content, Path) else io.BytesIO(content) as f:
                tar.addfile(info, f)
    return buf.getvalue()
