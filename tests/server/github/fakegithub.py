"""A local GitHub REST server for the endpoints attnprof uses, following GitHub's documented behaviour:
201 for creates, 200 for updates and lists, ``Link`` pagination (``per_page``/``page``, rel next/last),
``x-ratelimit-*`` headers on every answer, 404 for unknown things. It records every request and can be told
to fail the next requests (403 rate limit with ``x-ratelimit-reset``, 429 with ``Retry-After``, 500, ``422``
Validation Failed), or to hold every request until told to answer (``hold``, ``answer``: a GitHub that is slow to
answer). An issue comment's body over ``COMMENT_MAX_CHARS`` characters is refused as GitHub refuses it, on create
and on update: 422 Validation Failed, "Body is too long (maximum is 65536 characters)".

It also plays GitHub's OAuth web flow for an OAuth app ("Authorizing OAuth apps" in GitHub's docs), on the same
address standing for both github.com and api.github.com: ``GET /login/oauth/authorize`` shows the consent page to the
browser's GitHub user (``sign_in_browser``) and sends the browser back to the app's callback with ``code`` and
``state`` (at once when that user already authorised the app for the scope; ``error=access_denied`` when they cancel;
``error=redirect_uri_mismatch`` for a callback outside the registered one); ``POST /login/oauth/access_token``
exchanges a code (single use, 10 minutes) for a token and answers GitHub's documented error bodies with HTTP 200
(``bad_verification_code``, ``incorrect_client_credentials``, ``redirect_uri_mismatch``), as JSON when asked with
``Accept: application/json`` and form-encoded otherwise; ``GET /user`` names the token's user (401 Bad credentials
for an unknown token); ``GET /repos/{owner}/{repo}`` answers 200 for a repository the token's user can read (a public
one, or a private one they were given when the token has the ``repo`` scope) and 404 otherwise.

The service's own token (``SERVICE_TOKEN``, or any added with ``add_token``) is a bot account's: ``GET /user`` names
it (``SERVICE_LOGIN``), and the issue comments it creates carry it as their author (``user.login``, as every comment
GitHub lists does).
"""

from __future__ import annotations

import html
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

SERVICE_TOKEN = "test-token-1"
SERVICE_LOGIN = "attnprof-bot"
"""The service's token in the tests, and the login of the bot account it is a token of."""
COMMENT_MAX_CHARS = 65_536
"""GitHub's limit on an issue comment's body, in characters (Ruby's: code points)."""


def _too_long(action: str) -> dict[str, Any]:
    """GitHub's answer to a comment body over the limit (422), as its REST API writes it."""
    return {
        "message": "Validation Failed",
        "errors": [
            {
                "resource": "IssueComment",
                "code": "unprocessable",
                "field": "data",
                "message": f"Body is too long (maximum is {COMMENT_MAX_CHARS} characters)",
            }
        ],
        "documentation_url": f"https://docs.github.com/rest/issues/comments#{action}",
        "status": "422",
    }


OAUTH_CODE_TTL_S = 600
"""GitHub's codes expire after 10 minutes."""
_TROUBLESHOOT = "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors"
_AUTHORIZE_ERRORS = "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-authorization-request-errors"
# The bodies GitHub documents for a refused code exchange (HTTP 200).
TOKEN_ERRORS = {
    "incorrect_client_credentials": "The client_id and/or client_secret passed are incorrect.",
    "redirect_uri_mismatch": "The redirect_uri MUST match the registered callback URL for this application.",
    "bad_verification_code": "The code passed is incorrect or expired.",
}


@dataclass
class OAuthApp:
    client_id: str
    client_secret: str
    callback_url: str


@dataclass
class OAuthUser:
    login: str
    id: int
    repos: set[str] = field(default_factory=set)  # private repositories the user can read, "owner/repo"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


@dataclass
class State:
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "owner/repo@sha" -> newest last
    comments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "owner/repo#pr" -> oldest first
    permissions: dict[str, str] = field(default_factory=dict)  # "owner/repo:user" -> admin|write|read|none
    requests: list[Request] = field(default_factory=list)
    # "rate403", "rate429", "403", "500", "422", "too_long": each answers one request, in order ("pass": as usual)
    failures: list[str] = field(default_factory=list)
    next_id: int = 1000
    oauth_apps: dict[str, OAuthApp] = field(default_factory=dict)  # by client id
    users: dict[str, OAuthUser] = field(default_factory=dict)  # by login
    public_repos: set[str] = field(default_factory=set)
    # commit sha -> the pull requests it belongs to ("List pull requests associated with a commit")
    pulls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    browser_user: str | None = None  # who the browser is signed in to GitHub as
    grants: set[tuple[str, str, str]] = field(default_factory=set)  # (login, client id, scope) authorised
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)  # user tokens: login, scope, client id
    # tokens of accounts that are not signed in through OAuth (the service's bot): token -> login
    accounts: dict[str, str] = field(default_factory=lambda: {SERVICE_TOKEN: SERVICE_LOGIN})
    # "owner/repo" -> its commits, oldest first: (sha, parent shas, message, the tarball GitHub would serve)
    histories: dict[str, list[tuple[str, tuple[str, ...], str, bytes]]] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)  # shas force-pushed away: 404 wherever named


class FakeGitHub:
    def __init__(self) -> None:
        self.state = State()
        self.lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.answering = threading.Event()
        self.answering.set()
        self.held = 0
        """Requests that waited for ``answer`` (each read whole before it waits; acted on once answered)."""

    def __enter__(self) -> FakeGitHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.answering.set()
        self.server.shutdown()
        self.server.server_close()

    def hold(self) -> None:
        """Hold every request from now on until ``answer``."""
        self.answering.clear()

    def answer(self) -> None:
        """Answer the held requests, and the next ones at once."""
        self.answering.set()

    def waiting(self) -> int:
        """How many requests are held now or were, since the server started."""
        with self.lock:
            return self.held

    def fail_next(self, *kinds: str) -> None:
        with self.lock:
            self.state.failures.extend(kinds)

    def add_commit(self, repo: str, sha: str, parents: tuple[str, ...], message: str, tarball: bytes) -> None:
        """A commit of ``repo``'s history (after the ones added before), with the tarball its tree downloads as."""
        with self.lock:
            self.state.histories.setdefault(repo, []).append((sha, parents, message, tarball))

    def add_comment(self, repo: str, pr: int, body: str, user: str = "someone") -> int:
        with self.lock:
            self.state.next_id += 1
            cid = self.state.next_id
            self.state.comments.setdefault(f"{repo}#{pr}", []).append(
                {"id": cid, "body": body, "user": {"login": user}}
            )
            return cid

    def add_token(self, token: str, login: str) -> None:
        """``token`` authenticates as the account ``login`` (``GET /user``, the author of what it creates)."""
        with self.lock:
            self.state.accounts[token] = login

    def add_oauth_app(self, client_id: str, client_secret: str, callback_url: str) -> None:
        with self.lock:
            self.state.oauth_apps[client_id] = OAuthApp(client_id, client_secret, callback_url)

    def add_user(self, login: str, repos: tuple[str, ...] = ()) -> OAuthUser:
        """A GitHub user who can read the private repositories ``repos``."""
        with self.lock:
            self.state.next_id += 1
            user = OAuthUser(login=login, id=self.state.next_id, repos=set(repos))
            self.state.users[login] = user
            return user

    def add_public_repo(self, repo: str) -> None:
        with self.lock:
            self.state.public_repos.add(repo)

    def sign_in_browser(self, login: str | None) -> None:
        """The browser is signed in to GitHub as ``login`` from now on (None: signed out)."""
        with self.lock:
            self.state.browser_user = login

    def revoke_access(self, login: str, repo: str) -> None:
        with self.lock:
            self.state.users[login].repos.discard(repo)

    def comments(self, repo: str, pr: int) -> list[dict[str, Any]]:
        return self.state.comments.get(f"{repo}#{pr}", [])

    def statuses(self, repo: str, sha: str) -> list[dict[str, Any]]:
        return self.state.statuses.get(f"{repo}@{sha}", [])

    def requests(self, method: str | None = None) -> list[Request]:
        return [r for r in self.state.requests if method is None or r.method == method]


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGitHub

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        remaining = "0" if status == 403 and body.get("message", "").startswith("API rate limit") else "4999"
        self.send_header("x-ratelimit-limit", "5000")
        self.send_header("x-ratelimit-remaining", remaining)
        self.send_header("x-ratelimit-used", str(5000 - int(remaining)))
        self.send_header("x-ratelimit-reset", str(int(time.time())))
        self.send_header("x-ratelimit-resource", "core")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if raw and self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
            body: Any = {k: v[-1] for k, v in parse_qs(raw.decode()).items()}
        else:
            body = json.loads(raw) if raw else None
        if not self.fake.answering.is_set():
            with self.fake.lock:
                self.fake.held += 1
            self.fake.answering.wait()
        st = self.fake.state
        with self.fake.lock:
            st.requests.append(Request(method, split.path, query, body, dict(self.headers.items())))
            failure = st.failures.pop(0) if st.failures else None
        if failure == "rate403":
            return self._send(403, {"message": "API rate limit exceeded for installation."})
        if failure == "rate429":
            return self._send(429, {"message": "secondary rate limit"}, {"Retry-After": "0"})
        if failure == "403":
            return self._send(403, {"message": "Resource not accessible by integration"})
        if failure == "500":
            return self._send(500, {"message": "Server Error"})
        if failure == "422":
            return self._send(422, {"message": "Validation Failed", "errors": [], "status": "422"})
        if failure == "too_long":  # as GitHub answers a body over its limit, whatever this one's length
            return self._send(422, _too_long("create-an-issue-comment"))
        if split.path.startswith("/_codeload/") and method == "GET":  # the download host: a signed URL, no token
            return self._codeload(split.path)
        if split.path.startswith("/login/oauth/"):
            return self._oauth_web(method, split.path, query, body)
        if (split.path == "/user" or re.fullmatch(r"/repos/[^/]+/[^/]+", split.path)) and method == "GET":
            return self._oauth_api(split.path)
        if not (self.headers.get("Authorization") or "").startswith("Bearer "):
            return self._send(401, {"message": "Requires authentication"})
        self._route(method, split.path, query, body)

    def _commits(self, repo: str) -> list[tuple[str, tuple[str, ...], str, bytes]]:
        return [c for c in self.fake.state.histories.get(repo, []) if c[0] not in self.fake.state.gone]

    def _compare(self, repo: str, base: str, head: str, query: dict[str, str]) -> None:
        """``GET /repos/{repo}/compare/{base}...{head}``: a linear history's commits after base up to head, oldest
        first, ``per_page`` (at most 100) a page with a ``Link`` header; 404 for a commit it does not have."""
        commits = self._commits(repo)
        shas = [c[0] for c in commits]
        if base not in shas or head not in shas:
            return self._send(404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
        b, h = shas.index(base), shas.index(head)
        status = "identical" if b == h else "ahead" if h > b else "behind"
        between = commits[b + 1 : h + 1] if h > b else []
        per_page = min(int(query.get("per_page", "250")), 100)
        page = int(query.get("page", "1"))
        chunk = between[(page - 1) * per_page : page * per_page]
        body = {
            "status": status,
            "ahead_by": len(between),
            "behind_by": max(0, b - h),
            "total_commits": len(between),
            "merge_base_commit": {"sha": shas[min(b, h)]},
            "commits": [
                {"sha": sha, "parents": [{"sha": p} for p in parents], "commit": {"message": message}}
                for sha, parents, message, _ in chunk
            ],
        }
        last = max(1, -(-len(between) // per_page))
        links = []
        if page < last:
            base_url = f"http://{self.headers['Host']}/repos/{repo}/compare/{base}...{head}?per_page={per_page}"
            links = [f'<{base_url}&page={page + 1}>; rel="next"', f'<{base_url}&page={last}>; rel="last"']
        return self._send(200, body, {"Link": ", ".join(links)} if links else None)

    def _codeload(self, path: str) -> None:
        m = re.fullmatch(r"/_codeload/([^/]+/[^/]+)/legacy\.tar\.gz/([0-9a-f]+)", path)
        found = next((c for c in self._commits(m[1]) if c[0] == m[2]), None) if m else None
        if found is None:
            return self._send_raw(404, b"Not Found", "text/plain")
        return self._send_raw(200, found[3], "application/x-gzip")

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> None:
        st, lock = self.fake.state, self.fake.lock
        if (m := re.fullmatch(r"/repos/([^/]+/[^/]+)/compare/([0-9a-f]+)\.\.\.([0-9a-f]+)", path)) and method == "GET":
            return self._compare(m[1], m[2], m[3], query)
        if (m := re.fullmatch(r"/repos/([^/]+/[^/]+)/commits/([0-9a-f]+)/pulls", path)) and method == "GET":
            if not any(c[0] == m[2] for c in self._commits(m[1])):
                return self._send(422, {"message": "No commit found for SHA: " + m[2], "status": "422"})
            return self._send(200, st.pulls.get(m[2], []))
        if (m := re.fullmatch(r"/repos/([^/]+/[^/]+)/tarball/([0-9a-f]+)", path)) and method == "GET":
            if not any(c[0] == m[2] for c in self._commits(m[1])):
                return self._send(404, {"message": "Not Found"})
            where = f"http://{self.headers['Host']}/_codeload/{m[1]}/legacy.tar.gz/{m[2]}"
            return self._send_raw(302, b"", "text/html", {"Location": where})
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/statuses/([0-9A-Za-z._-]+)", path):
            if method != "POST":
                return self._send(404, {"message": "Not Found"})
            if not isinstance(body, dict) or body.get("state") not in ("error", "failure", "pending", "success"):
                return self._send(422, {"message": "Validation Failed"})
            with lock:
                st.next_id += 1
                status = {"id": st.next_id, **body}
                st.statuses.setdefault(f"{m[1]}@{m[2]}", []).append(status)
            return self._send(201, status)
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/comments", path):
            key = f"{m[1]}#{m[2]}"
            if method == "POST":
                if not isinstance(body, dict) or not body.get("body"):
                    return self._send(422, {"message": "Validation Failed"})
                if len(body["body"]) > COMMENT_MAX_CHARS:
                    return self._send(422, _too_long("create-an-issue-comment"))
                cid = self.fake.add_comment(m[1], int(m[2]), body["body"], self._account() or "someone")
                return self._send(201, next(c for c in self.fake.comments(m[1], int(m[2])) if c["id"] == cid))
            if method == "GET":
                per_page = min(int(query.get("per_page", "30")), 100)
                page = int(query.get("page", "1"))
                items = st.comments.get(key, [])
                last = max(1, -(-len(items) // per_page))
                chunk = items[(page - 1) * per_page : page * per_page]
                base = f"http://{self.headers['Host']}{path}?per_page={per_page}"
                links = []
                if page < last:
                    links.append(f'<{base}&page={page + 1}>; rel="next"')
                    links.append(f'<{base}&page={last}>; rel="last"')
                return self._send(200, chunk, {"Link": ", ".join(links)} if links else None)
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/comments/(\d+)", path):
            if method == "PATCH":
                if isinstance(body, dict) and len(str(body.get("body") or "")) > COMMENT_MAX_CHARS:
                    return self._send(422, _too_long("update-an-issue-comment"))
                for comments in st.comments.values():
                    for c in comments:
                        if c["id"] == int(m[2]):
                            c["body"] = body["body"]
                            return self._send(200, c)
            return self._send(404, {"message": "Not Found"})
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/collaborators/([^/]+)/permission", path)
        if m and method == "GET":
            perm = st.permissions.get(f"{m[1]}:{m[2]}")
            if perm is None:
                return self._send(404, {"message": "Not Found"})
            return self._send(200, {"permission": perm, "user": {"login": m[2]}})
        return self._send(404, {"message": "Not Found"})

    # GitHub's OAuth web flow (github.com) and the two API calls a signed-in user's token makes (api.github.com).

    def _send_raw(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _page(self, status: int, title: str, inner: str) -> None:
        doc = f"<!doctype html><html><head><title>{html.escape(title)}</title></head><body>{inner}</body></html>"
        self._send_raw(status, doc.encode(), "text/html; charset=utf-8")

    def _back(self, redirect_uri: str, **query: str) -> None:
        sep = "&" if "?" in redirect_uri else "?"
        self._send_raw(302, b"", "text/html", {"Location": f"{redirect_uri}{sep}{urlencode(query)}"})

    @staticmethod
    def _under(redirect_uri: str, callback_url: str) -> bool:
        """GitHub's rule: the same scheme, host and port as the callback URL, its path the callback's or below."""
        given, registered = urlsplit(redirect_uri), urlsplit(callback_url)
        base = registered.path.rstrip("/")
        return (given.scheme, given.netloc) == (registered.scheme, registered.netloc) and (
            given.path == registered.path or given.path.startswith(base + "/")
        )

    def _oauth_web(self, method: str, path: str, query: dict[str, str], body: Any) -> None:
        st, lock = self.fake.state, self.fake.lock
        params = {**query, **(body if isinstance(body, dict) else {})}
        if path == "/login/oauth/authorize":
            app = st.oauth_apps.get(params.get("client_id", ""))
            if app is None:
                return self._page(404, "Not Found", "<h1>404</h1><p>This OAuth application does not exist.</p>")
            redirect_uri = params.get("redirect_uri") or app.callback_url
            state, scope = params.get("state", ""), params.get("scope", "")
            if not self._under(redirect_uri, app.callback_url):
                return self._back(
                    app.callback_url,
                    error="redirect_uri_mismatch",
                    error_description="The redirect_uri MUST match the registered callback URL for this application.",
                    error_uri=f"{_AUTHORIZE_ERRORS}#redirect-uri-mismatch",
                    state=state,
                )
            login = st.browser_user
            if login is None:
                return self._page(200, "Sign in to GitHub", "<h1>Sign in to GitHub</h1><p>Not signed in.</p>")
            decision = params.get("authorize") if method == "POST" else None
            if decision is None and (login, app.client_id, scope) not in st.grants:
                fields = "".join(
                    f'<input type="hidden" name="{k}" value="{html.escape(v)}">'
                    for k, v in {
                        "client_id": app.client_id,
                        "redirect_uri": redirect_uri,
                        "scope": scope,
                        "state": state,
                    }.items()
                )
                return self._page(
                    200,
                    "Authorize application",
                    f"<h1>Authorize {html.escape(app.client_id)}</h1><p>Signed in as {html.escape(login)}; "
                    f"scope: {html.escape(scope or '(none)')}</p>"
                    f'<form method="post" action="/login/oauth/authorize">{fields}'
                    '<button name="authorize" value="1" id="js-oauth-authorize-btn">Authorize</button>'
                    '<button name="authorize" value="0" id="js-oauth-cancel-btn">Cancel</button></form>',
                )
            if decision == "0":
                return self._back(
                    redirect_uri,
                    error="access_denied",
                    error_description="The user has denied your application access.",
                    error_uri=f"{_AUTHORIZE_ERRORS}#access-denied",
                    state=state,
                )
            code = secrets.token_hex(10)
            with lock:
                st.grants.add((login, app.client_id, scope))
                st.codes[code] = {
                    "login": login,
                    "client_id": app.client_id,
                    "redirect_uri": redirect_uri,
                    "scope": scope,
                    "expires": time.time() + OAUTH_CODE_TTL_S,
                }
            return self._back(redirect_uri, code=code, state=state)
        if path == "/login/oauth/access_token" and method == "POST":
            return self._exchange(params)
        return self._page(404, "Not Found", "<h1>404</h1>")

    def _token_answer(self, fields: dict[str, str]) -> None:
        if "application/json" in (self.headers.get("Accept") or ""):
            return self._send_raw(200, json.dumps(fields).encode(), "application/json; charset=utf-8")
        self._send_raw(200, urlencode(fields).encode(), "application/x-www-form-urlencoded; charset=utf-8")

    def _exchange(self, params: dict[str, str]) -> None:
        st, lock = self.fake.state, self.fake.lock

        def refuse(error: str) -> None:
            anchor = error.replace("_", "-")
            self._token_answer(
                {"error": error, "error_description": TOKEN_ERRORS[error], "error_uri": f"{_TROUBLESHOOT}#{anchor}"}
            )

        app = st.oauth_apps.get(params.get("client_id", ""))
        if app is None or not secrets.compare_digest(app.client_secret, params.get("client_secret", "")):
            return refuse("incorrect_client_credentials")
        with lock:
            grant = st.codes.pop(params.get("code", ""), None)  # a code answers once, right or wrong
        if grant is None or grant["client_id"] != app.client_id or grant["expires"] < time.time():
            return refuse("bad_verification_code")
        if params.get("redirect_uri") and params["redirect_uri"] != grant["redirect_uri"]:
            return refuse("redirect_uri_mismatch")
        token = "gho_" + secrets.token_hex(18)
        with lock:
            st.tokens[token] = {"login": grant["login"], "scope": grant["scope"], "client_id": app.client_id}
        self._token_answer({"access_token": token, "scope": grant["scope"], "token_type": "bearer"})

    def _account(self) -> str | None:
        """The login of the account (not OAuth-signed-in) whose token authenticates this request."""
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return self.fake.state.accounts.get(token) if scheme.lower() in ("bearer", "token") else None

    def _oauth_api(self, path: str) -> None:
        st = self.fake.state
        auth = self.headers.get("Authorization") or ""
        scheme, _, token = auth.partition(" ")
        grant = st.tokens.get(token) if scheme.lower() in ("bearer", "token") else None
        account = self._account()
        if grant is None and account is not None and path == "/user":
            return self._send(200, {"login": account, "id": abs(hash(account)) % 10**9, "type": "User"})
        if grant is None:
            if path.startswith("/repos/"):  # not a user's token: the app's own calls find no such route here
                return self._send(404, {"message": "Not Found"})
            return self._send(
                401,
                {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"},
            )
        user = st.users[grant["login"]]
        if path == "/user":
            return self._send(
                200,
                {"login": user.login, "id": user.id, "type": "User", "name": user.login.title(), "site_admin": False},
            )
        repo = path.removeprefix("/repos/")
        public = repo in st.public_repos
        private_visible = repo in user.repos and "repo" in grant["scope"].split(",")
        if not (public or private_visible):
            return self._send(
                404,
                {
                    "message": "Not Found",
                    "documentation_url": "https://docs.github.com/rest/repos/repos#get-a-repository",
                    "status": "404",
                },
            )
        owner, name = repo.split("/", 1)
        return self._send(
            200,
            {
                "id": abs(hash(repo)) % 10**9,
                "name": name,
                "full_name": repo,
                "private": not public,
                "owner": {"login": owner},
                "permissions": {"admin": False, "maintain": False, "push": False, "triage": False, "pull": True},
            },
        )

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")
