from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from attnprof.contract.provenance import Branch, Commit, Provenance, PullRequest, Repo
from attnprof.contract.suite_path import SuitePath


class JobFields(BaseModel):
    """The text fields of a job submission (``multipart/form-data``, beside the ``spec`` and ``bundle`` files): the
    testbed or testbeds and the job's provenance, whose rules are the contract's (``ancestors`` and ``testbeds`` are
    one field each here: their items are checked once the list is read)."""

    testbed: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="the testbed to run on; or testbeds; with neither, the suite's [suite] testbeds",
    )
    testbeds: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="several testbeds, one job each (a matrix: its jobs share matrix_id), as a JSON list or CSV, "
        "e.g. h100,h200; not with testbed",
    )
    branch: Branch
    commit: Commit
    repo: Repo | None = None
    base_commit: Commit | None = None
    ancestors: str | None = Field(default=None, description="first-parent ancestors, newest first: JSON list or CSV")
    pr: PullRequest | None = None
    suite_path: SuitePath | None = None

    def provenance(self, ancestors: tuple[str, ...]) -> Provenance:
        """The job's provenance, with ``ancestors`` as read from the field (a ``ValidationError`` names a commit
        of theirs that breaks the rule)."""
        return Provenance(
            branch=self.branch,
            commit=self.commit,
            repo=self.repo,
            base_commit=self.base_commit,
            ancestors=ancestors,
            pr=self.pr,
        )


_FILE = {"type": "string", "contentMediaType": "application/octet-stream"}


def submission_schema() -> dict[str, Any]:
    """The OpenAPI schema of the whole form: the files, then the text fields."""
    fields = JobFields.model_json_schema()
    properties = {
        "spec": {**_FILE, "title": "Spec", "description": "the suite file (TOML)"},
        "bundle": {**_FILE, "title": "Bundle", "description": "the source, tar.gz"},
        "base_bundle": {
            **_FILE,
            "title": "Base Bundle",
            "description": "the merge base's source, tar.gz: the job is then paired (the two trees profiled "
            "interleaved on one device, and the verdict is the paired comparison's); needs bundle and base_commit "
            "too, and has the same limits as bundle",
        },
    }
    for name, prop in fields["properties"].items():
        # A form field is sent or left out, never null: an optional one is documented as its type.
        (kind,) = [p for p in prop.pop("anyOf", [prop]) if p.get("type") != "null"]
        prop.pop("default", None)
        properties[name] = {**prop, **kind}
    return {
        "title": "JobSubmission",
        "type": "object",
        "properties": properties,
        "required": ["spec", *fields["required"]],
    }


class MatrixJob(BaseModel):
    id: str
    testbed: str
    status: str


class JobCreated(BaseModel):
    id: str = Field(description="the job; of a matrix, its first testbed's (by name)")
    status: str
    matrix_id: str | None = Field(
        None, description="the matrix its jobs share when the submission named several testbeds (null: one job)"
    )
    jobs: list[MatrixJob] = Field(default_factory=list, description="every job the submission made, one per testbed")


class JobOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    project: str
    testbed: str
    suite_name: str
    suite_path: str | None = Field(description="the suite file's path in the repository (null: not sent)")
    repo: str | None
    branch: str
    commit: str
    base_commit: str | None
    ancestors: list[str]
    pr: int | None
    status: str
    verdict: str | None
    reason: str | None
    attempts: int
    max_attempts: int
    has_bundle: bool
    paired: bool = Field(
        description="profiled with its merge base (its base_bundle), interleaved; the verdict is the paired "
        "comparison's"
    )
    run_id: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    gpu_seconds: float = Field(
        0.0,
        description="the time profile workers held their device for it: every attempt from its claim to its end "
        "(a result, a failure, a lost worker's last heartbeat, a cancel), summed; a paired job's covers both trees",
    )
    notice: str | None = Field(
        None,
        description="why a queued job does not start: no live worker serves its testbed (for how long, or never), or "
        "its project used its GPU quota for the day; null otherwise",
    )
    matrix_id: str | None = Field(
        None,
        description="the matrix of testbeds it belongs to: one submission, one job per testbed "
        "(GET /jobs/{job_id}/matrix); null: a job alone",
    )


class JobPage(BaseModel):
    jobs: list[JobOut]
    next: str | None = Field(description="cursor of the next page, or null")


class JobComparison(BaseModel):
    """The comparison of a job's run (``GET /jobs/{job_id}/comparison``)."""

    id: str
    mode: str = Field(
        description="history: against stored baseline runs; paired: against the merge base profiled beside it"
    )
    run_id: str
    verdict: str
    baseline: list[str] = Field(description="run ids of the baseline (paired: empty, the base is no run)")
    noise_floor: float | None
    created_at: datetime
    document: dict[str, Any] = Field(description="the attnprof.comparison/v1 document")


class DayUsageOut(BaseModel):
    day: str = Field(description="the UTC day its jobs' last attempts started, YYYY-MM-DD")
    testbed: str
    jobs: int
    gpu_seconds: float = Field(description="device seconds its jobs held")
    paired_seconds: float = Field(description="of which paired jobs (both trees, interleaved)")
    bisection_seconds: float = Field(description="of which a bisection's probes (background jobs)")


class UsageOut(BaseModel):
    days: list[DayUsageOut] = Field(description="per UTC day and testbed, newest day first")
    total_gpu_seconds: float
    quota_gpu_seconds_per_day: float | None = Field(description="the project's daily quota (null: none)")
    used_today_seconds: float = Field(description="device seconds held since 00:00 UTC, running attempts included")


class SideOut(BaseModel):
    testbed: str
    change: float = Field(description="relative change of the metric on this testbed (0.05: 5% more)")
    low: float = Field(description="its interval's low end, relative")
    high: float = Field(description="its interval's high end, relative")
    status: str = Field(description="regressed, improved, unchanged or inconclusive on this testbed")
    kernels: list[str] = Field(description="the kernels whose time moved most in the case there, by microseconds")
    higher_is_better: bool = Field(description="the metric is a rate (throughput, bandwidth), not a time")
    way: str = Field(description="faster, slower, or unchanged (the interval holds 0) on this testbed")


class NotPortableOut(BaseModel):
    case: str
    metric: str
    kind: str = Field(
        description="direction: faster on one testbed and slower on another, beyond their intervals; size: the "
        "intervals of the change are apart, one way"
    )
    testbeds: list[str] = Field(description="the testbeds that disagree")
    sides: list[SideOut] = Field(description="what each testbed that compared the case found")


class MatrixOut(BaseModel):
    """One submission's jobs, one per testbed (``GET /jobs/{job_id}/matrix``)."""

    matrix_id: str
    complete: bool = Field(description="every job has ended")
    verdict: str | None = Field(
        description="the worst of the jobs' verdicts once all have one (fail, warn, pass); null before, or when one "
        "ended without a verdict"
    )
    jobs: list[JobOut] = Field(description="by testbed name")
    not_portable: list[NotPortableOut] = Field(
        description="findings that differ across the testbeds beyond their intervals (empty until complete)"
    )
