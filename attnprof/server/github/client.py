"""A small GitHub REST client (httpx): the calls feedback needs, retried on rate limits and server errors.

GitHub answers a rate limit with 403 or 429 and either ``Retry-After`` (seconds) or ``x-ratelimit-remaining: 0``
with ``x-ratelimit-reset`` (epoch seconds); 5xx and transport errors are retried with exponential backoff.
At most ``attempts`` requests are sent per call; the last failure raises ``GitHubError``. Any other 4xx (a plain
403, 404, 422 Validation Failed) is not retried: the same request would get the same answer. Its ``GitHubError`` says
so (``retryable`` False), so that the outbox does not send it again either.

The service's own identity on GitHub (``login``: the user its token authenticates as, ``GET /user``) is learned once
per process and token: the PR comment the service edits is one that identity wrote, never one that merely starts
with the same hidden marker.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx

_T = TypeVar("_T")

RETRY_STATUS = frozenset({403, 429, 500, 502, 503, 504})


class GitHubError(Exception):
    """A GitHub call that failed for good (after its retries); ``status`` is None for a transport error.

    ``retryable``: whether the same request may succeed later (a transport error, a rate limit, a 5xx); False for
    an answer that would be the same again (a 4xx other than a rate limit). ``errors``: the messages of a 422's
    ``errors`` (GitHub's validation failures, e.g. "Body is too long (maximum is 65536 characters)").
    """

    def __init__(
        self, message: str, status: int | None = None, *, retryable: bool = True, errors: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.errors = errors

    @property
    def too_long(self) -> bool:
        """Whether GitHub refused a body for its size (422, "... is too long ...")."""
        return self.status == 422 and any("too long" in e.lower() for e in self.errors)


def _errors(response: httpx.Response) -> tuple[str, ...]:
    """The messages of a validation failure's ``errors`` (GitHub: objects with a ``message``, or strings)."""
    try:
        body = response.json()
    except ValueError:
        return ()
    found = body.get("errors") if isinstance(body, dict) else None
    out = []
    for e in found if isinstance(found, list) else []:
        text = e.get("message") if isinstance(e, dict) else e
        if isinstance(text, str):
            out.append(text)
    return tuple(out)


# The login of each token's user, by API address and the token's digest: it never changes for a token, and one
# ``GET /user`` per process spares a request on every delivery.
_LOGINS: dict[tuple[str, str], str] = {}
_LOGINS_LOCK = threading.Lock()


def _wait_s(response: httpx.Response, attempt: int, backoff_s: float, now: float) -> float | None:
    """Seconds to wait before retrying ``response``, or None when it must not be retried."""
    if response.status_code not in RETRY_STATUS:
        return None
    retry_after = response.headers.get("retry-after")
    if retry_after is not None and retry_after.strip().isdigit():
        return float(retry_after)
    if response.headers.get("x-ratelimit-remaining") == "0" and response.headers.get("x-ratelimit-reset"):
        try:
            reset_s = float(str(response.headers["x-ratelimit-reset"]))
            return max(0.0, reset_s - now)
        except ValueError:
            pass
    if response.status_code == 403:
        return None  # a plain 403 is a permission problem, not a rate limit
    return float(backoff_s * 2**attempt)


class GitHubClient:
    def __init__(
        self,
        api_url: str,
        token: str | None,
        *,
        attempts: int = 4,
        backoff_s: float = 1.0,
        max_wait_s: float = 60.0,
        timeout_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=api_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport)
        self._identity = (api_url.rstrip("/"), hashlib.sha256((token or "").encode()).hexdigest())
        self.attempts, self.backoff_s, self.max_wait_s, self._sleep = attempts, backoff_s, max_wait_s, sleep
        self.retries = 0
        """Requests retried over this client's life (a rate limit or a server error each)."""

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, url: str, *, json: Any = None, params: dict[str, Any] | None = None
    ) -> httpx.Response:
        def once() -> tuple[httpx.Response, httpx.Response | None]:
            response = self._http.request(method, url, json=json, params=params)
            return response, response if response.is_success else None

        return self._retried(f"{method} {url}", once)

    def download(self, url: str, *, max_bytes: int) -> bytes:
        """The body of ``url`` after GitHub's redirect to its download host (a tarball answers ``302 Found``), at most
        ``max_bytes`` (more raises ``GitHubError``, not retried), retried as ``request`` retries. The token goes to
        GitHub alone: a redirect to another host is followed without it."""

        def once() -> tuple[httpx.Response, bytes | None]:
            first = self._http.request("GET", url)
            location = first.headers.get("location")
            if first.status_code not in (301, 302, 303, 307, 308) or not location:
                if first.is_success and len(first.content) > max_bytes:
                    raise GitHubError(f"GET {url}: more than {max_bytes} bytes", first.status_code, retryable=False)
                return first, first.content if first.is_success else None
            same = httpx.URL(location).host in ("", self._http.base_url.host)
            opened = (
                self._http.stream("GET", location)
                if same
                else httpx.stream("GET", location, timeout=self._http.timeout)  # not the token's host
            )
            with opened as streamed:
                if not streamed.is_success:
                    streamed.read()
                    return streamed, None
                chunks, size = [], 0
                for chunk in streamed.iter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise GitHubError(
                            f"GET {url}: more than {max_bytes} bytes", streamed.status_code, retryable=False
                        )
                    chunks.append(chunk)
                return streamed, b"".join(chunks)

        return self._retried(f"GET {url}", once)

    def _retried(self, what: str, once: Callable[[], tuple[httpx.Response, _T | None]]) -> _T:
        """``once()``'s value, tried again after a transport error, a rate limit or a server error (waiting as GitHub
        asks, ``attempts`` times at most); a failure that would answer the same again raises at once."""
        last = ""
        status: int | None = None
        for attempt in range(self.attempts):
            try:
                response, value = once()
            except httpx.TransportError as exc:
                last, status, wait = f"{what}: {exc}", None, self.backoff_s * 2**attempt
            else:
                if value is not None:
                    return value
                status = response.status_code
                last = f"{what}: HTTP {status} {response.text[:200]}"
                found = _wait_s(response, attempt, self.backoff_s, time.time())
                if found is None:
                    raise GitHubError(last, status, retryable=False, errors=_errors(response))
                wait = found
            if attempt + 1 < self.attempts:
                self.retries += 1
                self._sleep(min(wait, self.max_wait_s))
        raise GitHubError(f"{last} (after {self.attempts} attempts)", status)

    def paginate(self, url: str, *, per_page: int = 100) -> Iterator[Any]:
        """Every item of a list endpoint, following the ``Link: rel="next"`` header."""
        response = self.request("GET", url, params={"per_page": per_page})
        while True:
            yield from response.json()
            nxt = response.links.get("next", {}).get("url")
            if not nxt:
                return
            response = self.request("GET", nxt)

    def create_status(
        self, repo: str, sha: str, *, state: str, context: str, description: str, target_url: str | None
    ) -> None:
        # GitHub refuses a description over 140 characters (422): the callers keep under it, this keeps any under it
        body = {"state": state, "context": context, "description": description[:140]}
        if target_url:
            body["target_url"] = target_url
        self.request("POST", f"/repos/{repo}/statuses/{sha}", json=body)

    def permission(self, repo: str, user: str) -> str:
        return str(self.request("GET", f"/repos/{repo}/collaborators/{user}/permission").json().get("permission", ""))

    def login(self) -> str:
        """The login of the user this client's token authenticates as (``GET /user``; a bot account's for the
        service's token), asked once per process and token. ``GitHubError`` when GitHub does not say (a token
        ``GET /user`` refuses, such as a GitHub App's installation token: 403)."""
        with _LOGINS_LOCK:
            known = _LOGINS.get(self._identity)
        if known is not None:
            return known
        try:
            answer = self.request("GET", "/user").json()
        except GitHubError as exc:
            if exc.retryable:
                raise
            # said once here, where an operator reads it (the job's reason): which token the comment needs
            raise GitHubError(
                f"{exc} (the service's token names no user, so its PR comment cannot be told from a copy: "
                "ATTNPROF_GITHUB_TOKEN must be a user's or a bot account's token)",
                exc.status,
                retryable=False,
            ) from exc
        login = answer.get("login") if isinstance(answer, dict) else None
        if not isinstance(login, str) or not login:
            raise GitHubError("GET /user: GitHub's answer names no login", 200, retryable=False)
        with _LOGINS_LOCK:
            _LOGINS[self._identity] = login
        return login

    def upsert_comment(self, repo: str, pr: int, *, marker: str, body: str) -> tuple[int, bool]:
        """The id of the PR comment this client's user wrote that starts with ``marker``, updated to ``body``, or
        created; and whether it was created.

        Anyone may write a comment that starts with the marker: only the author tells the service's comment apart
        (``user.login``, against ``login``; GitHub's logins ignore case). The login is asked only when some comment
        starts with the marker, so a pull request's first comment costs no extra request."""
        mine: str | None = None
        for comment in self.paginate(f"/repos/{repo}/issues/{pr}/comments"):
            if not isinstance(comment, dict) or not str(comment.get("body") or "").startswith(marker):
                continue
            mine = mine or self.login().lower()
            author = comment.get("user")
            if not isinstance(author, dict) or str(author.get("login") or "").lower() != mine:
                continue
            self.request("PATCH", f"/repos/{repo}/issues/comments/{comment['id']}", json={"body": body})
            return int(comment["id"]), False
        created = self.request("POST", f"/repos/{repo}/issues/{pr}/comments", json={"body": body}).json()
        return int(created["id"]), True
