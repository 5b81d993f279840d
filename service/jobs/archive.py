"""Source bundles (tar.gz): the rules every member must follow, a bounded reader, and a safe unpacker.

Plain code with no web framework: the service checks a bundle on arrival (``service.jobs.bundle``) and the
profile worker checks it again as it unpacks it on the GPU host (it trusts nothing it downloads).

Refused: absolute paths, ``..`` components, links, devices and FIFOs, more than ``max_members`` members,
more than ``max_unpacked_bytes`` of file data in total. The gzip stream is decompressed with a bound, so
a decompression bomb stops at the limit instead of filling memory or disk.
"""

from __future__ import annotations

import io
import os
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

# Headers and padding add to the file data: a tar stream may exceed the data it holds by this much per member.
_TAR_OVERHEAD_BYTES = 1024


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


def check_member(member: tarfile.TarInfo) -> None:
    """Raise ``BundleRefused`` unless ``member`` is a plain file or directory inside the bundle."""
    name = member.name
    path = PurePosixPath(name)
    if name.startswith(("/", "\\")) or path.is_absolute() or (len(name) > 1 and name[1] == ":"):
        raise BundleRefused(f"bundle: member {name!r} has an absolute path")
    if ".." in path.parts or ".." in name.replace("\\", "/").split("/"):
        raise BundleRefused(f"bundle: member {name!r} leaves the bundle (..)")
    if member.issym() or member.islnk():
        raise BundleRefused(f"bundle: member {name!r} is a link")
    if not (member.isfile() or member.isdir()):
        raise BundleRefused(f"bundle: member {name!r} is a device, FIFO or other special file")


def _members(
    data: bytes, *, max_bytes: int, max_unpacked_bytes: int, max_members: int
) -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
    """Each member of the archive, checked, with the open archive (to read a file member's data)."""
    if len(data) > max_bytes:
        raise BundleRefused(f"the bundle is {len(data)} bytes; the limit is {max_bytes}", too_large=True)
    if data[:2] != b"\x1f\x8b":
        raise BundleRefused("bundle: not gzip (expected a .tar.gz)")
    stream = io.BufferedReader(_Bounded(data, max_unpacked_bytes + _TAR_OVERHEAD_BYTES * (max_members + 2)))
    members = 0
    total = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                members += 1
                if members > max_members:
                    raise BundleRefused(f"bundle: more than {max_members} members")
                check_member(member)
                total += max(member.size, 0)
                if total > max_unpacked_bytes:
                    raise BundleRefused(f"the bundle unpacks to more than {max_unpacked_bytes} bytes", too_large=True)
                yield member, tar
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise BundleRefused(f"bundle: not a valid tar.gz: {exc}") from exc
    if members == 0:
        raise BundleRefused("bundle: the archive is empty")


def check(data: bytes, *, max_bytes: int, max_unpacked_bytes: int, max_members: int) -> int:
    """Validate a tar.gz bundle without unpacking it; returns its member count."""
    count = 0
    for _ in _members(data, max_bytes=max_bytes, max_unpacked_bytes=max_unpacked_bytes, max_members=max_members):
        count += 1
    return count


def unpack(data: bytes, dest: Path, *, max_bytes: int, max_unpacked_bytes: int, max_members: int) -> int:
    """Unpack a bundle into the empty directory ``dest``; returns the number of files written.

    Only plain files and directories are created, with the archive's owners and modes ignored (files 0644,
    directories 0755), each file opened with ``O_NOFOLLOW | O_EXCL`` so that nothing written can land
    outside ``dest``. A refused bundle raises ``BundleRefused`` and may leave part of it in ``dest``:
    the caller removes ``dest``.
    """
    root = dest.resolve()
    written = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for member, tar in _members(
        data, max_bytes=max_bytes, max_unpacked_bytes=max_unpacked_bytes, max_members=max_members
    ):
        target = root.joinpath(*PurePosixPath(member.name).parts)
        if target != root and root not in target.parents:
            raise BundleRefused(f"bundle: member {member.name!r} leaves the bundle")
        if member.isdir():
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
            continue
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if target.parent.resolve() != target.parent:
            raise BundleRefused(f"bundle: member {member.name!r} is under a link")
        source = tar.extractfile(member)
        if source is None:
            raise BundleRefused(f"bundle: member {member.name!r} has no data")
        try:
            fd = os.open(target, flags, 0o644)
        except FileExistsError as exc:
            raise BundleRefused(f"bundle: member {member.name!r} appears twice") from exc
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(1024 * 1024):
                out.write(chunk)
        written += 1
    return written
