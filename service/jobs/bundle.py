"""Checks on a source bundle (tar.gz) on arrival: size, gzip, and every member (DESIGN 6).

Refused: absolute paths, ``..`` components, links, devices and FIFOs, more than ``max_members`` members,
more than ``max_unpacked_bytes`` of file data in total. The archive is read as a stream, and the gzip
stream is decompressed with a bound, so a decompression bomb stops at the limit.
"""

from __future__ import annotations

import io
import tarfile
import zlib
from pathlib import PurePosixPath

from service.errors import InvalidPayload, PayloadTooLarge


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
            raise PayloadTooLarge(f"the bundle unpacks to more than {self._limit} bytes")
        return n


def check_bundle(data: bytes, *, max_bytes: int, max_unpacked_bytes: int, max_members: int) -> int:
    """Validate a tar.gz source bundle; returns its member count. Raises ``PayloadTooLarge``/``InvalidPayload``."""
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"the bundle is {len(data)} bytes; the limit is {max_bytes}")
    if data[:2] != b"\x1f\x8b":
        raise InvalidPayload("bundle: not gzip (expected a .tar.gz)")
    # Headers and padding add to the file data: allow for them in the stream bound.
    stream = io.BufferedReader(_Bounded(data, max_unpacked_bytes + 1024 * (max_members + 2)))
    members = 0
    total = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                members += 1
                if members > max_members:
                    raise InvalidPayload(f"bundle: more than {max_members} members")
                _check_member(member)
                total += max(member.size, 0)
                if total > max_unpacked_bytes:
                    raise PayloadTooLarge(f"the bundle unpacks to more than {max_unpacked_bytes} bytes")
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise InvalidPayload(f"bundle: not a valid tar.gz: {exc}") from exc
    if members == 0:
        raise InvalidPayload("bundle: the archive is empty")
    return members


def _check_member(member: tarfile.TarInfo) -> None:
    name = member.name
    path = PurePosixPath(name)
    if name.startswith(("/", "\\")) or path.is_absolute() or (len(name) > 1 and name[1] == ":"):
        raise InvalidPayload(f"bundle: member {name!r} has an absolute path")
    if ".." in path.parts or ".." in name.replace("\\", "/").split("/"):
        raise InvalidPayload(f"bundle: member {name!r} leaves the bundle (..)")
    if member.issym() or member.islnk():
        raise InvalidPayload(f"bundle: member {name!r} is a link")
    if not (member.isfile() or member.isdir()):
        raise InvalidPayload(f"bundle: member {name!r} is a device, FIFO or other special file")
