"""A real server (``attnprof serve``) decides a request with a body from its headers, before it reads the body: a
request without valid credentials is answered (401, or the dashboard's own answer) and its connection closed while
the client has sent only its first chunk; bodies arriving without credentials do not grow the server's memory by
their size; past ``ATTNPROF_LIMITS__UNFINISHED_BODIES`` bodies being received at once the next one is a 503 with
``Retry-After``; a ``Content-Length`` over the route's limit is a 413 with nothing of the body sent.

The requests are written on sockets by hand: a client library sends the whole body before it reads the answer.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.server import documents as docs
from tests.server.process import Seeded, Server, seed, serve

pytestmark = pytest.mark.slow

MIB = 1024 * 1024
BODY_BYTES = 50 * MIB
CHUNK_BYTES = 1 * MIB
UNFINISHED = 2


@dataclass(frozen=True)
class Served:
    server: Server
    seeded: Seeded

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.server.url)
        assert parts.hostname is not None and parts.port is not None
        return parts.hostname, parts.port

    def rss_bytes(self) -> int:
        """The server process's resident memory (``attnprof serve`` with one process serves in that process)."""
        for line in Path(f"/proc/{self.server.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def served(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    seeded = seed(pg_url)
    env = {"ATTNPROF_LIMITS__UNFINISHED_BODIES": str(UNFINISHED)}
    with serve(pg_url, tmp_path_factory.mktemp("gate-logs"), env=env) as server:
        yield Served(server=server, seeded=seeded)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"


def _open(served: Served, method: str, path: str, headers: dict[str, str], first: bytes | None) -> socket.socket:
    """A connection that has sent the request's head (chunked unless ``headers`` declare a Content-Length) and
    ``first`` as its first chunk, and nothing more."""
    host, port = served.address
    sock = socket.create_connection((host, port), timeout=15)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
    if not any(k.lower() == "content-length" for k in headers):
        lines.append("Transfer-Encoding: chunked")
    lines += [f"{k}: {v}" for k, v in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + (_chunk(first) if first else b""))
    return sock


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, str]:
        found: dict[str, str] = json.loads(self.body)
        return found


def _answer(sock: socket.socket) -> Answer:
    data = b""
    while b"\r\n\r\n" not in data:
        part = sock.recv(65536)
        assert part, f"the connection closed before an answer: {data!r}"
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    chunked = headers.get("transfer-encoding") == "chunked"
    while (b"\r\n0\r\n\r\n" not in b"\r\n" + body) if chunked else len(body) < int(headers.get("content-length", "0")):
        part = sock.recv(65536)
        if not part:
            break
        body += part
    return Answer(status=int(lines[0].split()[1]), headers=headers, body=_unchunked(body) if chunked else body)


def _unchunked(data: bytes) -> bytes:
    out = b""
    while True:
        size, _, rest = data.partition(b"\r\n")
        if int(size, 16) == 0:
            return out
        out, data = out + rest[: int(size, 16)], rest[int(size, 16) + 2 :]


def _closed(sock: socket.socket) -> bool:
    """The server ended the connection (it reads no more of the body)."""
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _routes(seeded: Seeded) -> list[tuple[str, str, dict[str, str]]]:
    project = f"/api/v1/projects/{seeded.project}"
    return [
        ("POST", f"{project}/results", {"Content-Type": "application/json"}),
        ("POST", f"{project}/jobs", {"Content-Type": "multipart/form-data; boundary=b0undary"}),
        ("PUT", f"{project}/runs/some-run/traces/t.json.gz", {"Content-Type": "application/gzip"}),
        ("PUT", f"{project}/alert-webhook", {"Content-Type": "application/json"}),
        ("POST", "/internal/alive", {"Content-Type": "application/json"}),
        ("POST", "/internal/jobs/some-job/claim", {"Content-Type": "application/json"}),
        ("POST", "/internal/jobs/some-job/result", {"Content-Type": "application/json"}),
        ("PUT", "/internal/jobs/some-job/traces/t.json.gz?attempt=1", {"Content-Type": "application/gzip"}),
    ]


@pytest.mark.parametrize(
    "authorization", [None, "Bearer ap_nobody", "Basic c3VibWl0"], ids=["none", "unknown", "basic"]
)
def test_a_body_without_valid_credentials_is_refused_after_its_first_chunk(
    served: Served, authorization: str | None
) -> None:
    credentials = {"Authorization": authorization} if authorization else {}
    for method, path, headers in _routes(served.seeded):
        with _open(served, method, path, {**headers, **credentials}, b"x" * 1024) as sock:
            answer = _answer(sock)  # the rest of the body is never sent
            assert answer.status == 401, (path, answer)
            assert answer.json()["error"] == "unauthorized" and answer.headers["www-authenticate"] == "Bearer"
            assert answer.headers["connection"] == "close" and _closed(sock), path


def test_a_worker_token_on_a_job_route_is_no_job_token(served: Served) -> None:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {served.seeded.worker}"}
    with _open(served, "POST", "/internal/jobs/some-job/heartbeat", headers, b"{") as sock:
        answer = _answer(sock)
    assert answer.status == 401 and "opens nothing of job some-job" in answer.json()["detail"]


def test_the_dashboard_answers_a_form_without_its_cookie_before_the_form_is_sent(served: Served) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    with _open(served, "POST", "/ui/login", form, b"token=ap_x&csrf=y") as sock:
        answer = _answer(sock)
    assert answer.status == 403 and b"Form expired" in answer.body and answer.headers["connection"] == "close"
    path = f"/ui/p/{served.seeded.project}/runs/some-run/baselines/pin"
    with _open(served, "POST", path, form, b"csrf=y&reason=z") as sock:
        answer = _answer(sock)
    assert answer.status == 303 and answer.headers["location"].startswith("/ui/login")


def _push(served: Served, path: str, sent: list[int], answers: list[int]) -> None:
    """Send a chunked body of ``BODY_BYTES`` without a token for as long as the server takes it."""
    total = 0
    try:
        with _open(served, "POST", path, {"Content-Type": "multipart/form-data; boundary=b0undary"}, None) as sock:
            try:
                while total < BODY_BYTES:
                    sock.sendall(_chunk(b"y" * CHUNK_BYTES))
                    total += CHUNK_BYTES
                sock.sendall(LAST_CHUNK)
            except OSError:
                pass  # the server answered and closed the connection
            try:
                answers.append(_answer(sock).status)
            except (OSError, AssertionError):
                answers.append(0)  # the answer was lost to the reset of a connection closed with data unread
    finally:
        sent.append(total)


def test_unauthenticated_bodies_do_not_grow_the_server_by_their_size(served: Served) -> None:
    path = f"/api/v1/projects/{served.seeded.project}/jobs"  # the route that takes a bundle's size
    before = served.rss_bytes()
    sent: list[int] = []
    answers: list[int] = []
    threads = [threading.Thread(target=_push, args=(served, path, sent, answers)) for _ in range(8)]
    peak = before
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, served.rss_bytes())
        time.sleep(0.02)
    for thread in threads:
        thread.join()
    # Eight bodies of 50 MiB are 400 MiB; what the server holds of each is what it reads ahead of the app.
    assert peak - before < 32 * MIB, (before, peak)
    assert len(sent) == 8 and all(total < BODY_BYTES for total in sent), sent  # no body was taken in full
    assert 401 in answers and set(answers) <= {401, 0}, answers
    assert served.server.popen.poll() is None


def _trace_put(served: Served, name: str, first: bytes) -> socket.socket:
    path = f"/api/v1/projects/{served.seeded.project}/runs/no-such-run/traces/{name}"
    headers = {"Content-Type": "application/gzip", "Authorization": f"Bearer {served.seeded.submit}"}
    return _open(served, "PUT", path, headers, first)


def test_past_the_limit_of_unfinished_bodies_the_next_is_a_503_with_retry_after(served: Served) -> None:
    held = [_trace_put(served, f"held-{i}.json.gz", b"z" * 1024) for i in range(UNFINISHED)]
    try:
        # Each held request takes its slot once its token is checked: the next body is refused as soon as both have.
        deadline = time.monotonic() + 15
        while True:
            with _trace_put(served, "extra.json.gz", b"z" * 1024) as sock:
                sock.sendall(LAST_CHUNK)
                answer = _answer(sock)
            if answer.status == 503:
                break
            assert answer.status == 404 and time.monotonic() < deadline, answer  # admitted: a slot was still free
            time.sleep(0.05)
        assert answer.headers["retry-after"] == "2" and answer.json()["error"] == "unavailable"
        assert "ATTNPROF_LIMITS__UNFINISHED_BODIES" in answer.json()["detail"]
        # A small body declared whole takes no slot; a held body that ends frees its own.
        small = {"Content-Type": "application/json", "Authorization": f"Bearer {served.seeded.worker}"}
        body = json.dumps({"testbed": served.seeded.testbed, "worker": "w1"}).encode()
        with _open(served, "POST", "/internal/alive", {**small, "Content-Length": str(len(body))}, None) as sock:
            sock.sendall(body)
            assert _answer(sock).status == 200
        held[0].sendall(LAST_CHUNK)
        assert _answer(held[0]).status == 404  # the run does not exist: the body was read, then the route answered
        with _trace_put(served, "after.json.gz", b"z" * 1024) as sock:
            sock.sendall(LAST_CHUNK)
            assert _answer(sock).status == 404
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize(
    ("path", "content_type", "declared"),
    [
        ("results", "application/json", 32 * MIB + 1),
        # A multipart body takes a bundle's limit on the job form only: elsewhere it is a JSON body's.
        ("results", "multipart/form-data; boundary=b0undary", 32 * MIB + 1),
        ("runs/some-run/traces/t.json.gz", "application/gzip", 64 * MIB + 1),
    ],
)
def test_a_declared_length_over_the_routes_limit_is_a_413_before_the_body(
    served: Served, path: str, content_type: str, declared: int
) -> None:
    headers = {
        "Content-Type": content_type,
        "Content-Length": str(declared),
        "Authorization": f"Bearer {served.seeded.submit}",
    }
    method = "PUT" if "traces" in path else "POST"
    with _open(served, method, f"/api/v1/projects/{served.seeded.project}/{path}", headers, None) as sock:
        answer = _answer(sock)
    assert answer.status == 413 and answer.json()["error"] == "payload_too_large"


def test_a_chunked_upload_with_a_valid_token_is_stored(served: Served) -> None:
    body = json.dumps(docs.upload_body(docs.cpu())).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {served.seeded.submit}"}
    with _open(served, "POST", f"/api/v1/projects/{served.seeded.project}/results", headers, body[:4096]) as sock:
        for start in range(4096, len(body), 256 * 1024):
            sock.sendall(_chunk(body[start : start + 256 * 1024]))
        sock.sendall(LAST_CHUNK)
        answer = _answer(sock)
    assert answer.status == 201, answer.body[:500]
