"""Sign-in, sign-out and static files of the web pages, and ``install``, which adds the pages to an app."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpx
from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnprof.contract.links import PATHS, Links
from attnprof.server.auth import github_oauth
from attnprof.server.auth import service as auth
from attnprof.server.auth.github_oauth import GitHubUser, OAuthApp
from attnprof.server.auth.models import WORKER
from attnprof.server.config import Settings
from attnprof.server.db import SessionDep
from attnprof.server.errors import ServiceError, Unauthorized, validation_detail
from attnprof.server.projects import repository as projects
from attnprof.server.web.dependencies import (
    MovedTo,
    PageError,
    SignInRequired,
    canonical_run,
    github_sign_in,
    login_url,
    signed_in,
    signer,
)
from attnprof.server.web.pages import PAGE_ROUTERS
from attnprof.server.web.render import page, plotly_version
from attnprof.server.web.session import COOKIE, COOKIE_MAX_CHARS, LOGIN_CSRF_COOKIE, OAUTH_STATE_COOKIE, SessionSigner

router = APIRouter(prefix="/ui", include_in_schema=False)
_STATIC = Path(__file__).parent / "static"
_STATIC_FILES = {"app.css": "text/css", "app.js": "text/javascript"}
_IMMUTABLE = "public, max-age=31536000, immutable"
OAUTH_STATE_TTL_S = 600
"""A GitHub sign-in must come back within this many seconds (GitHub's codes last 10 minutes too)."""


NEXT_MAX_CHARS = 2000


def _safe_next(value: str | None) -> str | None:
    """Only a path on this site: an absolute URL or ``//host`` would make sign-in an open redirect, and a control
    character could split the redirect's header."""
    if not value or len(value) > NEXT_MAX_CHARS or not value.startswith("/ui/") or value.startswith("//"):
        return None
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in value):
        return None
    parts = urlsplit(value)
    return None if parts.scheme or parts.netloc else value


def _secure(request: Request) -> bool:
    settings: Settings = request.app.state.settings
    return settings.dashboard.cookie_secure or request.url.scheme == "https"


def _login_page(
    request: Request, *, next_path: str | None, error: str | None = None, status_code: int = 200
) -> Response:
    csrf = secrets.token_urlsafe(16)
    nxt = _safe_next(next_path) or ""
    response = page(
        "login.html",
        status_code=status_code,
        next=nxt,
        error=error,
        csrf=csrf,
        github_href=PATHS.ui_login_github(nxt or None) if github_sign_in(request) else None,
    )
    response.set_cookie(
        LOGIN_CSRF_COOKIE, csrf, max_age=600, httponly=True, samesite="strict", secure=_secure(request), path="/ui"
    )
    return response


@router.get("")
def index(request: Request, session: SessionDep) -> Response:
    try:
        web, readable = signed_in(request, session)
    except SignInRequired:
        return RedirectResponse(PATHS.ui_login(), status_code=303)
    if len(readable) == 1:
        return RedirectResponse(PATHS.ui_project(readable[0].name), status_code=303)
    # A GitHub sign-in may open several projects, or none: say which, and as whom.
    return page(
        "login.html",
        github_user=web.github_login,
        projects=[p.name for p in readable],
        signout_csrf=signer(request).csrf_token(web),
        next="",
        error=None,
        csrf="",
        github_href=None,
    )


@router.get("/login")
def login_form(request: Request, next: Annotated[str | None, Query(max_length=10_000)] = None) -> Response:
    # No message comes from the query: a link could otherwise put any sentence on this page.
    return _login_page(request, next_path=next)


def _oauth_app(request: Request) -> OAuthApp:
    settings: Settings = request.app.state.settings
    if settings.github_client_id is None or settings.github_client_secret is None:
        raise PageError(
            404,
            "GitHub sign-in is not set up",
            "this service has no GitHub OAuth app (ATTNPROF_GITHUB_CLIENT_ID and ATTNPROF_GITHUB_CLIENT_SECRET): "
            "sign in with a project token",
        )
    return OAuthApp(
        client_id=settings.github_client_id,
        client_secret=settings.github_client_secret.get_secret_value(),
        web_url=settings.github_web_url,
        api_url=settings.github_api_url,
        scope=settings.dashboard.github_scope,
    )


@router.get("/login/github")
def login_github(request: Request, next: Annotated[str | None, Query(max_length=10_000)] = None) -> Response:
    """Off to GitHub's sign-in, with a random ``state`` bound to this browser by a signed cookie."""
    app = _oauth_app(request)
    settings: Settings = request.app.state.settings
    value, started = signer(request).issue_state(_safe_next(next) or "", OAUTH_STATE_TTL_S)
    redirect_uri = Links(settings.public_url).ui_login_github_callback()
    response = RedirectResponse(app.authorize_url(redirect_uri=redirect_uri, state=started.state), status_code=302)
    # Lax: the cookie must come back with GitHub's top-level redirect to the callback.
    response.set_cookie(
        OAUTH_STATE_COOKIE,
        value,
        max_age=OAUTH_STATE_TTL_S,
        httponly=True,
        samesite="lax",
        secure=_secure(request),
        path=PATHS.ui_login_github_callback(),
    )
    return response


def _signed_in_with_github(
    request: Request, session: SessionDep, app: OAuthApp, code: str
) -> tuple[GitHubUser, list[int]]:
    """Who the code's person is and the ids of the projects they may read. Every GitHub call is made before the
    database is read; the access token is dropped when this returns."""
    settings: Settings = request.app.state.settings
    repositories = settings.dashboard.github_repositories
    redirect_uri = Links(settings.public_url).ui_login_github_callback()
    with httpx.Client(timeout=github_oauth.TIMEOUT_S) as client:
        token = github_oauth.exchange_code(client, app, code=code, redirect_uri=redirect_uri)
        person = github_oauth.user(client, app, token)
        names = github_oauth.readable_projects(client, app, token, repositories, sorted(repositories))
    found = (projects.get_by_name(session, name) for name in names)
    return person, [p.id for p in found if p is not None]


@router.get("/login/github/callback")
def login_github_callback(
    request: Request,
    session: SessionDep,
    code: Annotated[str | None, Query(max_length=200)] = None,
    state: Annotated[str | None, Query(max_length=200)] = None,
    error: Annotated[str | None, Query(max_length=200)] = None,
    error_description: Annotated[str | None, Query(max_length=1000)] = None,
) -> Response:
    """Where GitHub sends the browser back: the state checked (once: its cookie is cleared whatever happens), the
    code exchanged, the person and their readable projects recorded in a session cookie."""
    app = _oauth_app(request)
    settings: Settings = request.app.state.settings
    started = signer(request).read_state(request.cookies.get(OAUTH_STATE_COOKIE))
    next_path = started.next_path if started is not None else None

    def refused(status: int, message: str) -> Response:
        answer = _login_page(request, next_path=next_path, error=message, status_code=status)
        answer.delete_cookie(OAUTH_STATE_COOKIE, path=PATHS.ui_login_github_callback())
        return answer

    if started is None or not state or not hmac.compare_digest(state.encode(), started.state.encode()):
        return refused(
            400,
            "The GitHub sign-in could not be checked: its state is missing, expired or not this browser's (a link "
            "from elsewhere, a sign-in started in another browser, or more than 10 minutes ago). Sign in again.",
        )
    if error is not None:
        if error == "access_denied":
            return refused(403, "GitHub sign-in was cancelled on GitHub: nothing was changed. Sign in again to go on.")
        return refused(403, f"GitHub refused the sign-in ({error}: {error_description or 'no description'}).")
    if not code:
        return refused(400, "GitHub came back without a sign-in code (the code query parameter). Sign in again.")
    try:
        person, project_ids = _signed_in_with_github(request, session, app, code)
    except github_oauth.SignInFailed as exc:
        return refused(exc.status, f"{exc.title}: {exc.detail}")
    value, _ = signer(request).issue_github(
        login=person.login,
        github_id=person.id,
        project_ids=tuple(project_ids),
        ttl_s=settings.dashboard.github_check_s,
    )
    if len(value) > COOKIE_MAX_CHARS:
        return refused(
            400,
            f"{person.login} can read {len(project_ids)} projects here, more than one session cookie holds: ask for "
            "a project token.",
        )
    response = RedirectResponse(_safe_next(next_path) or PATHS.ui_home(), status_code=303)
    # The cookie outlives its signed expiry so that a session past its check can go back through GitHub silently.
    response.set_cookie(
        COOKIE,
        value,
        max_age=settings.dashboard.session_ttl_s,
        httponly=True,
        samesite="lax",
        secure=_secure(request),
        path="/ui",
    )
    response.delete_cookie(OAUTH_STATE_COOKIE, path=PATHS.ui_login_github_callback())
    return response


@router.post("/login")
def login(
    request: Request,
    session: SessionDep,
    token: Annotated[str, Form(max_length=200)] = "",
    csrf: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    expected = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not expected or not hmac.compare_digest(expected.encode(), csrf.encode()):
        raise PageError(403, "Form expired", "the sign-in form expired or came from another site: open it again")
    try:
        principal = auth.authenticate(session, f"Bearer {token.strip()}")
    except Unauthorized:
        principal = None
    if principal is None or principal.role == WORKER or principal.project_id is None:
        return _login_page(
            request, next_path=next, error="That token is unknown, revoked, or not a project token.", status_code=401
        )
    project = projects.get(session, principal.project_id)
    assert project is not None
    settings: Settings = request.app.state.settings
    value, _ = signer(request).issue(principal.token_id, settings.dashboard.session_ttl_s)
    response = RedirectResponse(_safe_next(next) or PATHS.ui_project(project.name), status_code=303)
    response.set_cookie(
        COOKIE,
        value,
        max_age=settings.dashboard.session_ttl_s,
        httponly=True,
        samesite="lax",
        secure=_secure(request),
        path="/ui",
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/ui")
    return response


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str, Form(max_length=200)] = "") -> Response:
    web = signer(request).read(request.cookies.get(COOKIE))
    if web is not None and not signer(request).check_csrf(web, csrf):
        raise PageError(403, "Form expired", "the form's security token is missing or stale: reload the page")
    response = RedirectResponse(PATHS.ui_login(), status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.get("/static/plotly-{plotly}.min.js")
def plotly_js(plotly: str) -> Response:
    """The charting library, from the installed ``plotly`` package (never fetched from the internet)."""
    if plotly != plotly_version():
        raise PageError(404, "Not found", f"this server ships plotly {plotly_version()}")
    spec = find_spec("plotly")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    return FileResponse(path, media_type="text/javascript", headers={"Cache-Control": _IMMUTABLE})


@router.get("/static/{name}")
def static(name: str) -> Response:
    if name not in _STATIC_FILES:
        raise PageError(404, "Not found", f"no static file {name!r}")
    return FileResponse(_STATIC / name, media_type=_STATIC_FILES[name], headers={"Cache-Control": "no-cache"})


def _page_or(api_handler: Callable[[Request, Exception], Any]) -> Callable[[Request, Exception], Any]:
    async def handler(request: Request, exc: Exception) -> Response:
        if not request.url.path.startswith("/ui"):
            response: Response = await api_handler(request, exc)
            return response
        if isinstance(exc, ServiceError):
            return page("error.html", status_code=exc.status, title=exc.error.replace("_", " "), detail=exc.detail)
        if isinstance(exc, RequestValidationError):
            return page("error.html", status_code=422, title="Invalid input", detail=validation_detail(exc))
        assert isinstance(exc, StarletteHTTPException)
        return page("error.html", status_code=exc.status_code, title="Not found", detail=str(exc.detail))

    return handler


def install(app: FastAPI, settings: Settings) -> None:
    """Add the pages, their error handlers and the session key to ``app``."""
    secret = settings.dashboard.session_secret
    app.state.session_signer = (
        SessionSigner(secret.get_secret_value().encode()) if secret is not None else SessionSigner.random()
    )

    async def sign_in(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SignInRequired)
        return RedirectResponse(
            login_url(_safe_next(exc.next_path), github=exc.github and github_sign_in(request)), status_code=303
        )

    async def moved(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, MovedTo)
        return RedirectResponse(exc.location, status_code=307)

    async def page_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, PageError)
        return page("error.html", status_code=exc.status, title=exc.title, detail=exc.detail)

    app.add_exception_handler(SignInRequired, sign_in)
    app.add_exception_handler(MovedTo, moved)
    app.add_exception_handler(PageError, page_error)
    # The API's errors (a service's NotFound, a form field FastAPI refused, an unknown path) read as JSON under
    # /api; under /ui they read as a page.
    for exc_class in (ServiceError, RequestValidationError, StarletteHTTPException):
        api_handler = app.exception_handlers[exc_class]
        app.add_exception_handler(exc_class, _page_or(api_handler))
    app.include_router(router)
    for page_router in PAGE_ROUTERS:
        # A page of a run answers to either of the run's ids: the document's is sent on to the service's.
        app.include_router(page_router, dependencies=[Depends(canonical_run)])
