"""Sign-in, the session cookie, CSRF and tenancy of the dashboard, over HTTP against the real server."""

from __future__ import annotations

import re
import time

import httpx
from sqlalchemy import update

from attnprof.server.auth.models import Token
from attnprof.server.db import make_engine, utcnow
from attnprof.server.web.session import COOKIE, SessionSigner
from tests.server.web.stack import Site


def _login(client: httpx.Client, token: str, next_path: str = "") -> httpx.Response:
    form = client.get("/ui/login", params={"next": next_path} if next_path else None)
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    return client.post("/ui/login", data={"token": token, "csrf": csrf.group(1), "next": next_path})


def test_pages_redirect_to_sign_in_and_back(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        first = client.get(f"/ui/p/{site.project}", params={"tab": "jobs"})
        assert first.status_code == 303
        assert first.headers["location"].startswith("/ui/login?next=/ui/p/")
        answer = _login(client, site.tokens.read, f"/ui/p/{site.project}")
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/ui/p/{site.project}"
        cookie = answer.headers["set-cookie"]
        assert COOKIE in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie and "Max-Age=" in cookie
        home = client.get(f"/ui/p/{site.project}")
        assert home.status_code == 200
        assert site.project in home.text


def test_the_cookie_never_holds_the_token(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        _login(client, site.tokens.read)
        value = client.cookies[COOKIE]
        assert site.tokens.read not in value and site.tokens.read[3:20] not in value


def test_a_bad_token_is_refused_and_says_why(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        answer = _login(client, "ap_not-a-token")
        assert answer.status_code == 401
        assert "unknown, revoked, or not a project token" in answer.text
        assert COOKIE not in client.cookies


def test_sign_in_without_its_form_token_is_refused(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        answer = client.post("/ui/login", data={"token": site.tokens.read, "csrf": "forged"})
        assert answer.status_code == 403
        assert COOKIE not in client.cookies


def test_next_never_leaves_the_site(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        for target in ("https://evil.example/", "//evil.example/ui/", "/api/v1/whoami"):
            answer = _login(client, site.tokens.read, target)
            assert answer.status_code == 303
            assert answer.headers["location"] == f"/ui/p/{site.project}", target


def test_another_projects_pages_are_404(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        _login(client, site.tokens.read)
        for path in (f"/ui/p/{site.other_project}", "/ui/p/no-such-project"):
            answer = client.get(path)
            assert answer.status_code == 404, path
            assert "no project" in answer.text
            assert answer.headers["content-type"].startswith("text/html")


def test_a_forged_or_expired_cookie_is_a_new_sign_in(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        _login(client, site.tokens.read)
        good = client.cookies[COOKIE]
        body, _, _mac = good.rpartition(".")
        client.cookies.set(COOKIE, body + ".AAAA", path="/ui")
        assert client.get(f"/ui/p/{site.project}").status_code == 303
    signer = SessionSigner(b"k" * 32)
    value, web = signer.issue(1, ttl_s=60, now_s=time.time() - 120)
    assert signer.read(value) is None
    assert signer.read(value, now_s=web.expires_at - 1) is not None


def test_a_revoked_token_ends_its_sessions(site: Site) -> None:
    with site.api(site.tokens.admin) as api:
        made = api.post(f"/api/v1/projects/{site.project}/tokens", json={"role": "read", "name": "short-lived"})
        assert made.status_code == 201, made.text
        token, token_id = made.json()["token"], made.json()["id"]
        with httpx.Client(base_url=site.url) as client:
            _login(client, token)
            assert client.get(f"/ui/p/{site.project}").status_code == 200
            assert api.delete(f"/api/v1/projects/{site.project}/tokens/{token_id}").status_code in (200, 204)
            assert client.get(f"/ui/p/{site.project}").status_code == 303


def test_sign_out_needs_the_form_token_and_clears_the_cookie(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        _login(client, site.tokens.read)
        assert client.post("/ui/logout", data={"csrf": "forged"}).status_code == 403
        home = client.get(f"/ui/p/{site.project}")
        csrf = re.search(r'name="csrf" value="([^"]+)"', home.text)
        assert csrf is not None
        out = client.post("/ui/logout", data={"csrf": csrf.group(1)})
        assert out.status_code == 303
        assert COOKIE not in client.cookies


def test_an_expired_token_ends_its_sessions_and_a_rotated_one_at_the_end_of_its_grace(site: Site) -> None:
    with site.api(site.tokens.admin) as api:
        expiring = api.post(f"/api/v1/projects/{site.project}/tokens", json={"role": "read", "expires_in": "1d"})
        rotating = api.post(f"/api/v1/projects/{site.project}/tokens", json={"role": "read"})
        assert expiring.status_code == rotating.status_code == 201
        with httpx.Client(base_url=site.url) as first, httpx.Client(base_url=site.url) as second:
            _login(first, expiring.json()["token"])
            _login(second, rotating.json()["token"])
            assert first.get(f"/ui/p/{site.project}").status_code == 200
            rotated = api.post(
                f"/api/v1/projects/{site.project}/tokens/{rotating.json()['id']}/rotate", json={"grace": "1h"}
            )
            assert rotated.status_code == 201
            assert second.get(f"/ui/p/{site.project}").status_code == 200  # in its grace period
            engine = make_engine(site.db_url)
            try:
                with engine.begin() as conn:
                    past = utcnow()
                    conn.execute(update(Token).where(Token.id == expiring.json()["id"]).values(expires_at=past))
                    conn.execute(update(Token).where(Token.id == rotating.json()["id"]).values(revoked_at=past))
            finally:
                engine.dispose()
            assert first.get(f"/ui/p/{site.project}").status_code == 303
            assert second.get(f"/ui/p/{site.project}").status_code == 303
