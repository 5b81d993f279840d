"""Sessions of the web pages: a signed, expiring cookie, opened by a project token or by signing in with GitHub.

A token session's cookie holds the token's id, an expiry and a random nonce, signed with HMAC-SHA256; it never
holds the token. Every request checks the signature, the expiry and that the token is still valid, so revoking the
token ends its sessions.

A GitHub session's cookie holds the GitHub login and user id, the ids of the projects whose repository that user
could read when they signed in, an expiry a few minutes away and a nonce; never GitHub's access token, which is
dropped once the sign-in has read the user and their repositories. When the expiry passes the browser is sent
through GitHub's sign-in again, which answers at once for a user still signed in to GitHub who already authorised
the app, and the repositories are read again: losing access to a repository ends access to its projects within
that interval.

Forms carry a CSRF token derived from the session's nonce (a per-session secret an attacker's page cannot read);
the sign-in form, which has no session yet, uses a double-submit cookie instead, and the GitHub sign-in a random
``state`` kept in a signed cookie of its own (``OAUTH_STATE_COOKIE``) and checked once on the way back.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from attnprof.server.auth.github_oauth import GITHUB_LOGIN

COOKIE = "attnprof_session"
LOGIN_CSRF_COOKIE = "attnprof_login_csrf"
OAUTH_STATE_COOKIE = "attnprof_oauth_state"
_VERSION = "v1"
_GITHUB = "g1"
_STATE = "s1"
COOKIE_MAX_CHARS = 3800
"""A cookie value longer than this is refused (browsers keep about 4,096 bytes per cookie)."""


@dataclass(frozen=True)
class WebSession:
    """A signed-in browser: by a project token (``token_id``) or by GitHub (``github_login``, read access to
    ``project_ids`` only)."""

    token_id: int | None
    expires_at: int
    nonce: str
    github_login: str | None = None
    github_id: int | None = None
    project_ids: tuple[int, ...] = ()

    @property
    def by_github(self) -> bool:
        return self.github_login is not None


@dataclass(frozen=True)
class OAuthState:
    """A GitHub sign-in under way: the ``state`` sent to GitHub and the page to come back to."""

    state: str
    next_path: str
    expires_at: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionSigner:
    """Signs and reads session cookies and derives CSRF tokens with one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("a session key needs at least 32 bytes")
        self._key = key

    @classmethod
    def random(cls) -> SessionSigner:
        return cls(secrets.token_bytes(32))

    def _mac(self, message: str) -> str:
        return _b64(hmac.new(self._key, message.encode(), hashlib.sha256).digest())

    def _sign(self, body: str) -> str:
        return f"{body}.{self._mac(body)}"

    def _body(self, value: str | None) -> list[str] | None:
        """The dot-separated parts of a signed value, or None when it is missing, too long or forged."""
        if not value or len(value) > COOKIE_MAX_CHARS:
            return None
        body, _, mac = value.rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            return None
        return body.split(".")

    @staticmethod
    def _expiry(ttl_s: int, now_s: float | None) -> int:
        return int((time.time() if now_s is None else now_s) + ttl_s)

    def issue(self, token_id: int, ttl_s: int, now_s: float | None = None) -> tuple[str, WebSession]:
        """A new cookie value for ``token_id``, valid ``ttl_s`` seconds."""
        web = WebSession(token_id=token_id, expires_at=self._expiry(ttl_s, now_s), nonce=secrets.token_urlsafe(16))
        return self._sign(f"{_VERSION}.{web.token_id}.{web.expires_at}.{web.nonce}"), web

    def issue_github(
        self, *, login: str, github_id: int, project_ids: tuple[int, ...], ttl_s: int, now_s: float | None = None
    ) -> tuple[str, WebSession]:
        """A new cookie value for the GitHub user ``login``, who may read ``project_ids``, valid ``ttl_s`` seconds."""
        if not GITHUB_LOGIN.fullmatch(login):
            raise ValueError(f"{login!r} is not a GitHub login")
        web = WebSession(
            token_id=None,
            expires_at=self._expiry(ttl_s, now_s),
            nonce=secrets.token_urlsafe(16),
            github_login=login,
            github_id=github_id,
            project_ids=tuple(sorted(set(project_ids))),
        )
        projects = "-".join(str(p) for p in web.project_ids)
        body = f"{_GITHUB}.{login}.{github_id}.{projects}.{web.expires_at}.{web.nonce}"
        return self._sign(body), web

    def read(self, value: str | None, now_s: float | None = None) -> WebSession | None:
        """The session a cookie value stands for, or None when it is missing, forged, malformed or expired.

        ``now_s=0`` reads an expired session too (to tell a GitHub session that needs its check again)."""
        parts = self._body(value)
        if parts is None:
            return None
        try:
            if len(parts) == 4 and parts[0] == _VERSION:
                web = WebSession(token_id=int(parts[1]), expires_at=int(parts[2]), nonce=parts[3])
            elif len(parts) == 6 and parts[0] == _GITHUB and GITHUB_LOGIN.fullmatch(parts[1]):
                web = WebSession(
                    token_id=None,
                    expires_at=int(parts[4]),
                    nonce=parts[5],
                    github_login=parts[1],
                    github_id=int(parts[2]),
                    project_ids=tuple(int(p) for p in parts[3].split("-") if p),
                )
            else:
                return None
        except ValueError:
            return None
        if web.expires_at <= (time.time() if now_s is None else now_s):
            return None
        return web

    def issue_state(self, next_path: str, ttl_s: int, now_s: float | None = None) -> tuple[str, OAuthState]:
        """A new GitHub sign-in: its random ``state`` and the signed cookie value that binds it to this browser."""
        found = OAuthState(state=secrets.token_urlsafe(24), next_path=next_path, expires_at=self._expiry(ttl_s, now_s))
        body = f"{_STATE}.{found.state}.{found.expires_at}.{_b64(next_path.encode())}"
        return self._sign(body), found

    def read_state(self, value: str | None, now_s: float | None = None) -> OAuthState | None:
        """The sign-in a state cookie stands for, or None when it is missing, forged, malformed or expired."""
        parts = self._body(value)
        if parts is None or len(parts) != 4 or parts[0] != _STATE:
            return None
        try:
            found = OAuthState(state=parts[1], expires_at=int(parts[2]), next_path=_unb64(parts[3]).decode())
        except (ValueError, UnicodeDecodeError):
            return None
        if found.expires_at <= (time.time() if now_s is None else now_s):
            return None
        return found

    def csrf_token(self, web: WebSession) -> str:
        return self._mac(f"csrf.{web.nonce}")

    def check_csrf(self, web: WebSession, submitted: str | None) -> bool:
        return bool(submitted) and hmac.compare_digest((submitted or "").encode(), self.csrf_token(web).encode())
