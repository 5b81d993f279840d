"""The service's errors, documented in one place; one handler renders each as ``{"error", "detail"}``.

``ServiceError``          base; ``status`` is the HTTP status, ``error`` a stable code
``BadRequest``            400 a request that is well-formed but cannot be acted on (a bad cursor)
``Unauthorized``          401 no token, or a token that is unknown or revoked
``Forbidden``             403 a valid token whose role does not allow the action
``NotFound``              404 no such object, or another project's object (tenancy hides it)
``Conflict``              409 the object is not in a state that allows the action
``PayloadTooLarge``       413 a body, bundle or trace over its limit
``InvalidPayload``        422 the payload failed validation (result document, suite file, bundle); also any value
                          the database refuses to hold (a NUL character in text, a number out of range): it came
                          from the request, and the transaction is rolled back
``RateLimited``           429 the token's rate limit; carries ``Retry-After``
``Unavailable``           503 a dependency (database, broker) is down; carries ``Retry-After``. Every route answers it
                          while the database cannot be reached (refused, dropped mid-request or at the commit, no
                          connection from the pool): see ``database_unavailable``
``StoredDocumentInvalid`` 500 a stored result or comparison document that its model refuses (edited in the database,
                          or stored before the model changed): the stored data's fault, never the request's

Anything else a route raises answers 500 with the same body (``internal_error``), never a plain-text page.

A regression is not an error: it is a verdict.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import exc as sa_exc
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

log = logging.getLogger(__name__)

# What a 503 asks a client to wait before it tries again, in seconds: about as long as a Postgres restart takes.
RETRY_AFTER_S = 5


class ServiceError(Exception):
    status: int = 500
    error: str = "internal_error"

    def __init__(self, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = headers or {}


class BadRequest(ServiceError):
    status, error = 400, "bad_request"


class Unauthorized(ServiceError):
    status, error = 401, "unauthorized"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(ServiceError):
    status, error = 403, "forbidden"


class NotFound(ServiceError):
    status, error = 404, "not_found"


class Conflict(ServiceError):
    status, error = 409, "conflict"


class PayloadTooLarge(ServiceError):
    status, error = 413, "payload_too_large"


class InvalidPayload(ServiceError):
    status, error = 422, "invalid_payload"


class RateLimited(ServiceError):
    status, error = 429, "rate_limited"

    def __init__(self, retry_after_s: float) -> None:
        seconds = max(1, math.ceil(retry_after_s))
        super().__init__(f"rate limit reached; retry in {seconds} s", headers={"Retry-After": str(seconds)})


class Unavailable(ServiceError):
    status, error = 503, "unavailable"

    def __init__(self, detail: str, *, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after_s)})


class StoredDocumentInvalid(ServiceError):
    status, error = 500, "invalid_stored_document"


# The database cannot be reached now (down, restarting, the connection dropped, the pool gave none): errors of the
# moment, not of the request. SQLAlchemy wraps the driver's (psycopg's OperationalError becomes its own); the
# driver's own are listed for code that reaches them unwrapped. OperationalError also covers the server cancelling
# a statement or a deadlock: worth a retry as well.
_UNREACHABLE: tuple[type[Exception], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,  # no connection from the pool in time
)
try:  # the Postgres driver; the embedded mode (SQLite) runs without it
    import psycopg

    _UNREACHABLE += (psycopg.OperationalError, psycopg.InterfaceError)
except ImportError:
    pass


def database_unavailable(exc: BaseException) -> BaseException | None:
    """The error in ``exc``'s chain (``raise ... from``, or raised while handling another, or in a group) that
    says the database cannot be reached now; None when there is none."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, _UNREACHABLE):
            return current
        if isinstance(current, sa_exc.DBAPIError) and current.connection_invalidated:
            return current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


class ErrorOut(BaseModel):
    """The body of every error answer."""

    error: str = Field(description="a stable code: bad_request, unauthorized, not_found, invalid_payload, ...")
    detail: str = Field(description="what was wrong, in words")


def error_response(status: int, error: str, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status, headers=headers)


def validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:10]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(request)"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def install_handlers(app: FastAPI) -> None:
    async def service_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServiceError)
        return error_response(exc.status, exc.error, exc.detail, exc.headers)

    async def validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(422, "invalid_payload", validation_detail(exc))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405 and (allowed := _allowed_methods(request)):
            headers["Allow"] = ", ".join(allowed)
        return error_response(exc.status_code, code, str(exc.detail), headers)

    async def data_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, DataError)
        # The driver's first line says what was wrong (e.g. "text fields cannot contain NUL (0x00) bytes").
        reason = str(exc.orig).splitlines()[0] if exc.orig is not None else "a value the database cannot hold"
        return error_response(422, "invalid_payload", f"a value the database cannot hold: {reason}")

    async def database_unreachable(request: Request, exc: Exception) -> Response:
        # Raised by a route or a dependency (the token lookup, the commit of ``get_session``), on the event loop or
        # a thread of the pool: the router's exception middleware calls this.
        return await _answer_unavailable(request, exc)

    async def unexpected_error(request: Request, exc: Exception) -> Response:
        # Anything no other handler took, raised anywhere (a middleware too): Starlette's outermost middleware
        # calls this, sends its answer, then raises the exception again, so the server still logs the traceback.
        # A driver error the database marked as a lost connection, or an error raised from one, is still a 503.
        if database_unavailable(exc) is not None:
            return await _answer_unavailable(request, exc)
        return error_response(500, "internal_error", f"the service failed on this request: {type(exc).__name__}")

    app.add_exception_handler(ServiceError, service_error)
    app.add_exception_handler(DataError, data_error)
    for unreachable in _UNREACHABLE:
        app.add_exception_handler(unreachable, database_unreachable)
    app.add_exception_handler(Exception, unexpected_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)


async def _answer_unavailable(request: Request, exc: Exception) -> Response:
    """503 with ``Retry-After``, rendered by the app's handler of ``ServiceError`` (JSON, or a page under /ui)."""
    cause = database_unavailable(exc) or exc
    log.warning(
        "%s %s: the database is unavailable: %s: %s",
        request.method,
        request.url.path,
        type(cause).__name__,
        str(cause).splitlines()[0] if str(cause) else "",
    )
    unavailable = Unavailable(f"the database is unavailable ({type(cause).__name__}); retry in {RETRY_AFTER_S} s")
    render = request.app.exception_handlers[ServiceError]
    response: Response = await render(request, unavailable)
    for name, value in unavailable.headers.items():
        response.headers.setdefault(name, value)
    return response


def _allowed_methods(request: Request) -> list[str]:
    """Every method the API documents at this path. Starlette's own ``Allow`` names only the methods of the first
    route that matched the path, which is wrong where two routes share it (GET and PUT of a trace)."""
    path = request.url.path
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        if re.fullmatch(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)), path):
            methods |= {m.upper() for m in operations}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)
