"""Body size limits applied before anything reads the body (DESIGN 3.4): JSON bodies and multipart uploads.

A declared ``Content-Length`` over the limit answers 413 at once; a chunked body is read up to the limit
(413 past it) and then handed on.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Multipart bodies carry the bundle plus the spec and fields.
MULTIPART_SLACK_BYTES = 2 * 1024 * 1024


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, json_bytes: int, bundle_bytes: int, trace_bytes: int) -> None:
        self.app = app
        self.json_bytes = json_bytes
        self.multipart_bytes = bundle_bytes + MULTIPART_SLACK_BYTES
        self.trace_bytes = trace_bytes

    def _limit(self, scope: Scope) -> int:
        headers = dict(scope.get("headers") or [])
        ctype = headers.get(b"content-type", b"").decode("latin-1").lower()
        if ctype.startswith("multipart/"):
            return self.multipart_bytes
        if "/traces/" in scope.get("path", ""):
            return self.trace_bytes
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
