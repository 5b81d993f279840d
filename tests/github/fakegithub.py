"""A local GitHub REST server for the endpoints attnprof uses, following GitHub's documented behaviour:
201 for creates, 200 for updates and lists, ``Link`` pagination (``per_page``/``page``, rel next/last),
``x-ratelimit-*`` headers on every answer, 404 for unknown things. It records every request and can be told
to fail the next requests (403 rate limit with ``x-ratelimit-reset``, 429 with ``Retry-After``, 500, ``422``
Validation Failed), or to hold every request until told to answer (``hold``, ``answer``: a GitHub that is slow to
answer). An issue comment's body over ``COMMENT_MAX_CHARS`` characters is refused as GitHub refuses it, on create
and on update: 422 Validation Failed, "Body is too long (maximum is 65536 characters)".
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

COMMENT_MAX_CHARS = 65_536
"""GitHub's limit on an issue comment's body, in characters (Ruby's: code points)."""


def _too_long(action: str) -> dict[str, Any]:
    """GitHub's answer to a comment body over the limit (422), as its REST API writes it."""
    return {
        "message": "Validation Failed",
        "errors": [
            {
                "resource": "IssueComment",
                "code": "unprocessable",
                "field": "data",
                "message": f"Body is too long (maximum is {COMMENT_MAX_CHARS} characters)",
            }
        ],
        "documentation_url": f"https://docs.github.com/rest/issues/comments#{action}",
        "status": "422",
    }


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


@dataclass
class State:
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "owner/repo@sha" -> newest last
    comments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "owner/repo#pr" -> oldest first
    permissions: dict[str, str] = field(default_factory=dict)  # "owner/repo:user" -> admin|write|read|none
    requests: list[Request] = field(default_factory=list)
    # "rate403", "rate429", "403", "500", "422", "too_long": each answers one request, in order ("pass": as usual)
    failures: list[str] = field(default_factory=list)
    next_id: int = 1000


class FakeGitHub:
    def __init__(self) -> None:
        self.state = State()
        self.lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.answering = threading.Event()
        self.answering.set()
        self.held = 0
        """Requests that waited for ``answer`` (each read whole before it waits; acted on once answered)."""

    def __enter__(self) -> FakeGitHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.answering.set()
        self.server.shutdown()
        self.server.server_close()

    def hold(self) -> None:
        """Hold every request from now on until ``answer``."""
        self.answering.clear()

    def answer(self) -> None:
        """Answer the held requests, and the next ones at once."""
        self.answering.set()

    def waiting(self) -> int:
        """How many requests are held now or were, since the server started."""
        with self.lock:
            return self.held

    def fail_next(self, *kinds: str) -> None:
        with self.lock:
            self.state.failures.extend(kinds)

    def add_comment(self, repo: str, pr: int, body: str, user: str = "someone") -> int:
        with self.lock:
            self.state.next_id += 1
            cid = self.state.next_id
            self.state.comments.setdefault(f"{repo}#{pr}", []).append(
                {"id": cid, "body": body, "user": {"login": user}}
            )
            return cid

    def comments(self, repo: str, pr: int) -> list[dict[str, Any]]:
        return self.state.comments.get(f"{repo}#{pr}", [])

    def statuses(self, repo: str, sha: str) -> list[dict[str, Any]]:
        return self.state.statuses.get(f"{repo}@{sha}", [])

    def requests(self, method: str | None = None) -> list[Request]:
        return [r for r in self.state.requests if method is None or r.method == method]


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGitHub

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        remaining = "0" if status == 403 and body.get("message", "").startswith("API rate limit") else "4999"
        self.send_header("x-ratelimit-limit", "5000")
        self.send_header("x-ratelimit-remaining", remaining)
        self.send_header("x-ratelimit-used", str(5000 - int(remaining)))
        self.send_header("x-ratelimit-reset", str(int(time.time())))
        self.send_header("x-ratelimit-resource", "core")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        if not self.fake.answering.is_set():
            with self.fake.lock:
                self.fake.held += 1
            self.fake.answering.wait()
        st = self.fake.state
        with self.fake.lock:
            st.requests.append(Request(method, split.path, query, body, dict(self.headers.items())))
            failure = st.failures.pop(0) if st.failures else None
        if failure == "rate403":
            return self._send(403, {"message": "API rate limit exceeded for installation."})
        if failure == "rate429":
            return self._send(429, {"message": "secondary rate limit"}, {"Retry-After": "0"})
        if failure == "403":
            return self._send(403, {"message": "Resource not accessible by integration"})
        if failure == "500":
            return self._send(500, {"message": "Server Error"})
        if failure == "422":
            return self._send(422, {"message": "Validation Failed", "errors": [], "status": "422"})
        if failure == "too_long":  # as GitHub answers a body over its limit, whatever this one's length
            return self._send(422, _too_long("create-an-issue-comment"))
        if not (self.headers.get("Authorization") or "").startswith("Bearer "):
            return self._send(401, {"message": "Requires authentication"})
        self._route(method, split.path, query, body)

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> None:
        st, lock = self.fake.state, self.fake.lock
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/statuses/([0-9A-Za-z._-]+)", path):
            if method != "POST":
                return self._send(404, {"message": "Not Found"})
            if not isinstance(body, dict) or body.get("state") not in ("error", "failure", "pending", "success"):
                return self._send(422, {"message": "Validation Failed"})
            with lock:
                st.next_id += 1
                status = {"id": st.next_id, **body}
                st.statuses.setdefault(f"{m[1]}@{m[2]}", []).append(status)
            return self._send(201, status)
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/comments", path):
            key = f"{m[1]}#{m[2]}"
            if method == "POST":
                if not isinstance(body, dict) or not body.get("body"):
                    return self._send(422, {"message": "Validation Failed"})
                if len(body["body"]) > COMMENT_MAX_CHARS:
                    return self._send(422, _too_long("create-an-issue-comment"))
                cid = self.fake.add_comment(m[1], int(m[2]), body["body"], "attnprof[bot]")
                return self._send(201, next(c for c in self.fake.comments(m[1], int(m[2])) if c["id"] == cid))
            if method == "GET":
                per_page = min(int(query.get("per_page", "30")), 100)
                page = int(query.get("page", "1"))
                items = st.comments.get(key, [])
                last = max(1, -(-len(items) // per_page))
                chunk = items[(page - 1) * per_page : page * per_page]
                base = f"http://{self.headers['Host']}{path}?per_page={per_page}"
                links = []
                if page < last:
                    links.append(f'<{base}&page={page + 1}>; rel="next"')
                    links.append(f'<{base}&page={last}>; rel="last"')
                return self._send(200, chunk, {"Link": ", ".join(links)} if links else None)
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/comments/(\d+)", path):
            if method == "PATCH":
                if isinstance(body, dict) and len(str(body.get("body") or "")) > COMMENT_MAX_CHARS:
                    return self._send(422, _too_long("update-an-issue-comment"))
                for comments in st.comments.values():
                    for c in comments:
                        if c["id"] == int(m[2]):
                            c["body"] = body["body"]
                            return self._send(200, c)
            return self._send(404, {"message": "Not Found"})
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/collaborators/([^/]+)/permission", path)
        if m and method == "GET":
            perm = st.permissions.get(f"{m[1]}:{m[2]}")
            if perm is None:
                return self._send(404, {"message": "Not Found"})
            return self._send(200, {"permission": perm, "user": {"login": m[2]}})
        return self._send(404, {"message": "Not Found"})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")
