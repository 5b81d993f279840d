"""Provenance is judged by one set of rules (``attnprof.contract.provenance``) wherever it is checked: the client
(``attnprof upload``, ``attnprof submit``, the action's step) refuses what the service refuses, before sending it,
with the same words, and the service's job form and upload body answer 422 naming the field; the database's
columns hold the longest value the rules allow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import inspect
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from attnprof.client import action
from attnprof.client.cli import app as client_app
from attnprof.contract.provenance import BRANCH_CHARS, COMMIT_CHARS, REPO_CHARS, Provenance, refusal
from attnprof.server.jobs.schemas import submission_schema
from tests.server import documents as docs
from tests.server.tenants import Tenant

SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "c"\ntarget = "naive"\nq_heads = 1\nseq_q = 8\nhead_dim = 8\n'
GOOD: dict[str, Any] = {"branch": "main", "commit": "c1"}
# One value each rule refuses, by field.
BAD: list[tuple[str, Any]] = [
    ("commit", "bad commit!"),
    ("commit", "c" * (COMMIT_CHARS + 1)),
    ("commit", "abc\n"),
    ("base_commit", "a;b"),
    ("branch", "b" * (BRANCH_CHARS + 1)),
    ("repo", "no-slash"),
    ("repo", "acme/" + "x" * REPO_CHARS),
    ("pr", 0),
    ("ancestors", ["a1", "not a hash"]),
]


def _refused(field: str, value: Any) -> str:
    """What the contract says of ``value`` as ``field``: one error, which names the field."""
    with pytest.raises(ValidationError) as caught:
        Provenance(**{**GOOD, field: value})
    words = refusal(caught.value)
    assert words.startswith(f"{field}") and ";" not in words, words
    return words


def _cli_options(field: str, value: Any) -> list[str]:
    fields = {**GOOD, field: value}
    argv = ["--branch", fields["branch"], "--commit", fields["commit"]]
    for name in ("repo", "base_commit", "pr"):
        if name in fields:
            argv += [f"--{name.replace('_', '-')}", str(fields[name])]
    return argv


@pytest.mark.parametrize(("field", "value"), BAD)
def test_the_client_and_the_service_refuse_the_same_value_in_the_same_words(
    client: TestClient, tenant: Tenant, tmp_path: Path, field: str, value: Any
) -> None:
    words = _refused(field, value)
    # The service: the upload's JSON body and the job's form, each a 422 naming the field in the body.
    body = docs.upload_body(docs.h200(), **{**GOOD, field: value})
    r = client.post(f"/api/v1/projects/{tenant.name}/results", json=body, headers=tenant.h("submit"))
    assert r.status_code == 422 and r.json() == {"error": "invalid_payload", "detail": f"body.{words}"}, r.text
    form = {"testbed": "tb-provenance", **GOOD, field: json.dumps(value) if isinstance(value, list) else str(value)}
    r = client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode())},
        data=form,
        headers=tenant.h("submit"),
    )
    assert r.status_code == 422 and r.json() == {"error": "invalid_payload", "detail": f"body.{words}"}, r.text
    # The client: refused as bad input (exit 2) before anything is sent; the server named here does not exist,
    # so a request would have ended in "unreachable" (exit 3).
    result = tmp_path / "result.json"
    result.write_text(json.dumps(docs.h200()))
    suite = tmp_path / "attnprof.toml"
    suite.write_text(SPEC)
    server = ["--server", "http://127.0.0.1:9", "--token", "t", "--timeout", "1"]
    if field == "ancestors":  # upload takes them as an option; submit asks git
        upload = ["upload", str(result), *server, *_cli_options("commit", GOOD["commit"])]
        upload += ["--ancestors", ",".join(value)]
        runs = [upload]
    else:
        options = _cli_options(field, value)
        runs = [
            ["upload", str(result), *server, "--project", "p", *options],
            ["submit", str(suite), *server, "--project", "p", "--testbed", "tb", *options],
        ]
    for argv in runs:
        ran = CliRunner().invoke(client_app, argv)
        assert ran.exit_code == 2, (argv, ran.output)
        assert f"error: {words}" in ran.output, ran.output


@pytest.mark.parametrize(("field", "value"), [("commit", "bad commit!"), ("branch", "b" * (BRANCH_CHARS + 1))])
def test_the_actions_step_refuses_what_the_service_would_as_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str
) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"after": value if field == "commit" else "a2"}))
    env = {
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REF_NAME": value if field == "branch" else "main",
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "ATTNPROF_SUITE": "attnprof.toml",
        "ATTNPROF_TESTBED": "tb",
        "ATTNPROF_CLI": "/nonexistent/attnprof",  # nothing may be run
    }
    assert action.main(env) == action.EXIT_BAD_INPUT
    assert _refused(field, value) in capsys.readouterr().out
    assert "verdict=\n" in (tmp_path / "output").read_text()


def test_the_job_forms_fields_are_documented_by_the_contracts_rules() -> None:
    def rule(prop: dict[str, Any]) -> dict[str, Any]:
        (kind,) = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
        return {k: v for k, v in kind.items() if k not in ("title", "description", "default")}

    form = submission_schema()["properties"]
    contract = Provenance.model_json_schema()["properties"]
    for name in ("branch", "commit", "repo", "base_commit", "pr"):
        assert rule(form[name]) == rule(contract[name]), name
    assert form["ancestors"]["type"] == "string"  # a JSON list or CSV, each item then checked as the contract's
    assert form["commit"]["pattern"] == "^[0-9A-Za-z._-]+$" and form["commit"]["maxLength"] == COMMIT_CHARS


def test_the_database_columns_hold_the_longest_values_the_rules_allow(db: Session) -> None:
    bounds = {"branch": BRANCH_CHARS, "commit": COMMIT_CHARS, "base_commit": COMMIT_CHARS, "repo": REPO_CHARS}
    inspector = inspect(db.get_bind())
    for table in ("jobs", "runs"):
        lengths = {c["name"]: getattr(c["type"], "length", None) for c in inspector.get_columns(table)}
        assert {name: lengths[name] for name in bounds} == bounds, table
