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
``Unavailable``           503 a dependency (database, broker) is down

A regression is not an error: it is a verdict.
"""

from __future__ import annotations

import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException


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

    app.add_exception_handler(ServiceError, service_error)
    app.add_exception_handler(DataError, data_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)


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
