"""The OpenAPI documents name each schema once: a generated client gets one type per name, and every model a route
takes or answers with is there under its own name (two models of one name would be renamed after their modules,
or one of them lost)."""

from __future__ import annotations

import types
import typing
from collections import Counter
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from openapi_spec_validator import validate
from pydantic import BaseModel

from attnprof.server.app import create_app
from attnprof.server.jobs.internal import OPENAPI_PATH
from attnprof.server.routers import ROUTERS
from tests.server.stack import make_settings


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, Any]]:
    # The documents do not depend on the database: an app that never touches one serves them.
    client = TestClient(create_app(make_settings("sqlite://")))
    return {path: client.get(path).json() for path in ("/openapi.json", OPENAPI_PATH)}


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models(arg)]
    return []


def _route_models(public: bool) -> set[type[BaseModel]]:
    """The models the routes of one document take as their body or answer with."""
    found: set[type[BaseModel]] = set()
    for router in ROUTERS:
        for route in router.routes:
            if not isinstance(route, APIRoute) or route.include_in_schema != public:
                continue
            found.update(_models(route.response_model))
            found.update(m for answer in route.responses.values() for m in _models(answer.get("model")))
            if route.body_field is not None:
                found.update(_models(route.body_field.field_info.annotation))
    return found


@pytest.mark.parametrize("path", ["/openapi.json", OPENAPI_PATH])
def test_each_schema_has_a_name_of_its_own_and_every_model_is_there(
    documents: dict[str, dict[str, Any]], path: str
) -> None:
    schemas = documents[path]["components"]["schemas"]
    titles = Counter(schema.get("title") for schema in schemas.values())
    assert [title for title, n in titles.items() if n > 1] == []
    # A name FastAPI had to qualify by module (``service__jobs__schemas__X``) means two models shared one.
    assert {name: s.get("title") for name, s in schemas.items() if s.get("title") != name} == {}
    models = _route_models(public=path == "/openapi.json")
    assert models, "no route models found: the routers are not read as this test expects"
    missing = sorted(m.__name__ for m in models if m.__name__ not in schemas)
    assert missing == []
    assert len({m.__name__ for m in models}) == len(models)  # no two route models of one name


def test_a_jobs_comparison_and_a_comparison_are_two_types(documents: dict[str, dict[str, Any]]) -> None:
    document = documents["/openapi.json"]
    answers = {
        path: document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        for path in ("/api/v1/jobs/{job_id}/comparison", "/api/v1/projects/{project}/comparisons/{comparison_id}")
    }
    assert sorted(answers.values()) == ["#/components/schemas/ComparisonOut", "#/components/schemas/JobComparison"]
    schemas = document["components"]["schemas"]
    assert {"noise_floor", "created_at"} <= set(schemas["JobComparison"]["properties"])


@pytest.mark.parametrize("path", ["/openapi.json", OPENAPI_PATH])
def test_the_documents_are_valid_openapi(documents: dict[str, dict[str, Any]], path: str) -> None:
    validate(documents[path])  # openapi-spec-validator: raises on the first error


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, op) for path, ops in document["paths"].items() for method, op in ops.items()]


def test_the_public_routes_take_a_bearer_security_scheme_not_a_header(documents: dict[str, dict[str, Any]]) -> None:
    document = documents["/openapi.json"]
    assert document["components"]["securitySchemes"].keys() == {"BearerToken"}
    assert document["components"]["securitySchemes"]["BearerToken"]["type"] == "http"
    assert document["components"]["securitySchemes"]["BearerToken"]["scheme"] == "bearer"
    open_routes = {("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics"), ("post", "/api/v1/github/webhook")}
    for method, path, op in _operations(document):
        assert not [p for p in op.get("parameters", ()) if p["name"].lower() == "authorization"], (method, path)
        if (method, path) in open_routes:
            assert op["security"] == [], (method, path)  # open, and saying so
        else:
            assert op.get("security") == [{"BearerToken": []}], (method, path)
            assert {"401", "429"} <= op["responses"].keys(), (method, path)


def test_the_worker_routes_are_only_in_their_own_document(documents: dict[str, dict[str, Any]]) -> None:
    public, internal = documents["/openapi.json"], documents[OPENAPI_PATH]
    assert [p for p in public["paths"] if p.startswith("/internal")] == []
    assert internal["paths"] and all(p.startswith("/internal/") for p in internal["paths"])
    assert internal["components"]["securitySchemes"].keys() == {"WorkerToken", "JobToken"}


def test_operation_ids_are_the_tag_and_the_function(documents: dict[str, dict[str, Any]]) -> None:
    expected = {
        (method.lower(), route.path): f"{route.tags[0]}_{route.name}"
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    ids = [(method, path, op["operationId"]) for doc in documents.values() for method, path, op in _operations(doc)]
    assert len({i for _, _, i in ids}) == len(ids)
    assert {(m, p): i for m, p, i in ids} == {key: expected[key] for key in {(m, p) for m, p, _ in ids}}
    assert ("post", "/api/v1/projects/{project}/jobs", "jobs_create_job") in ids


def test_uploads_are_declared_as_bytes(documents: dict[str, dict[str, Any]]) -> None:
    document = documents["/openapi.json"]
    submission = document["components"]["schemas"]["JobSubmission"]
    for part in ("spec", "bundle"):
        assert submission["properties"][part]["type"] == "string"
        assert submission["properties"][part]["format"] == "binary"
    assert submission["properties"]["testbed"].get("format") is None
    binary = {"schema": {"type": "string", "format": "binary"}}
    for doc, path in (
        (document, "/api/v1/projects/{project}/runs/{run_id}/traces/{name}"),
        (documents[OPENAPI_PATH], "/internal/jobs/{job_id}/traces/{name}"),
    ):
        content = doc["paths"][path]["put"]["requestBody"]["content"]
        assert content == {"application/gzip": binary, "application/octet-stream": binary}
    trace = document["paths"]["/api/v1/projects/{project}/runs/{run_id}/traces/{name}"]["get"]
    assert trace["responses"]["200"]["content"] == {"application/gzip": binary}
