"""The CI clients (upload, submit): httpx only (no FastAPI, no SQLAlchemy), so a CI runner needs the base install.

Every request is sent again when the service cannot be reached or answers 500, 502, 503, 504 or 429 (a restart, a
database outage, a rate limit): after an exponential backoff with jitter, or after the answer's ``Retry-After``
(bounded), until the command's time budget (a ``deadline`` on the monotonic clock) runs out; then ``Unreachable``.
A POST is sent again as it was: a job under the same ``Idempotency-Key`` and the same result upload are each
stored once, and the retry gets the first one's answer. Any other 4xx is final at once.

Each answer is read through its model (``attnprof.contract.public_api``); one that is not what the model says is an
``UploadError`` (a service of another version), as a refusal is.

``UploadError``   the document could not be read, the service refused the request (a 4xx: bad input), or its
                  answer is not what this client reads
``SubmitError``   the same, for a job submission
``Unreachable``   no answer but connection errors, 5xx or 429 until the time budget ran out (no verdict)
"""

from __future__ import annotations

import email.utils
import gzip
import json
import random
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from attnprof.contract.ids import JobId
from attnprof.contract.links import PATHS
from attnprof.contract.provenance import Provenance
from attnprof.contract.public_api import (
    ErrorAnswer,
    JobAnswer,
    JobComparisonAnswer,
    JobCreatedAnswer,
    ResultUploadAnswer,
    TokenAnswer,
)

TIMEOUT_S = 120.0  # one request's own limit (connect, read, write), within the budget
BUDGET_S = 600.0  # how long a command keeps retrying when its caller gives no deadline
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 15.0
RETRY_AFTER_MAX_S = 60.0  # a longer Retry-After is waited this long
ATTEMPT_MIN_S = 1.0  # the shortest limit one request gets, even at the end of the budget


class UploadError(Exception):
    """The document could not be read, or the service refused it (the message says why)."""


class Unreachable(UploadError):
    """The service could not be reached, or answered only 5xx or 429, until the time budget ran out."""

    def __init__(self, server: str, down_s: float, last: str) -> None:
        super().__init__(
            f"the service at {server} was unreachable for {down_s:.0f} s, until the time budget ran out (last: {last})"
        )
        self.down_s = down_s


def deadline_in(budget_s: float) -> float:
    """The deadline (``time.monotonic()`` seconds) ``budget_s`` seconds from now."""
    return time.monotonic() + budget_s


def retry_after_s(response: httpx.Response) -> float | None:
    """The answer's ``Retry-After`` in seconds (a number or an HTTP date), at most ``RETRY_AFTER_MAX_S``."""
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() - datetime.now(UTC).timestamp()
    return min(max(0.0, seconds), RETRY_AFTER_MAX_S) if seconds == seconds else None  # NaN: no value


def _error(response: httpx.Response) -> str | None:
    """``error: detail`` of an error answer's body (``ErrorAnswer``), or None where the body is not one (a proxy's
    page, say)."""
    try:
        body = ErrorAnswer.model_validate_json(response.content)
    except ValidationError:
        return None
    return f"{body.error}: {body.detail}"


def _describe(response: httpx.Response) -> str:
    error = _error(response)
    if error is not None:
        return f"{response.status_code} {error}"
    return f"{response.status_code} {response.text[:200]}".strip()


def send(
    http: httpx.Client,
    method: str,
    url: str,
    *,
    deadline: float,
    on_retry: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """Send the request, and again after a connection error or a 5xx/429 answer until ``deadline``; the first
    other answer is returned. ``on_retry(what went wrong, seconds since the first try)`` is called before each
    wait. Raises ``Unreachable`` when the deadline passes."""
    started = time.monotonic()
    backoff_s = BACKOFF_FIRST_S
    while True:
        timeout_s = min(TIMEOUT_S, max(ATTEMPT_MIN_S, deadline - time.monotonic()))
        try:
            response = http.request(method, url, timeout=timeout_s, **kwargs)
        except httpx.TransportError as exc:
            last, wait_s = f"{type(exc).__name__}: {exc}".rstrip(": "), None
        else:
            if response.status_code not in RETRY_STATUSES:
                return response
            last, wait_s = _describe(response), retry_after_s(response)
        now = time.monotonic()
        if now >= deadline:
            raise Unreachable(str(http.base_url).rstrip("/") or url, now - started, last)
        if wait_s is None:  # no Retry-After: backoff, jittered so that clients cut off together do not return so
            wait_s = backoff_s * random.uniform(0.5, 1.0)
            backoff_s = min(2 * backoff_s, BACKOFF_MAX_S)
        if on_retry is not None:
            on_retry(last, now - started)
        time.sleep(min(wait_s, deadline - now))


def _read(path: Path) -> Any:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except (OSError, ValueError) as exc:
        raise UploadError(f"{path}: cannot read a JSON result document: {exc}") from exc


def _check(response: httpx.Response) -> None:
    """``UploadError`` when the service refused the request (a 4xx; 5xx and 429 were retried by ``send``)."""
    if response.status_code >= 400:
        detail = _error(response)
        raise UploadError(f"the service answered {response.status_code}: {detail or response.text[:500]}")


M = TypeVar("M", bound=BaseModel)


def _answer(response: httpx.Response, model: type[M]) -> M:
    """The answer read through ``model``; ``UploadError`` when the service refused the request or answered with
    something else (a service of another version)."""
    _check(response)
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        shown = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(answer)'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)[:3]
        )
        request = response.request
        raise UploadError(
            f"the service's answer to {request.method} {request.url.path} is not what this client reads ({shown})"
        ) from None


def upload_result(
    path: Path,
    *,
    server: str,
    token: str,
    project: str | None = None,
    provenance: Provenance,
    testbed: str | None = None,
    trace_dir: Path | None = None,
    budget_s: float = BUDGET_S,
) -> ResultUploadAnswer:
    """POST the document with its ``provenance`` to ``/api/v1/projects/{project}/results``, then PUT the traces it
    names that ``trace_dir`` holds. Returns the service's answer (run id, verdict, comparison).

    Retried for up to ``budget_s`` seconds while the service is unreachable (``Unreachable`` after that): the
    service recognises the same upload sent again, so a retry after a lost answer gets the stored run's."""
    deadline = deadline_in(budget_s)
    document = _read(path)
    body = {"result": document, **provenance.model_dump(mode="json"), "testbed": testbed}
    headers = {"Authorization": f"Bearer {token}"}
    base = server.rstrip("/")
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=TIMEOUT_S) as http:
            if project is None:
                project = token_project(http, deadline=deadline)
            url = PATHS.api_results(project)
            answer = _answer(send(http, "POST", url, json=body, deadline=deadline), ResultUploadAnswer)
            if trace_dir is not None:
                names = {c.get("trace") for c in document.get("cases", []) if isinstance(c, dict)}
                for name in sorted(n for n in names if isinstance(n, str)):
                    file = trace_dir / name
                    if file.is_file():
                        url = PATHS.api_trace(project, answer.run_id, name)
                        content, kind = file.read_bytes(), {"Content-Type": "application/gzip"}
                        _check(send(http, "PUT", url, content=content, headers=kind, deadline=deadline))
    except httpx.HTTPError as exc:
        raise UploadError(f"cannot reach {base}: {exc}") from exc
    return answer


class SubmitError(UploadError):
    """The job could not be submitted: bad input, a refusal (the message says why), or no service."""


def connect(server: str, token: str, timeout_s: float = TIMEOUT_S) -> httpx.Client:
    """An HTTP client for the service with the bearer token."""
    return httpx.Client(base_url=server.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)


def token_project(http: httpx.Client, *, deadline: float | None = None) -> str:
    """The project of the client's token (``GET /api/v1/token``); ``UploadError`` for a token of no project."""
    response = send(http, "GET", PATHS.api_token(), deadline=_or_default(deadline))
    answer = _answer(response, TokenAnswer)
    if answer.project is None:
        raise UploadError("the token is not a project's (GET /api/v1/token names no project): pass a project's token")
    return answer.project


def _or_default(deadline: float | None) -> float:
    return deadline if deadline is not None else deadline_in(BUDGET_S)


def submit_job(
    http: httpx.Client,
    *,
    project: str,
    spec: str,
    testbed: str | None,
    provenance: Provenance,
    bundle: bytes | None = None,
    base_bundle: bytes | None = None,
    idempotency_key: str,
    deadline: float | None = None,
    suite_path: str | None = None,
    testbeds: Sequence[str] = (),
) -> JobCreatedAnswer:
    """POST a job (multipart: the suite, the bundle, where the code came from, the suite's path in the repository
    when known); returns its ``id`` and ``status``. With ``base_bundle`` (the merge base's tree, in the bundle's
    form) the job is paired: the file part ``base_bundle`` beside ``bundle``, and ``provenance.base_commit`` (the
    commit that tree is of) is required.

    Sent again while the service is unreachable (until ``deadline``, then ``Unreachable``) with the same
    ``idempotency_key``, so a retry never makes a second job; a refusal (4xx) is a ``SubmitError``. ``testbeds``
    (several): one job per testbed, linked (the answer's ``jobs``); ``testbed`` None and no ``testbeds``: the suite's
    ``[suite] testbeds``.
    """
    if base_bundle is not None and (bundle is None or provenance.base_commit is None):
        raise SubmitError("a paired job (base_bundle) needs the head's bundle and the base_commit its tree is of")
    data: dict[str, str] = {"branch": provenance.branch, "commit": provenance.commit}
    if testbeds:
        data["testbeds"] = ",".join(testbeds)
    elif testbed is not None:
        data["testbed"] = testbed
    for name, value in (("repo", provenance.repo), ("base_commit", provenance.base_commit), ("pr", provenance.pr)):
        if value is not None:
            data[name] = str(value)
    if provenance.ancestors:
        data["ancestors"] = json.dumps(list(provenance.ancestors))
    if suite_path is not None:
        data["suite_path"] = suite_path
    files: dict[str, tuple[str, bytes, str]] = {"spec": ("attnprof.toml", spec.encode(), "application/toml")}
    if bundle is not None:
        files["bundle"] = ("source.tar.gz", bundle, "application/gzip")
    if base_bundle is not None:
        files["base_bundle"] = ("base.tar.gz", base_bundle, "application/gzip")
    response = send(
        http,
        "POST",
        PATHS.api_jobs(project),
        data=data,
        files=files,
        headers={"Idempotency-Key": idempotency_key},
        deadline=_or_default(deadline),
    )
    try:
        return _answer(response, JobCreatedAnswer)
    except UploadError as exc:
        raise SubmitError(str(exc)) from exc


def get_job(
    http: httpx.Client,
    job_id: JobId,
    *,
    deadline: float | None = None,
    on_retry: Callable[[str, float], None] | None = None,
) -> JobAnswer:
    response = send(http, "GET", PATHS.api_job(job_id), deadline=_or_default(deadline), on_retry=on_retry)
    return _answer(response, JobAnswer)


def get_comparison(http: httpx.Client, job_id: JobId, *, deadline: float | None = None) -> JobComparisonAnswer | None:
    """The comparison of the job's run; None before it has one (404)."""
    response = send(http, "GET", PATHS.api_job_comparison(job_id), deadline=_or_default(deadline))
    if response.status_code == 404:
        return None
    return _answer(response, JobComparisonAnswer)


FINAL_STATES = ("done", "failed", "timed_out", "cancelled")


def wait_job(
    http: httpx.Client,
    job_id: JobId,
    *,
    deadline: float,
    poll_s: float = 1.0,
    on_poll: Callable[[JobAnswer | None, float], None] | None = None,
) -> tuple[JobAnswer | None, bool]:
    """Poll the job until it is final or ``deadline`` passed; returns (last state seen, final?).

    A poll the service does not answer (a restart, a database outage) is retried with backoff, and
    ``on_poll(None, seconds waited)`` says so; ``Unreachable`` when it still does not answer at the deadline.
    """
    started = time.monotonic()

    def unanswered(_: str, __: float) -> None:
        if on_poll is not None:
            on_poll(None, time.monotonic() - started)

    while True:
        job = get_job(http, job_id, deadline=deadline, on_retry=unanswered)
        waited_s = time.monotonic() - started
        if on_poll is not None:
            on_poll(job, waited_s)
        if job.status in FINAL_STATES:
            return job, True
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return job, False
        time.sleep(min(poll_s, left_s))
