"""What a request with a body may cost before anything reads it (docs/architecture.md, "Public HTTP API").

``BodyGateMiddleware`` decides from the headers alone: the request's credentials (a check the app passes in,
``attnprof.server.preauth``), then a slot among the bodies this process is receiving at once. A refused request is
answered without its body being read: the server holds at most what it reads ahead of the app (64 KiB) per connection.

``BodyLimitMiddleware`` then bounds the body's size by its route: a declared ``Content-Length`` over the limit
answers 413 at once; a chunked body is read up to the limit (413 past it) and then handed on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Literal

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from attnprof.server.errors import ServiceError, Unavailable

# Multipart bodies carry the bundle plus the spec and fields.
MULTIPART_SLACK_BYTES = 2 * 1024 * 1024
# What the server reads of a body ahead of the app (uvicorn's flow control pauses the connection past it): a body
# declared no larger costs what any request costs, and takes no slot.
READ_AHEAD_BYTES = 64 * 1024
# What a client past the limit of unfinished bodies is asked to wait, in seconds: an upload's time, about.
BUSY_RETRY_AFTER_S = 2
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The routes that take more than a JSON body: a job's form with its bundles, and a trace's bytes.
_JOB_FORM = re.compile(r"/api/v1/projects/[^/]+/jobs/?")
_TRACE = re.compile(r"(/api/v1/projects/[^/]+/runs|/internal/jobs)/.+/traces/.+")

ADMIT: Literal["admit"] = "admit"
"""The request's credentials allow it to send its body (what they open is still its route's to decide)."""
WITHOUT_BODY: Literal["without_body"] = "without_body"
"""The app answers without the body, as it would to an empty one: a request whose answer does not depend on the
body (a dashboard form without a session is sent to sign in, whatever it holds)."""

Verdict = Literal["admit", "without_body"] | ServiceError
BodyCheck = Callable[[Scope], Awaitable[Verdict]]


def has_body(scope: Scope) -> bool:
    """Whether the request says it carries a body (a Content-Length above 0, or chunked)."""
    for name, value in scope.get("headers") or ():
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


def _declared(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class BodyGateMiddleware:
    """Every request with a body passes ``check`` before any of it is read, then takes one of ``max_unfinished``
    slots of this process until its body has arrived (503 with ``Retry-After`` when none is free; a body declared
    within ``READ_AHEAD_BYTES`` takes none), at ``min_rate_bytes_s`` after ``grace_s`` at least, or the request is
    read as a client that went away and the slot freed. A refusal closes the connection: the body is never read."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        check: BodyCheck,
        max_unfinished: int,
        min_rate_bytes_s: int = 64 * 1024,
        grace_s: float = 10.0,
    ) -> None:
        self.app = app
        self.check = check
        self.max_unfinished = max_unfinished
        # A body must arrive at least this fast after the first grace_s, or its slot is taken back: a sender that
        # trickles a byte now and then would otherwise hold a slot for as long as it keeps the connection.
        self.min_rate_bytes_s = min_rate_bytes_s
        self.grace_s = grace_s
        self.unfinished = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in _BODY_METHODS or not has_body(scope):
            await self.app(scope, receive, send)
            return
        verdict = await self.check(scope)
        if isinstance(verdict, ServiceError):
            await _answer(scope, send, verdict)
            return
        if verdict == WITHOUT_BODY:
            await self.app(scope, _without_body(), _closing(send))
            return
        declared = _declared(scope)
        if declared is not None and declared <= READ_AHEAD_BYTES:
            await self.app(scope, receive, send)
            return
        if self.unfinished >= self.max_unfinished:
            busy = Unavailable(
                f"this server process is receiving {self.max_unfinished} request bodies already "
                f"(ATTNPROF_LIMITS__UNFINISHED_BODIES); retry in {BUSY_RETRY_AFTER_S} s",
                retry_after_s=BUSY_RETRY_AFTER_S,
            )
            await _answer(scope, send, busy)
            return
        self.unfinished += 1
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self.unfinished -= 1

        started = anyio.current_time()
        received = 0

        async def counted() -> Message:
            nonlocal received
            if not held:
                return await receive()
            left = started + self.grace_s + received / self.min_rate_bytes_s - anyio.current_time()
            message: Message | None = None
            if left > 0:
                with anyio.move_on_after(left):
                    message = await receive()
            if message is None:  # too slow: the body is abandoned, its slot free for another
                release()
                return {"type": "http.disconnect"}
            received += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body", False):
                release()
            return message

        try:
            await self.app(scope, counted, send)
        finally:
            release()


def _without_body() -> Receive:
    """What the app reads of a request whose body is not to be read: an empty body, then nothing until the response
    has been sent (as a server's ``receive`` waits for a disconnect that has not come)."""
    given = False

    async def receive() -> Message:
        nonlocal given
        if given:
            await anyio.sleep_forever()
        given = True
        return {"type": "http.request", "body": b"", "more_body": False}

    return receive


def _closing(send: Send) -> Send:
    """The answer to a request whose body was not read ends its connection, so the server reads no more of it."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)

    return closing


async def _answer(scope: Scope, send: Send, error: ServiceError) -> None:
    """``error`` rendered by the app's own handler (JSON under /api, a page under /ui), with its headers."""
    render = scope["app"].exception_handlers[ServiceError]
    response: Response = await render(Request(scope), error)
    for name, value in error.headers.items():
        response.headers.setdefault(name, value)
    await response(scope, _without_body(), _closing(send))


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, json_bytes: int, bundle_bytes: int, trace_bytes: int) -> None:
        self.app = app
        self.json_bytes = json_bytes
        self.multipart_bytes = bundle_bytes + MULTIPART_SLACK_BYTES
        self.trace_bytes = trace_bytes

    def _limit(self, scope: Scope) -> int:
        """The route's limit: a job's form (multipart) and a trace take more than a JSON body; any other route takes
        at most a JSON body's size, whatever its content type says."""
        path = scope.get("path", "")
        if _TRACE.fullmatch(path):
            return self.trace_bytes
        headers = dict(scope.get("headers") or [])
        ctype = headers.get(b"content-type", b"").decode("latin-1").lower()
        if ctype.startswith("multipart/") and _JOB_FORM.fullmatch(path):
            return self.multipart_bytes
        return self.json_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _reject(send, limit)
            return
        if declared is not None:
            await self.app(scope, _counting(receive, limit), send)
            return
        # No Content-Length (chunked): read the body here, up to the limit, then replay it to the app.
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > limit:
                await _reject(send, limit)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _counting(receive: Receive, limit: int) -> Receive:
    """A client that sends more than its Content-Length declared is cut off at the limit."""
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                return {"type": "http.disconnect"}
        return message

    return counted


async def _reject(send: Send, limit: int) -> None:
    body = json.dumps({"error": "payload_too_large", "detail": f"the body is over the limit of {limit} bytes"})
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})
