"""The CI clients (upload, submit): httpx only (no FastAPI, no SQLAlchemy), so a CI runner needs the base install."""

from __future__ import annotations

import contextlib
import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

TIMEOUT_S = 120.0


class UploadError(Exception):
    """The document could not be read, or the service refused it (the message says why)."""


def _read(path: Path) -> Any:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except (OSError, ValueError) as exc:
        raise UploadError(f"{path}: cannot read a JSON result document: {exc}") from exc


def _check(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
            detail = f"{body.get('error')}: {body.get('detail')}"
        except ValueError:
            detail = response.text[:500]
        raise UploadError(f"the service answered {response.status_code}: {detail}")
    return response.json() if response.content else None


def upload_result(
    path: Path,
    *,
    server: str,
    token: str,
    project: str | None = None,
    branch: str,
    commit: str,
    repo: str | None = None,
    base_commit: str | None = None,
    ancestors: list[str] | None = None,
    pr: int | None = None,
    testbed: str | None = None,
    trace_dir: Path | None = None,
) -> dict[str, Any]:
    """POST the document to ``/api/v1/projects/{project}/results``, then PUT the traces it names that
    ``trace_dir`` holds. Returns the service's answer (run id, verdict, comparison)."""
    document = _read(path)
    body = {
        "result": document,
        "branch": branch,
        "commit": commit,
        "repo": repo,
        "base_commit": base_commit,
        "ancestors": ancestors or [],
        "pr": pr,
        "testbed": testbed,
    }
    headers = {"Authorization": f"Bearer {token}"}
    base = server.rstrip("/")
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=TIMEOUT_S) as http:
            if project is None:
                project = str(_check(http.get("/api/v1/token"))["project"])
            answer: dict[str, Any] = _check(http.post(f"/api/v1/projects/{project}/results", json=body))
            if trace_dir is not None:
                names = {c.get("trace") for c in document.get("cases", []) if isinstance(c, dict)}
                for name in sorted(n for n in names if isinstance(n, str)):
                    file = trace_dir / name
                    if file.is_file():
                        url = f"/api/v1/projects/{project}/runs/{answer['run_id']}/traces/{name}"
                        _check(http.put(url, content=file.read_bytes(), headers={"Content-Type": "application/gzip"}))
    except httpx.HTTPError as exc:
        raise UploadError(f"cannot reach {base}: {exc}") from exc
    return answer


class SubmitError(UploadError):
    """The job could not be submitted: bad input, a refusal (the message says why), or no service."""


def connect(server: str, token: str, timeout_s: float = TIMEOUT_S) -> httpx.Client:
    """An HTTP client for the service with the bearer token."""
    return httpx.Client(base_url=server.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)


def token_project(http: httpx.Client) -> str:
    """The project of the client's token (``GET /api/v1/token``)."""
    return str(_check(http.get("/api/v1/token"))["project"])


def submit_job(
    http: httpx.Client,
    *,
    project: str,
    spec: str,
    testbed: str,
    branch: str,
    commit: str,
    bundle: bytes | None = None,
    repo: str | None = None,
    base_commit: str | None = None,
    ancestors: list[str] | None = None,
    pr: int | None = None,
    idempotency_key: str,
    attempts: int = 3,
) -> dict[str, Any]:
    """POST a job (multipart: the suite, the bundle, where the code came from); returns ``{id, status}``.

    Sent again on a connection error with the same ``idempotency_key``, so a retry never makes a second job.
    """
    data: dict[str, str] = {"testbed": testbed, "branch": branch, "commit": commit}
    for name, value in (("repo", repo), ("base_commit", base_commit), ("pr", pr)):
        if value is not None:
            data[name] = str(value)
    if ancestors:
        data["ancestors"] = json.dumps(ancestors)
    files: dict[str, tuple[str, bytes, str]] = {"spec": ("attnprof.toml", spec.encode(), "application/toml")}
    if bundle is not None:
        files["bundle"] = ("source.tar.gz", bundle, "application/gzip")
    last: Exception | None = None
    for _ in range(attempts):
        try:
            response = http.post(
                f"/api/v1/projects/{project}/jobs", data=data, files=files, headers={"Idempotency-Key": idempotency_key}
            )
        except httpx.TransportError as exc:
            last = exc
            continue
        try:
            answer: dict[str, Any] = _check(response)
        except UploadError as exc:
            raise SubmitError(str(exc)) from exc
        return answer
    raise SubmitError(f"cannot reach {http.base_url}: {last}")


def get_job(http: httpx.Client, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = _check(http.get(f"/api/v1/jobs/{job_id}"))
    return found


def get_comparison(http: httpx.Client, job_id: str) -> dict[str, Any] | None:
    response = http.get(f"/api/v1/jobs/{job_id}/comparison")
    if response.status_code == 404:
        return None
    found: dict[str, Any] = _check(response)
    return found


FINAL_STATES = ("done", "failed", "timed_out", "cancelled")


def wait_job(
    http: httpx.Client,
    job_id: str,
    *,
    timeout_s: float,
    poll_s: float = 1.0,
    on_poll: Callable[[dict[str, Any] | None, float], None] | None = None,
) -> tuple[dict[str, Any] | None, bool]:
    """Poll the job until it is final or ``timeout_s`` passed; returns (last state seen, final?).

    A failed poll (the service restarting) is retried until the time runs out.
    """
    started = time.monotonic()
    job: dict[str, Any] | None = None
    while True:
        with contextlib.suppress(httpx.TransportError):
            job = get_job(http, job_id)
        elapsed = time.monotonic() - started
        if on_poll is not None:
            on_poll(job, elapsed)
        if job is not None and job.get("status") in FINAL_STATES:
            return job, True
        if elapsed >= timeout_s:
            return job, False
        time.sleep(min(poll_s, max(0.0, timeout_s - elapsed)))
