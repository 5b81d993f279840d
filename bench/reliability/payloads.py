"""Hostile bodies: tar.gz bundles of any member, a gzip bomb, and a body streamed over a raw socket that stops as
soon as the server answers."""

from __future__ import annotations

import contextlib
import gzip
import io
import tarfile
import time
from typing import Any

import httpx

DEEP = 5000  # deeper than Python's recursion limit: a recursive parser or serialiser fails on it
MIB = 1024 * 1024


def tar_members(*members: tuple[str, str, bytes | str | None]) -> bytes:
    """A tar.gz of ``(name, kind, data)``: kind ``file`` (data: bytes), ``dir``, ``symlink`` / ``hardlink`` (data: the
    target), ``chardev``, ``fifo``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            payload = None
            if kind == "file":
                assert isinstance(data, bytes)
                info.size, payload = len(data), io.BytesIO(data)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind in ("symlink", "hardlink"):
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = str(data)
            elif kind == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info, payload)
    return buf.getvalue()


def gzip_bomb(unpacked_bytes: int) -> bytes:
    """A tar.gz of one file of ``unpacked_bytes`` zeros: about a thousandth of that on the wire."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        info = tarfile.TarInfo("pkg/zeros.bin")
        info.size = unpacked_bytes

        class Zeros(io.RawIOBase):
            left = unpacked_bytes

            def readable(self) -> bool:
                return True

            def readinto(self, b: Any) -> int:
                n = min(len(b), self.left)
                b[:n] = bytes(n)
                self.left -= n
                return n

        tar.addfile(info, io.BufferedReader(Zeros(), 4 * MIB))
    return buf.getvalue()


def many_members(n: int) -> bytes:
    return tar_members(*((f"pkg/m{i}.py", "file", b"") for i in range(n)))


def streamed(url: str, method: str, path: str, headers: dict[str, str], total: int, *, chunked: bool) -> dict[str, Any]:
    """``total`` bytes sent as the body over a raw socket, 1 MiB at a time, stopping as soon as the server answers
    (a body limit must answer before the body is read); the answer and how much was sent by then."""
    import select
    import socket

    u = httpx.URL(url)
    head = [f"{method} {path} HTTP/1.1", f"Host: {u.host}:{u.port}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}")
    sock = socket.create_connection((u.host, int(u.port or 80)), timeout=30)
    sent = 0
    t0 = time.perf_counter()
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        block = b"7" * MIB
        while sent < total:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            piece = block[: min(MIB, total - sent)]
            try:
                sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
        else:
            if chunked:
                with contextlib.suppress(OSError):
                    sock.sendall(b"0\r\n\r\n")
        raw = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                raw += chunk
    finally:
        sock.close()
    seconds = round(time.perf_counter() - t0, 3)
    if not raw:
        return {"status": None, "ctype": "", "body": "", "sent_bytes": sent, "seconds": seconds}
    head_raw, _, body = raw.partition(b"\r\n\r\n")
    lines = head_raw.decode("latin-1").split("\r\n")
    found = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if found.get("transfer-encoding", "").lower() == "chunked":
        plain, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            plain, rest = plain + rest[:size], rest[size + 2 :]
        body = plain
    return {
        "status": int(lines[0].split()[1]),
        "ctype": found.get("content-type", ""),
        "body": body.decode(errors="replace"),
        "sent_bytes": sent,
        "seconds": seconds,
    }
