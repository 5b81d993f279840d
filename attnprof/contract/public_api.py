"""The public API's answers (``/api/v1/...``) as the CI client reads them: the fields it uses, typed.

The service answers with its own models (``attnprof.server.*.schemas``); these are the client's side of the same
answers, declaring only what the client reads. Each keeps the fields it does not declare (``extra="allow"``): the
service may add fields without breaking an older client, and what the client passes on (``attnprof submit --json``,
``attnprof upload --json``) is the whole answer. A test (tests/client/test_contract_answers.py) checks every field
declared here against the service's OpenAPI document, so the two sides cannot drift. Pydantic only: the client
imports this without the server's packages.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from attnprof.contract.ids import JobId, RunId


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorAnswer(_Answer):
    """The body of every error answer, of the public API and of the worker API (the service's ``ErrorOut``)."""

    error: str = Field(description="a stable code: bad_request, unauthorized, not_found, ...")
    detail: str = Field(description="what was wrong, in words")


class TokenAnswer(_Answer):
    """``GET /api/v1/token``: what the bearer token is (the service's ``Whoami``)."""

    project: str | None = Field(None, description="the project of a project's token (null: a worker token)")


class MatrixJobAnswer(_Answer):
    """One job of a submission that named several testbeds."""

    id: JobId
    testbed: str
    status: str


class JobCreatedAnswer(_Answer):
    """``POST /api/v1/projects/{project}/jobs`` (the service's ``JobCreated``): with several testbeds, ``id`` is the
    first's and ``jobs`` lists them all."""

    id: JobId
    status: str
    matrix_id: str | None = None
    jobs: list[MatrixJobAnswer] = []


class JobAnswer(_Answer):
    """``GET /api/v1/jobs/{job_id}`` (the service's ``JobOut``): the fields a client polls. The nullable ones may be
    left out (null)."""

    id: JobId
    status: str
    verdict: str | None = None
    reason: str | None = None
    attempts: int
    run_id: RunId | None = None
    notice: str | None = None


class JobComparisonAnswer(_Answer):
    """``GET /api/v1/jobs/{job_id}/comparison`` (the service's ``JobComparison``)."""

    verdict: str
    document: dict[str, Any] = Field(description="the attnprof.comparison/v1 document")


class ComparisonFinding(BaseModel):
    """One finding of an attnprof.comparison/v1 document, as the client prints it (``attnprof.core``'s ``Finding``:
    a test checks these fields against its schema)."""

    model_config = ConfigDict(extra="ignore")

    case: str
    metric: str
    status: str
    verdict: str
    baseline: float | str | None = None
    candidate: float | str | None = None
    unit: str | None = None
    change: float | None = None
    detail: str | None = None


class ComparisonFindings(BaseModel):
    """The findings of an attnprof.comparison/v1 document (the rest is not read here)."""

    model_config = ConfigDict(extra="ignore")

    findings: list[ComparisonFinding] = Field(default_factory=list)


class ResultUploadAnswer(_Answer):
    """``POST /api/v1/projects/{project}/results`` (the service's ``UploadAnswer``)."""

    run_id: RunId
    verdict: str
    dashboard_url: str
    comparison: dict[str, Any] = Field(description="the attnprof.comparison/v1 document")
    summary: str

    def findings(self) -> list[ComparisonFinding]:
        """The comparison's findings (a ``pydantic.ValidationError`` where one is not a finding)."""
        return ComparisonFindings.model_validate(self.comparison).findings
