"""The OpenAPI document told the truth about errors: every operation lists the error answers it can give, each
with the ``{"error", "detail"}`` body that ``attnprof.server.errors`` renders (FastAPI's default 422 model, a list of
validation errors, is not what this API sends).

Most error answers follow from what an operation is, so they are added here by rule, once, rather than on
every route:

* it takes the public bearer token (security scheme ``BearerToken``): 401 (no, unknown, revoked or expired token), 429
  (the token's rate limit, with ``Retry-After``) and, but for the operations any token may call, 403 (the
  token's role or kind does not allow it);
* it takes a token and names objects in its path: 404 (no such object, or another project's);
* it has parameters or a body: 422 (payload validation); with a body, also 400 (a body that cannot be parsed,
  such as one that is not UTF-8);
* it is a POST, PUT or PATCH: 413 (the body limit, applied before anything reads the body);
* it pages with a ``cursor``: 400 (a cursor this API did not return);
* it is a POST on one job (``.../jobs/{job_id}/...``): 409, for each such POST moves the job from one state to
  another (cancel, claim, heartbeat, result, failure) and a job in another state refuses.

Answers only some operations give (409 on a conflicting state, 400 on an empty time range, 503) are declared on
their routes with ``responses=errors(...)``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from attnprof.server.errors import ErrorOut

LICENSE = {"name": "Apache-2.0", "identifier": "Apache-2.0"}
# The API is served where its document is: generators and linters read the base address from here.
SERVERS = [{"url": "/"}]
# The security scheme of the public routes (a project token); the worker routes have their own two, in their own
# document (``attnprof.server.jobs.internal``).
BEARER = "BearerToken"

DESCRIPTIONS = {
    400: "a well-formed request that cannot be acted on",
    401: "no token, or an unknown, revoked or expired one",
    403: "the token's role or kind does not allow this",
    404: "no such object, or another project's (tenancy hides it)",
    409: "the object's state does not allow this",
    413: "the body is over its limit",
    422: "the payload failed validation",
    429: "the token's rate limit was reached",
    503: "a dependency (the database or the broker) is down",
}
# Operations that every valid token may call, whatever its role or kind (no 403).
ANY_TOKEN = {("get", "/api/v1/token")}
_ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}},
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for error answers a route gives beyond the rules above."""
    return {code: {"model": ErrorOut, "description": DESCRIPTIONS[code]} for code in codes}


def _error_response(code: int, description: str | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": description or DESCRIPTIONS[code],
        "content": {"application/json": {"schema": _ERROR_REF}},
    }
    if code in _HEADERS:
        answer["headers"] = _HEADERS[code]
    return answer


def _codes(path: str, method: str, operation: dict[str, Any]) -> set[int]:
    params = operation.get("parameters", [])
    where = {(p["in"], p["name"].lower()) for p in params}
    authenticated = any(BEARER in requirement for requirement in operation.get("security", ()))
    names_objects = any(p["in"] == "path" for p in params)
    codes: set[int] = set()
    if authenticated:
        codes |= {401, 429}
        if (method, path) not in ANY_TOKEN:
            codes.add(403)
        if names_objects:
            codes.add(404)
    if params or "requestBody" in operation:
        codes.add(422)
    if "requestBody" in operation:
        codes.add(400)
    if method in ("post", "put", "patch"):
        codes.add(413)
    if ("query", "cursor") in where:
        codes.add(400)
    if method == "post" and ("path", "job_id") in where:
        codes.add(409)
    return codes


def _forms_without_null(document: dict[str, Any]) -> None:
    """An optional field of a form is left out or sent, never null: a form has no way to say null (a client that
    followed FastAPI's ``anyOf [..., null]`` would send the text "null", which is not a file nor a number)."""
    schemas = document["components"]["schemas"]
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {})
            for media_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
                ref = content.get(media_type, {}).get("schema", {}).get("$ref", "")
                form = schemas.get(ref.rsplit("/", 1)[-1], {})
                for prop in form.get("properties", {}).values():
                    options = [o for o in prop.get("anyOf", ()) if o.get("type") != "null"]
                    if len(options) == 1:
                        del prop["anyOf"]
                        prop.update(options[0])


def operation_id(route: APIRoute) -> str:
    """An operation's id: its first tag and its function's name (``jobs_create_job``), which a generated client
    turns into a function name; FastAPI's default spells out the path and method as well."""
    return f"{route.tags[0]}_{route.name}" if route.tags else route.name


def _named_forms(document: dict[str, Any]) -> None:
    """A form declared inline with a title (the job submission) becomes a component of that name: generators name
    its model after it (``JobSubmission``), not after the operation and the title together."""
    schemas = document["components"]["schemas"]
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            form = operation.get("requestBody", {}).get("content", {}).get("multipart/form-data")
            title = (form or {}).get("schema", {}).get("title")
            if form is None or title is None or "$ref" in form["schema"]:
                continue
            if schemas.get(title, form["schema"]) == form["schema"]:  # a name no other schema holds
                schemas[title] = form["schema"]
                form["schema"] = {"$ref": f"#/components/schemas/{title}"}


def _file_parts(document: dict[str, Any]) -> None:
    """A file part of a form is a binary string (``format: binary``) as well as its ``contentMediaType``: the
    OpenAPI 3.1 spelling alone leaves generators (openapi-python-client) with a plain string field, so a client
    could not send a bundle."""
    schemas = document["components"]["schemas"]
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            form = operation.get("requestBody", {}).get("content", {}).get("multipart/form-data", {}).get("schema", {})
            if "$ref" in form:
                form = schemas.get(form["$ref"].rsplit("/", 1)[-1], {})
            for prop in form.get("properties", {}).values():
                if prop.get("type") == "string" and "contentMediaType" in prop:
                    prop["format"] = "binary"


_BINARY = {"type": "string", "format": "binary"}


def _gzip_bodies(document: dict[str, Any]) -> None:
    """A gzip body (a trace) is bytes. The routes that take one read the bytes whatever the ``Content-Type`` says,
    so the request also lists ``application/octet-stream``, the one raw media type generators send as bytes; an
    answer in gzip gets its binary schema (FastAPI leaves it empty)."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/gzip" in content:
                content["application/gzip"].setdefault("schema", dict(_BINARY))
                content.setdefault("application/octet-stream", {"schema": dict(_BINARY)})
            for answer in operation.get("responses", {}).values():
                gzip = answer.get("content", {}).get("application/gzip")
                if gzip is not None:
                    gzip.setdefault("schema", dict(_BINARY))


def document_errors(document: dict[str, Any]) -> dict[str, Any]:
    """Add the rule-given error answers to every operation of ``document`` (in place) and use one error model."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["ErrorOut"] = ErrorOut.model_json_schema()
    _named_forms(document)
    _forms_without_null(document)
    _file_parts(document)
    _gzip_bodies(document)
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            # An operation that takes no token says so (the probes, /metrics, GitHub's signed webhook): an absent
            # requirement reads as "not described", an empty one as "open".
            operation.setdefault("security", [])
            responses = operation.setdefault("responses", {})
            for code in sorted(_codes(path, method, operation)):
                responses.setdefault(str(code), _error_response(code))
            for code, answer in responses.items():
                if code.isdigit() and int(code) >= 400:
                    # FastAPI's validation model, or a bare description: the body is this API's error body.
                    answer["content"] = {"application/json": {"schema": _ERROR_REF}}
                    if code == "422":
                        answer["description"] = DESCRIPTIONS[422]
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return document


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` return the document with its error answers filled in (built once, then cached)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_errors(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
