"""The comparison document, ``attnprof.comparison/v1``: one candidate run against its baseline
(docs/architecture.md, "Documents").

Relative changes are fractions: ``change = (candidate - baseline) / baseline``, so 0.03 is 3% more of the
metric (slower for ``latency``, faster for ``bandwidth`` and ``throughput``). Units live in ``unit`` and in
field names (``_us`` microseconds).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

COMPARISON_SCHEMA: Final = "attnprof.comparison/v1"

Verdict = Literal["pass", "warn", "fail"]
Metric = Literal["latency", "bandwidth", "throughput", "variance", "dram_bytes", "backend", "accuracy", "status"]
FindingStatus = Literal["regressed", "improved", "unchanged", "inconclusive"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Interval(_Model):
    """A confidence interval on a relative change (fractions)."""

    low: float
    high: float
    level: float = Field(description="coverage, e.g. 0.95")


class FieldChange(_Model):
    """One launch or rate field of a kernel that differs between baseline and candidate."""

    field: str = Field(description="grid, block, registers_per_thread, shared_mem_bytes, ..., gbps, tflops")
    baseline: Any = None
    candidate: Any = None
    change: float | None = Field(None, description="relative change, for numeric fields")


class KernelMove(_Model):
    """A kernel whose time or launch changed, joined by ``key`` (and ``phase``) across the two sides."""

    key: str
    phase: str | None = None
    name: str | None = Field(None, description="as launched in the candidate (the baseline's if it vanished)")
    baseline_us: float | None = Field(
        None,
        description="per-iteration duration: the median of every baseline round's traced iterations (older "
        "documents: the median over baseline runs)",
    )
    candidate_us: float | None = Field(None, description="per-iteration duration in the candidate (median)")
    delta_us: float | None = Field(None, description="candidate_us - baseline_us")
    change: float | None = Field(None, description="relative change of the duration")
    ci: Interval | None = Field(
        None,
        description="interval of the relative change of the duration, from every round's traced iterations on both "
        "sides (rounds resampled); null where a side holds one round's reading only (an older document): its move is "
        "then named only when it is large against the case's own spread over its rounds",
    )
    appeared: bool = False
    vanished: bool = False
    launch: list[FieldChange] = Field(default_factory=list, description="grid, block, registers, ...")
    rates: list[FieldChange] = Field(default_factory=list, description="tflops, gbps, utilisations, DRAM bytes")


class Finding(_Model):
    case: str
    metric: Metric
    status: FindingStatus
    verdict: Verdict = Field(description="what this finding alone contributes to the verdict")
    baseline: float | str | None = None
    candidate: float | str | None = None
    unit: str | None = Field(None, description="us, GB/s, TFLOP/s, bytes, fraction (spread), ...")
    change: float | None = Field(None, description="(candidate - baseline) / baseline")
    higher_is_better: bool | None = None
    threshold: float | None = Field(None, description="minimum relative change applied to this finding")
    ci: Interval | None = None
    p: float | None = None
    q: float | None = Field(None, description="Benjamini-Hochberg adjusted p over the whole comparison")
    detail: str | None = Field(None, description="why, in words")
    rounds: int | None = Field(None, description="paired comparisons: the pairs of rounds the test used")
    set_aside: int | None = Field(
        None,
        ge=1,
        description="paired comparisons: pairs of rounds set aside as disturbed (far out of line with the case's "
        "other pairs) and run again, not among those the test used; null: none",
    )
    stopped_by: str | None = Field(
        None, description="paired comparisons: slower, faster, same, max_rounds (ambiguous), failed or skipped"
    )
    limit: Literal["budget", "ceiling"] | None = Field(
        None,
        description="paired comparisons, ambiguous: what ended the case's pairs, its device-time budget (budget) or "
        "the most pairs a case may take (ceiling); null otherwise and in documents without this field",
    )
    more_rounds: int | None = Field(
        None, description="paired comparisons, ambiguous: about how many more pairs of rounds would settle it"
    )
    cycles_change: float | None = Field(
        None, description="paired comparisons on CUDA: the change of time x SM clock (cycles), so clock drift cancels"
    )
    kernels: list[KernelMove] = Field(default_factory=list, description="for timing findings: what moved")


class SoftwareChange(_Model):
    name: str
    baseline: str | None = Field(
        None,
        description="value(s) in the baseline runs, joined by ' | ' if several; 'not recorded' where a run lacks it",
    )
    candidate: str | None = None


class Summary(_Model):
    cases: int = Field(description="cases in the candidate")
    compared: int = Field(description="cases with a baseline")
    findings: int
    regressed: int
    improved: int
    unchanged: int
    inconclusive: int
    fail: int = Field(description="findings that fail the comparison")
    warn: int = Field(description="findings that warn")


class ComparisonSettings(_Model):
    """How the comparison was decided, so that it can be reproduced (the document's ``settings``)."""

    mode: str = Field(description="cuda or cpu: which defaults applied")
    thresholds: dict[str, float] = Field(description="minimum relative effects per metric (before case overrides)")
    fdr: float = Field(description="false-discovery level of the Benjamini-Hochberg procedure")
    noise_floor: float = Field(description="relative run-to-run spread of unchanged code")
    noise_floor_source: Literal["argument", "default"]
    prior_runs: int = Field(description="weight of the noise floor, in baseline runs, when pooling")
    ci_level: float
    bootstrap: int = Field(description="bootstrap replicates behind each interval")
    seed: int
    precedence: str = Field(description="order in which threshold sources override one another")


class PairedInfo(_Model):
    """How a paired comparison was made (``mode: paired``): the merge base (the baseline) and the head (the
    candidate) interleaved on one device."""

    base_run: str = Field(
        description="id of the merge base's result document (the baseline): evidence here, never a stored run"
    )
    rounds: int = Field(description="pairs of rounds over all cases")
    max_pairs: int = Field(description="pairs a case may take at most (its budget may allow fewer)")
    min_effect: float = Field(description="minimum relative change of latency (before case overrides)")
    alpha: float = Field(description="two-sided error level of each case's sequence of looks")
    isolation: str = Field(description="how the two trees were kept apart")
    stopped: dict[str, int] = Field(description="cases by stopping reason")
    wall_s: float | None = Field(None, description="wall time of the paired run, seconds")
    family: int | None = Field(
        None,
        description="cases alpha is split over for a change (a case's change is called at alpha / family per look); "
        "null in documents without this field (1)",
    )
    budget: float | None = Field(
        None,
        description="a case's pairs, warm-up included, may take this many times the device time of its rounds in an "
        "unpaired profile (within a floor and max_pairs); null: max_pairs alone",
    )


class ComparisonDocument(_Model):
    schema_: Literal["attnprof.comparison/v1"] = Field(COMPARISON_SCHEMA, alias="schema")
    mode: Literal["history", "paired"] = Field(
        "history",
        description="history: the candidate against stored baseline runs; paired: the candidate (the head) against "
        "one baseline (the merge base), both profiled interleaved on one device in the same run",
    )
    verdict: Verdict
    baseline: list[str] | None = Field(description="ids of the pooled baseline runs; null when there was none")
    candidate: str = Field(description="id of the candidate run")
    testbed_baseline: list[str] = Field(default_factory=list, description="distinct testbed keys of the baselines")
    testbed_candidate: str
    testbed_mismatch: bool = False
    software: list[SoftwareChange] = Field(default_factory=list, description="versions that differ")
    suspect: list[str] | None = Field(None, description="why the candidate's numbers are doubtful, if they are")
    notes: list[str] = Field(default_factory=list, description="why the verdict is what it is, beyond findings")
    findings: list[Finding] = Field(default_factory=list)
    summary: Summary
    settings: ComparisonSettings
    paired: PairedInfo | None = Field(None, description="for mode paired: the rounds and how they stopped")

    def to_json(self, *, indent: int | None = 2) -> str:
        return self.model_dump_json(by_alias=True, indent=indent)


def comparison_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``attnprof.comparison/v1``."""
    schema = ComparisonDocument.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://attnprof.dev/schemas/" + COMPARISON_SCHEMA
    return schema
