"""A body that trickles in gives its slot back: the gate takes it back once the body falls behind its pace, so a
sender with valid credentials (or a webhook signature of the right form) cannot hold the server's slots by sending
a byte now and then."""

from __future__ import annotations

from typing import Any

import anyio

from attnprof.server.limits import ADMIT, BodyGateMiddleware


def _scope(length: int) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": "/api/v1/github/webhook",
        "headers": [(b"content-length", str(length).encode())],
    }


async def _admit(_scope: Any) -> Any:
    return ADMIT


def test_a_trickling_body_loses_its_slot_and_a_steady_one_keeps_it() -> None:
    seen: list[list[str]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        kinds = []
        while True:
            message = await receive()
            kinds.append(message["type"])
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        seen.append(kinds)

    gate = BodyGateMiddleware(app, check=_admit, max_unfinished=1, min_rate_bytes_s=1024, grace_s=0.3)

    async def trickle() -> dict[str, Any]:
        await anyio.sleep(0.2)
        return {"type": "http.request", "body": b"x", "more_body": True}

    async def steady_source() -> Any:
        chunks = [{"type": "http.request", "body": b"x" * 200_000, "more_body": True}] * 2
        chunks.append({"type": "http.request", "body": b"x" * 200_000, "more_body": False})
        for chunk in chunks:
            yield chunk

    async def main() -> None:
        started = anyio.current_time()
        with anyio.fail_after(5):  # without the pace, the trickle would hold its slot for ever
            await gate(_scope(33_554_431), trickle, None)
        took = anyio.current_time() - started
        assert seen[0][-1] == "http.disconnect" and 0.3 <= took < 1.5, (seen, took)
        assert gate.unfinished == 0  # the slot is free for the next body
        source = steady_source()

        async def steady() -> Any:
            return await source.__anext__()

        await gate(_scope(600_000), steady, None)
        assert seen[1] == ["http.request"] * 3 and gate.unfinished == 0

    anyio.run(main)
