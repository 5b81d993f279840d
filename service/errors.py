"""The service's errors, documented in one place; one handler renders each as ``{"error", "detail"}``.

``ServiceError``          base; ``status`` is the HTTP status, ``error`` a stable code
``BadRequest``            400 a request that is well-formed but cannot be acted on (a bad cursor)
``Unauthorized``          401 no token, or a token that is unknown or revoked
``Forbidden``             403 a valid token whose role does not allow the action
``NotFound``              404 no such object, or another project's object (tenancy hides it)
``Conflict``              409 the object is not in a state that allows the action
``PayloadTooLarge``       413 a body, bundle or trace over its limit
``InvalidPayload``        422 the payload failed validation (result document, suite file, bundle)
``RateLimited``           429 the token's rate limit; carries ``Retry-After``
``Unavailable``           503 a dependency (database, broker) is down

A regression is not an error: it is a verdict.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
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


def error_response(status: int, error: str, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status, headers=headers)


def _validation_detail(exc: RequestValidationError) -> str:
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
        return error_response(422, "invalid_payload", _validation_detail(exc))

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), dict(exc.headers or {}))

    app.add_exception_handler(ServiceError, service_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
