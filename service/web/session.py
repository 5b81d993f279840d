"""Sessions of the web pages: a project token exchanged once for a signed, expiring cookie.

The cookie holds the token's id, an expiry and a random nonce, signed with HMAC-SHA256; it never holds the token.
Every request checks the signature, the expiry and that the token is still valid, so revoking the token ends
its sessions. Forms carry a CSRF token derived from the session's nonce (a per-session secret an attacker's page
cannot read); the sign-in form, which has no session yet, uses a double-submit cookie instead.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

COOKIE = "attnprof_session"
LOGIN_CSRF_COOKIE = "attnprof_login_csrf"
_VERSION = "v1"


@dataclass(frozen=True)
class WebSession:
    token_id: int
    expires_at: int
    nonce: str


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
        digest = hmac.new(self._key, message.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def issue(self, token_id: int, ttl_s: int, now_s: float | None = None) -> tuple[str, WebSession]:
        """A new cookie value for ``token_id``, valid ``ttl_s`` seconds."""
        expires_at = int((time.time() if now_s is None else now_s) + ttl_s)
        web = WebSession(token_id=token_id, expires_at=expires_at, nonce=secrets.token_urlsafe(16))
        body = f"{_VERSION}.{web.token_id}.{web.expires_at}.{web.nonce}"
        return f"{body}.{self._mac(body)}", web

    def read(self, value: str | None, now_s: float | None = None) -> WebSession | None:
        """The session a cookie value stands for, or None when it is missing, forged, malformed or expired."""
        if not value or len(value) > 200:
            return None
        body, _, mac = value.rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            return None
        parts = body.split(".")
        if len(parts) != 4 or parts[0] != _VERSION:
            return None
        try:
            web = WebSession(token_id=int(parts[1]), expires_at=int(parts[2]), nonce=parts[3])
        except ValueError:
            return None
        if web.expires_at <= (time.time() if now_s is None else now_s):
            return None
        return web

    def csrf_token(self, web: WebSession) -> str:
        return self._mac(f"csrf.{web.nonce}")

    def check_csrf(self, web: WebSession, submitted: str | None) -> bool:
        return bool(submitted) and hmac.compare_digest((submitted or "").encode(), self.csrf_token(web).encode())
