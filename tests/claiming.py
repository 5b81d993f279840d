"""Playing a GPU worker in the tests: the claim secret of a job's ``profile.run`` message, read from the broker as a
worker gets it, and the claim that turns it (with the worker token) into the attempt's job token."""

from __future__ import annotations

import base64
import json
from typing import Any, Protocol

import redis


class Poster(Protocol):
    def post(self, url: str, **kw: Any) -> Any: ...


def profile_messages(redis_url: str, testbed: str) -> list[list[Any]]:
    """The args ``[job_id, attempt, claim_secret]`` of the messages waiting on ``profile.<testbed>``, newest first."""
    r = redis.Redis.from_url(redis_url)
    try:
        raw = r.lrange(f"profile.{testbed}", 0, -1)
    finally:
        r.close()
    return [json.loads(base64.b64decode(json.loads(m)["body"]))[0] for m in raw]


def claim_secret(redis_url: str, testbed: str, job_id: str, attempt: int | None = None) -> str:
    """The claim secret of the newest message for ``job_id`` (and ``attempt``) waiting on ``profile.<testbed>``."""
    for args in profile_messages(redis_url, testbed):
        if args[0] == job_id and (attempt is None or args[1] == attempt):
            return str(args[2])
    raise AssertionError(f"no profile message for job {job_id} (attempt {attempt}) on profile.{testbed}")


def claim(
    client: Poster, worker_token: str, job_id: str, secret: str, *, attempt: int = 1, worker: str = "w"
) -> dict[str, Any]:
    """Claim ``attempt`` as a worker would; returns the answer (its ``token`` opens the attempt)."""
    r = client.post(
        f"/internal/jobs/{job_id}/claim",
        json={"attempt": attempt, "worker": worker, "secret": secret},
        headers={"Authorization": f"Bearer {worker_token}"},
    )
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
