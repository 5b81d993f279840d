"""The CI client reads the service's answers through its own models (``attnprof.contract.public_api``): each field
they declare must be in the service's answer, as the service's OpenAPI document describes it, with a JSON type the
client accepts (every type the service may send), and a field the client requires must be one the service always
sends. So the two sides cannot drift: a field renamed, dropped or retyped on one side fails here."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from attnprof.client.cli import SubmitOutput
from attnprof.contract.links import API_ROUTES
from attnprof.contract.public_api import (
    ComparisonFinding,
    ComparisonFindings,
    ErrorAnswer,
    JobAnswer,
    JobComparisonAnswer,
    JobCreatedAnswer,
    ResultUploadAnswer,
    TokenAnswer,
)
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.server.app import create_app
from attnprof.server.jobs.internal import OPENAPI_PATH
from tests.server.stack import make_settings

# Each answer model, and the operations whose success answers it reads: (method, route, statuses).
ANSWERS: list[tuple[type[BaseModel], str, str, tuple[str, ...]]] = [
    (TokenAnswer, "get", API_ROUTES["token"], ("200",)),
    (JobCreatedAnswer, "post", API_ROUTES["jobs"], ("200", "202")),
    (JobAnswer, "get", API_ROUTES["job"], ("200",)),
    (JobComparisonAnswer, "get", API_ROUTES["job_comparison"], ("200",)),
    (ResultUploadAnswer, "post", API_ROUTES["results"], ("200", "201")),
]
# The operations the client sends, whose error answers it reads as ``ErrorAnswer``.
CALLED = [(method, path) for _, method, path, _ in ANSWERS] + [("put", API_ROUTES["trace"])]


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, Any]]:
    # The documents do not depend on the database: an app that never touches one serves them.
    client = TestClient(create_app(make_settings("sqlite://")))
    return {path: client.get(path).json() for path in ("/openapi.json", OPENAPI_PATH)}


def _resolve(schema: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        *_, where, name = schema["$ref"].split("/")
        schema = (document["components"]["schemas"] if where == "schemas" else document["$defs"])[name]
    return schema


def _json_types(schema: dict[str, Any], document: dict[str, Any]) -> set[str]:
    """The JSON types a value of ``schema`` may have ("any" where it says nothing)."""
    schema = _resolve(schema, document)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return set().union(*(_json_types(s, document) for s in schema[key]))
    if "allOf" in schema:
        return set().union(*(_json_types(s, document) for s in schema["allOf"]))
    if "type" in schema:
        kinds = schema["type"]
        return set(kinds) if isinstance(kinds, list) else {kinds}
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if values is not None:
        names = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
        return {names[type(v)] for v in values}
    return {"any"}


def _accepts(client: set[str], server: set[str]) -> bool:
    """Does a field of the client's types take every value of the server's?"""
    if "any" in client:
        return True
    return all(t in client or (t == "integer" and "number" in client) for t in server)


def _drift(model: type[BaseModel], schema: dict[str, Any], document: dict[str, Any]) -> list[str]:
    """What of ``model``'s declared fields the server's ``schema`` (in ``document``) does not answer as it reads."""
    ours = model.model_json_schema(ref_template="#/$defs/{model}")
    server = _resolve(schema, document)
    wrong = []
    for name, prop in ours["properties"].items():
        theirs = server.get("properties", {}).get(name)
        if theirs is None:
            wrong.append(f"{name}: not in the service's {server.get('title')}")
            continue
        client_types, server_types = _json_types(prop, ours), _json_types(theirs, document)
        if not _accepts(client_types, server_types):
            wrong.append(f"{name}: the client takes {sorted(client_types)}, the service sends {sorted(server_types)}")
        if name in ours.get("required", []) and name not in server.get("required", []):
            wrong.append(f"{name}: the client requires it, and the service may leave it out")
    return wrong


def _json_schema(operation: dict[str, Any], status: str) -> dict[str, Any]:
    schema: dict[str, Any] = operation["responses"][status]["content"]["application/json"]["schema"]
    return schema


@pytest.mark.parametrize(("model", "method", "path", "statuses"), ANSWERS, ids=[a[0].__name__ for a in ANSWERS])
def test_each_answer_model_reads_fields_the_service_answers_with(
    documents: dict[str, dict[str, Any]], model: type[BaseModel], method: str, path: str, statuses: tuple[str, ...]
) -> None:
    document = documents["/openapi.json"]
    operation = document["paths"][path][method]
    answered = sorted(s for s in operation["responses"] if s.startswith("2"))
    assert answered == sorted(statuses), f"{method} {path} answers {answered}: read each with {model.__name__}"
    for status in statuses:
        assert _drift(model, _json_schema(operation, status), document) == [], (method, path, status)


def test_every_error_answer_of_both_apis_reads_as_an_error_answer(documents: dict[str, dict[str, Any]]) -> None:
    public, internal = documents["/openapi.json"], documents[OPENAPI_PATH]
    read = [(public, public["paths"][path][method]) for method, path in CALLED]
    read += [(internal, op) for ops in internal["paths"].values() for op in ops.values()]  # the worker's reads
    seen = 0
    for document, operation in read:
        for status, answer in operation["responses"].items():
            if int(status) >= 400:
                assert _drift(ErrorAnswer, answer["content"]["application/json"]["schema"], document) == []
                seen += 1
    assert seen > 20


def test_the_findings_the_client_prints_are_the_comparison_documents() -> None:
    # The comparison document travels as an object in the answers: its model is attnprof.core's.
    core = ComparisonDocument.model_json_schema(ref_template="#/$defs/{model}")
    findings = core["properties"]["findings"]
    assert _drift(ComparisonFindings, {"properties": {"findings": findings}}, core) == []
    assert _drift(ComparisonFinding, core["$defs"]["Finding"], core) == []


def test_the_drift_check_finds_a_renamed_a_retyped_and_an_optional_field(documents: dict[str, dict[str, Any]]) -> None:
    document = documents["/openapi.json"]
    job = _json_schema(document["paths"][API_ROUTES["job"]]["get"], "200")

    class Drifted(BaseModel):
        state: str  # renamed: the service says status
        attempts: str  # retyped: an integer
        verdict: str  # nullable on the service's side
        notice: str | None  # required here, and the service may leave it out

    assert _drift(Drifted, job, document) == [
        "state: not in the service's JobOut",
        "attempts: the client takes ['string'], the service sends ['integer']",
        "verdict: the client takes ['string'], the service sends ['null', 'string']",
        "notice: the client requires it, and the service may leave it out",
    ]


def test_what_submit_prints_is_read_back_by_the_action() -> None:
    # ``attnprof submit --json`` passes the service's answers on whole; the action's step reads them back.
    job = {"id": "j1", "status": "done", "verdict": "pass", "attempts": 1, "created_at": "2026-01-01T00:00:00Z"}
    printed = SubmitOutput(job=JobAnswer.model_validate(job), exit=0, reason="verdict: pass").model_dump(
        mode="json", exclude_unset=True
    )
    assert printed["job"] == job  # the fields the client does not declare too
    read = SubmitOutput.model_validate(printed)
    assert read.job is not None and (read.job.id, read.job.verdict, read.exit) == ("j1", "pass", 0)
