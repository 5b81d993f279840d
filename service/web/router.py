"""Sign-in, sign-out and static files of the web pages, and ``install``, which adds the pages to an app."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnprof.contract.links import PATHS
from service.auth import service as auth
from service.auth.models import WORKER
from service.config import Settings
from service.db import SessionDep
from service.errors import ServiceError, Unauthorized, validation_detail
from service.projects import repository as projects
from service.web.dependencies import PageError, SignInRequired, get_signed_in_project, login_url, signer
from service.web.pages import PAGE_ROUTERS
from service.web.render import page, plotly_version
from service.web.session import COOKIE, LOGIN_CSRF_COOKIE, SessionSigner

router = APIRouter(prefix="/ui", include_in_schema=False)
_STATIC = Path(__file__).parent / "static"
_STATIC_FILES = {"app.css": "text/css", "app.js": "text/javascript"}
_IMMUTABLE = "public, max-age=31536000, immutable"


def _safe_next(value: str | None) -> str | None:
    """Only a path on this site: an absolute URL or ``//host`` would make sign-in an open redirect."""
    if not value or not value.startswith("/ui/") or value.startswith("//"):
        return None
    parts = urlsplit(value)
    return None if parts.scheme or parts.netloc else value


def _secure(request: Request) -> bool:
    settings: Settings = request.app.state.settings
    return settings.dashboard.cookie_secure or request.url.scheme == "https"


@router.get("")
def index(request: Request, session: SessionDep) -> Response:
    try:
        project = get_signed_in_project(request, session)
    except SignInRequired:
        return RedirectResponse(PATHS.ui_login(), status_code=303)
    return RedirectResponse(PATHS.ui_project(project.name), status_code=303)


@router.get("/login")
def login_form(request: Request, next: str | None = None, error: str | None = None) -> HTMLResponse:
    csrf = secrets.token_urlsafe(16)
    response = page("login.html", next=_safe_next(next) or "", error=error, csrf=csrf)
    response.set_cookie(
        LOGIN_CSRF_COOKIE, csrf, max_age=600, httponly=True, samesite="strict", secure=_secure(request), path="/ui"
    )
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
        again = page(
            "login.html",
            status_code=401,
            next=_safe_next(next) or "",
            error="That token is unknown, revoked, or not a project token.",
            csrf=expected,
        )
        return again
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

    async def sign_in(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, SignInRequired)
        return RedirectResponse(login_url(exc.next_path), status_code=303)

    async def page_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, PageError)
        return page("error.html", status_code=exc.status, title=exc.title, detail=exc.detail)

    app.add_exception_handler(SignInRequired, sign_in)
    app.add_exception_handler(PageError, page_error)
    # The API's errors (a service's NotFound, a form field FastAPI refused, an unknown path) read as JSON under
    # /api; under /ui they read as a page.
    for exc_class in (ServiceError, RequestValidationError, StarletteHTTPException):
        api_handler = app.exception_handlers[exc_class]
        app.add_exception_handler(exc_class, _page_or(api_handler))
    app.include_router(router)
    for page_router in PAGE_ROUTERS:
        app.include_router(page_router)
