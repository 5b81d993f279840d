"""Sign-in with GitHub (an OAuth app's web flow): who the person is, and which projects' repositories they can read.

The calls, as GitHub documents them ("Authorizing OAuth apps"):

1. the browser goes to ``{web}/login/oauth/authorize`` with ``client_id``, ``redirect_uri``, ``scope`` and a random
   ``state``; GitHub comes back to ``redirect_uri`` with ``code`` and the same ``state`` (or with ``error``, e.g.
   ``access_denied``, when the person cancels);
2. ``POST {web}/login/oauth/access_token`` (``Accept: application/json``) exchanges the code for an access token;
   GitHub answers 200 even when it refuses, with ``error`` (``bad_verification_code``,
   ``incorrect_client_credentials``, ``redirect_uri_mismatch``) in the body;
3. ``GET {api}/user`` with the token names the person; ``GET {api}/repos/{owner}/{repo}`` answers 200 for a
   repository they can read and 404 for one they cannot (GitHub hides a private repository it will not show).

The access token lives in this module's calls only: nothing returns it, stores it or logs it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

import httpx

GITHUB_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
"""A GitHub login as GitHub allows it: letters, digits and hyphens, at most 39 characters."""

API_HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
TIMEOUT_S = 10.0

# What GitHub's error codes mean to the person signing in.
_EXCHANGE_ERRORS = {
    "bad_verification_code": "GitHub refused the sign-in code: it was used already or expired. Sign in again.",
    "incorrect_client_credentials": "GitHub refused this service's OAuth app credentials: tell the service's "
    "operator (ATTNPROF_GITHUB_CLIENT_ID and ATTNPROF_GITHUB_CLIENT_SECRET).",
    "redirect_uri_mismatch": "GitHub refused the address it was to send you back to: the OAuth app's callback URL "
    "must be this service's /ui/login/github/callback (tell the service's operator).",
}


class SignInFailed(Exception):
    """GitHub sign-in did not complete. ``status``: the page's HTTP status (403: GitHub refused; 502: GitHub did
    not answer as documented); ``detail`` says what happened and what to do."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail


def unavailable(what: str) -> SignInFailed:
    return SignInFailed(502, "GitHub did not answer", f"{what}; nothing was changed. Try again in a minute.")


@dataclass(frozen=True)
class GitHubUser:
    login: str
    id: int


@dataclass(frozen=True)
class OAuthApp:
    """The OAuth app this service signs in with, and where GitHub is."""

    client_id: str
    client_secret: str
    web_url: str
    api_url: str
    scope: str

    def authorize_url(self, *, redirect_uri: str, state: str) -> str:
        query = {"client_id": self.client_id, "redirect_uri": redirect_uri, "state": state, "allow_signup": "false"}
        if self.scope:
            query["scope"] = self.scope
        return f"{self.web_url.rstrip('/')}/login/oauth/authorize?{urlencode(query)}"


def _json(response: httpx.Response, what: str) -> dict[str, object]:
    try:
        body = response.json()
    except ValueError:
        raise unavailable(f"GitHub's answer to {what} was not JSON (HTTP {response.status_code})") from None
    if not isinstance(body, dict):
        raise unavailable(f"GitHub's answer to {what} was not a JSON object")
    return body


def exchange_code(client: httpx.Client, app: OAuthApp, *, code: str, redirect_uri: str) -> str:
    """The access token GitHub gives for ``code``."""
    try:
        response = client.post(
            f"{app.web_url.rstrip('/')}/login/oauth/access_token",
            data={
                "client_id": app.client_id,
                "client_secret": app.client_secret,
                "code": code,
                "redirect_uri": redirect_uri,
            },
            headers={"Accept": "application/json"},
        )
    except httpx.HTTPError as exc:
        raise unavailable(f"exchanging the sign-in code failed ({type(exc).__name__})") from None
    if response.status_code != 200:
        raise unavailable(f"GitHub answered HTTP {response.status_code} to the sign-in code's exchange")
    body = _json(response, "the sign-in code's exchange")
    error = body.get("error")
    if isinstance(error, str):
        detail = _EXCHANGE_ERRORS.get(error) or f"GitHub refused the sign-in ({error}: {body.get('error_description')})"
        raise SignInFailed(403, "GitHub refused the sign-in", detail)
    token = body.get("access_token")
    if not isinstance(token, str) or not token:
        raise unavailable("GitHub's answer to the sign-in code held no access token")
    return token


def _get(client: httpx.Client, app: OAuthApp, token: str, path: str) -> httpx.Response:
    try:
        return client.get(
            f"{app.api_url.rstrip('/')}{path}", headers={**API_HEADERS, "Authorization": f"Bearer {token}"}
        )
    except httpx.HTTPError as exc:
        raise unavailable(f"GitHub's API did not answer {path} ({type(exc).__name__})") from None


def user(client: httpx.Client, app: OAuthApp, token: str) -> GitHubUser:
    """The person the token belongs to."""
    response = _get(client, app, token, "/user")
    if response.status_code == 401:
        raise SignInFailed(403, "GitHub refused the sign-in", "GitHub did not accept the token it had just given")
    if response.status_code != 200:
        raise unavailable(f"GitHub answered HTTP {response.status_code} to /user")
    body = _json(response, "/user")
    login, user_id = body.get("login"), body.get("id")
    if not isinstance(login, str) or not GITHUB_LOGIN.fullmatch(login) or not isinstance(user_id, int):
        raise unavailable("GitHub's /user named no login and id")
    return GitHubUser(login=login, id=user_id)


def can_read(client: httpx.Client, app: OAuthApp, token: str, repo: str) -> bool:
    """Whether the token's person can read ``repo`` (owner/name): GitHub shows it (200) or hides it (404; 403 for
    a repository an organisation keeps from this OAuth app)."""
    response = _get(client, app, token, f"/repos/{repo}")
    if response.status_code == 200:
        return True
    rate_limited = response.headers.get("x-ratelimit-remaining") == "0" or response.status_code == 429
    if response.status_code in (403, 404) and not rate_limited:
        return False
    raise unavailable(f"GitHub answered HTTP {response.status_code} when asked about {repo}")


def readable_projects(
    client: httpx.Client, app: OAuthApp, token: str, repositories: Mapping[str, str], projects: Iterable[str]
) -> list[str]:
    """Of ``projects`` (names), those whose repository (``repositories``: project name -> owner/name) the token's
    person can read; each repository is asked about once."""
    answers: dict[str, bool] = {}
    found = []
    for name in projects:
        repo = repositories.get(name)
        if repo is None:
            continue
        key = repo.lower()  # GitHub's owner and repository names are case-insensitive
        if key not in answers:
            answers[key] = can_read(client, app, token, repo)
        if answers[key]:
            found.append(name)
    return found
