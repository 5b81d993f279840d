from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from attnprof.contract.provenance import Provenance


class ResultUpload(Provenance):
    """A result document from a self-hosted runner, with where its code came from: the fields of ``Provenance``
    (the contract's rules), the document and the testbed."""

    model_config = ConfigDict(extra="forbid")

    result: dict[str, Any] = Field(description="an attnprof.result/v1 document")
    testbed: str | None = Field(None, max_length=100)


class UploadAnswer(BaseModel):
    run_id: str
    comparison_id: str
    verdict: str
    baseline: list[str] | None = Field(description="run ids of the baseline (null when there was none)")
    testbed: str
    url: str = Field(description="where the run can be read: its API route (with a token)")
    dashboard_url: str = Field(description="the comparison's dashboard page, for people (a browser session)")
    comparison: dict[str, Any] = Field(description="the attnprof.comparison/v1 document")
    summary: str = Field(
        description="the comparison in GitHub markdown, as the pull-request comment shows it (without the comment's "
        "hidden marker line): for a CI job's summary"
    )
