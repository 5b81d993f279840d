"""The upload client: httpx only (no FastAPI, no SQLAlchemy), so a CI runner needs just the base install."""

from __future__ import annotations

import gzip
import json
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
