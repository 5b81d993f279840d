"""The service's internal API as a profile worker sees it: HTTP, no database. The worker token opens the testbed
(reading it, and keying it with the worker's device at start) and the claim (with the message's claim secret); the
claim answers with the attempt's job token, and a client made from it (``for_job``) opens the job's bundle,
heartbeat, result, traces and failure. Each path is built by ``attnprof.contract.routes`` (the service's router
declares the same templates) and each answer the worker reads is validated with its contract model
(``attnprof.contract.worker_api``), which the method returns.

Errors, in one place:

``ServiceAPIError``  base
``Stale``            409 or 404, and 401 to a job token (revoked): this attempt is not (or no longer) the job's:
                     drop it, report nothing
``Refused``          another 4xx: the request was wrong (a bug, or a limit); retrying cannot help. Also a 409 or
                     404 to ``register``: the testbed is keyed by another device (the worker must not start). Also
                     an answer that its contract model refuses (a service of another version): retrying cannot help
``Unreachable``      no answer, or a 5xx/429 after the retries: the service is down or overloaded
"""

from __future__ import annotations

import logging
import time
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from attnprof.contract import routes
from attnprof.contract.ids import JobId
from attnprof.contract.public_api import ErrorAnswer
from attnprof.contract.worker_api import (
    AliveAnswer,
    CanaryAnswer,
    ClaimAnswer,
    HeartbeatAnswer,
    WorkerDeviceAnswer,
    WorkerResultAnswer,
    WorkerTestbed,
)
from attnprof.core.documents import ResultDocument
from attnprof.core.documents.paired import PairedDocument

log = logging.getLogger(__name__)

TIMEOUT_S = 60.0
RETRIES = 4
BACKOFF_S = 0.5


class ServiceAPIError(Exception):
    pass


class Stale(ServiceAPIError):
    pass


class Refused(ServiceAPIError):
    pass


class Unreachable(ServiceAPIError):
    pass


def _detail(response: httpx.Response) -> str:
    try:
        body = ErrorAnswer.model_validate_json(response.content)
    except ValidationError:
        return f"{response.status_code}: {response.text[:300]}"
    return f"{response.status_code} {body.error}: {body.detail}"


M = TypeVar("M", bound=BaseModel)


def _answer(response: httpx.Response, model: type[M]) -> M:
    """The answer read through its contract model; ``Refused`` naming the fields it refuses (never their values: a
    claim's answer holds the job token)."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        shown = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(answer)'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False, include_context=False)[:3]
        )
        request = response.request
        raise Refused(
            f"{request.method} {request.url.path}: the answer is not a {model.__name__} ({shown}): the service "
            "speaks another version of the worker API"
        ) from None


class WorkerAPI:
    """One token's view of ``/internal``: a worker token's (``job=False``), or one attempt's job token's. Safe to
    use from one thread; make one per thread."""

    def __init__(
        self, base_url: str, token: str, *, timeout_s: float = TIMEOUT_S, retries: int = RETRIES, job: bool = False
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s
        )
        self._base_url, self._timeout_s, self._retries = base_url, timeout_s, retries
        # A job token the service no longer takes (401) means the attempt ended: the same as a stale attempt.
        self._stale = (401, 404, 409) if job else (404, 409)

    def for_job(self, token: str) -> WorkerAPI:
        """A new client holding ``token``, the job token that a claim answered with."""
        return WorkerAPI(self._base_url, token, timeout_s=self._timeout_s, retries=self._retries, job=True)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> WorkerAPI:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, url: str, *, retries: int | None = None, **kw: Any) -> httpx.Response:
        tries = self._retries if retries is None else retries
        last = ""
        for i in range(tries + 1):
            if i:
                time.sleep(BACKOFF_S * 2 ** (i - 1))
            try:
                response = self._http.request(method, url, **kw)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code in self._stale:
                raise Stale(_detail(response))
            if response.status_code == 429 or response.status_code >= 500:
                last = _detail(response)
                continue
            if response.status_code >= 400:
                raise Refused(_detail(response))
            return response
        raise Unreachable(f"{method} {url}: {last}")

    def testbed(self) -> WorkerTestbed:
        """The token's testbed: ``name``, ``key`` (null before its first run) and ``meaning``."""
        return _answer(self._call("GET", routes.testbed()), WorkerTestbed)

    def register(self, key: str, meaning: dict[str, str]) -> WorkerDeviceAnswer:
        """Key the token's testbed with this worker's device (what it probed at start, outside the jail): the
        testbed's ``name``, ``key``, ``meaning`` and whether this set the key (``keyed``). ``Refused`` naming both
        devices when the testbed is keyed by another one."""
        try:
            r = self._call("POST", routes.testbed_key(), json={"key": key, "meaning": meaning})
        except Stale as exc:  # no attempt here to be stale: the testbed's answer to this device
            raise Refused(str(exc)) from None
        return _answer(r, WorkerDeviceAnswer)

    def alive(self, worker: str, testbed: str) -> AliveAnswer:
        """Say this worker of ``testbed`` is alive (busy or idle): ``testbed``, ``live_workers``, ``live_s``. One try:
        the next report is the retry."""
        r = self._call("POST", routes.alive(), json={"worker": worker, "testbed": testbed}, retries=0)
        return _answer(r, AliveAnswer)

    def canary(self, body: dict[str, Any]) -> CanaryAnswer:
        """Send the canary this worker ran on its host: the service's judgement (``state``: healthy, learning or
        quarantined, and why)."""
        try:
            r = self._call("POST", routes.canary(), json=body)
        except Stale as exc:  # no attempt to be stale: the testbed's answer to this worker
            raise Refused(str(exc)) from None
        return _answer(r, CanaryAnswer)

    def claim(self, job_id: JobId, attempt: int, worker: str, secret: str) -> ClaimAnswer:
        """Start ``attempt`` with the claim secret of its message: the spec, the bundle's hash, the testbed and the
        attempt's job ``token``. ``Stale`` if it is not the next one or not this message's (drop it)."""
        body = {"attempt": attempt, "worker": worker, "secret": secret}
        return _answer(self._call("POST", routes.claim(job_id), json=body), ClaimAnswer)

    def heartbeat(self, job_id: JobId, attempt: int) -> HeartbeatAnswer:
        """Say the attempt is alive; the answer says whether the job was cancelled. One try: the next beat is the
        retry."""
        r = self._call("POST", routes.heartbeat(job_id), json={"attempt": attempt}, retries=0)
        return _answer(r, HeartbeatAnswer)

    def bundle(self, job_id: JobId, *, max_bytes: int, tree: str = "head") -> bytes:
        """The job's source bundle (``tree`` base: a paired job's merge base's), read up to ``max_bytes``
        (``Refused`` past it)."""
        params = {"tree": tree} if tree != "head" else None
        last = ""
        for i in range(self._retries + 1):
            if i:
                time.sleep(BACKOFF_S * 2 ** (i - 1))
            try:
                with self._http.stream("GET", routes.bundle(job_id), params=params) as r:
                    if r.status_code in self._stale:
                        r.read()
                        raise Stale(_detail(r))
                    if r.status_code == 429 or r.status_code >= 500:
                        r.read()
                        last = _detail(r)
                        continue
                    if r.status_code >= 400:
                        r.read()
                        raise Refused(_detail(r))
                    chunks: list[bytes] = []
                    size = 0
                    for chunk in r.iter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            raise Refused(f"the bundle is over the limit of {max_bytes} bytes")
                        chunks.append(chunk)
                    return b"".join(chunks)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
        raise Unreachable(f"GET {tree} bundle of {job_id}: {last}")

    def result(
        self,
        job_id: JobId,
        attempt: int,
        document: ResultDocument,
        *,
        base: ResultDocument | None = None,
        paired: PairedDocument | None = None,
    ) -> WorkerResultAnswer:
        """Upload the attempt's result document (a paired job's: the head's, with the ``base``'s and the ``paired``
        document in the same body), each dumped from its model; retried freely (the service stores it once per
        attempt, all or nothing)."""
        body: dict[str, Any] = {"attempt": attempt, "result": document.model_dump(mode="json", by_alias=True)}
        if base is not None and paired is not None:
            body["base"] = base.model_dump(mode="json", by_alias=True)
            body["paired"] = paired.model_dump(mode="json", by_alias=True)
        return _answer(self._call("POST", routes.result(job_id), json=body), WorkerResultAnswer)

    def trace(self, job_id: JobId, attempt: int, name: str, data: bytes) -> None:
        self._call(
            "PUT",
            routes.trace(job_id, name),
            params={"attempt": attempt},
            content=data,
            headers={"Content-Type": "application/gzip"},
        )

    def failure(self, job_id: JobId, attempt: int, reason: str, *, timed_out: bool, retry: bool) -> None:
        """Record the failed attempt (the service answers with the job, which the worker does not read)."""
        self._call(
            "POST",
            routes.failure(job_id),
            json={"attempt": attempt, "reason": reason, "timed_out": timed_out, "retry": retry},
        )
