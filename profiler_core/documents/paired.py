"""The paired document, ``attnprof.paired/v1``: the interleaved rounds of a paired A/B run (DESIGN 1, 5).

A paired run profiles two source trees, the merge base (``base``) and the head, on the same device and in the
same time: per case, rounds of the two sides alternate in ABBA order (base then head, head then base, ...), each
round timed as a profile run times one, and stops once the paired round differences settle the answer or the
rounds run out. This document holds, per case, each pair's two round medians (microseconds) and SM clocks
(MHz; null on CPU), the order the pair ran in, whether it was set aside as disturbed (and why), and why the case
stopped. Each side's whole profile is an ``attnprof.result/v1`` document of its own (``base_run`` and
``head_run``); the head's is an ordinary run of its branch, the base's is evidence for this comparison only and
never joins a history.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from profiler_core.documents.result import Mode

PAIRED_SCHEMA: Final = "attnprof.paired/v1"

# Why a case's rounds ended: the answer settled (slower, faster, same within the minimum effect), the rounds ran
# out with no answer (max_rounds), a side did not give a round (failed: see the sides' result documents), or both
# sides skipped the case (skipped: a backend this device does not have).
StoppedBy = Literal["slower", "faster", "same", "max_rounds", "failed", "skipped"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Pair(_Model):
    """One base round and one head round, run back to back."""

    order: Literal["AB", "BA"] = Field(description="AB: the base's round ran first; BA: the head's")
    base_us: float = Field(gt=0, description="median of the base round's samples, microseconds")
    head_us: float = Field(gt=0, description="median of the head round's samples, microseconds")
    base_mhz: float | None = Field(None, gt=0, description="median SM clock over the base round (CUDA), MHz")
    head_mhz: float | None = Field(None, gt=0, description="median SM clock over the head round (CUDA), MHz")
    base_samples: int = Field(ge=1, description="timed iterations in the base round")
    head_samples: int = Field(ge=1, description="timed iterations in the head round")
    disturbed: str | None = Field(
        None,
        description="why the pair was set aside as disturbed, in words: its ratio far out of line with the case's "
        "other pairs; it joins no statistic and a pair run after it takes its place. Null: the pair counts",
    )


class PairedRule(_Model):
    """The sequential rule that stopped the rounds (and that the comparison applies again to the pairs)."""

    min_effect: float = Field(ge=0, description="minimum relative change of latency, before case overrides")
    alpha: float = Field(gt=0, lt=1, description="two-sided error level of the whole sequence of looks, per case")
    min_pairs: int = Field(ge=2, description="pairs before the first look")
    max_pairs: int = Field(ge=2, description="pairs at most")
    looks: list[int] = Field(description="pair counts at which the rule looks (alpha is split evenly among them)")
    trim: float = Field(
        0.0,
        ge=0,
        lt=0.25,
        description="fraction of the pairs set aside at each end before the interval on their location (Yuen's "
        "trimmed-mean t; 0: Student's t on the mean, as documents without this field were judged)",
    )
    samples_per_round: str = Field(description="how a round's samples are chosen, in words")
    max_set_aside: int = Field(
        0,
        ge=0,
        description="disturbed pairs a case may set aside, each replaced by one more pair (so a case takes at most "
        "max_pairs + max_set_aside pairs); 0 in documents without this field, whose pairs all count",
    )


class PairedCase(_Model):
    case: str
    min_effect: float = Field(ge=0, description="the minimum effect applied to this case (its thresholds win)")
    stopped_by: StoppedBy
    detail: str | None = Field(None, description="why the case stopped, in words")
    wall_s: float | None = Field(None, ge=0, description="wall time of the case's rounds, both sides, seconds")
    pairs: list[Pair] = Field(default_factory=list)

    @property
    def counted(self) -> list[Pair]:
        """The pairs the test uses, in time order: all but those set aside as disturbed."""
        return [p for p in self.pairs if p.disturbed is None]


class PairedDocument(_Model):
    schema_: Literal["attnprof.paired/v1"] = Field(PAIRED_SCHEMA, alias="schema")
    mode: Mode
    base_run: str = Field(description="id of the base side's result document (never stored as a run)")
    head_run: str = Field(description="id of the head side's result document (stored as the job's run)")
    isolation: Literal["processes"] = Field(
        "processes",
        description="how the two trees were kept apart: one process per side, each importing its own tree only",
    )
    rule: PairedRule
    cases: list[PairedCase] = Field(default_factory=list)
    wall_s: float | None = Field(None, ge=0, description="wall time of the whole paired run, seconds")

    def to_json(self, *, indent: int | None = 2) -> str:
        return self.model_dump_json(by_alias=True, indent=indent)

    def case(self, case_id: str) -> PairedCase | None:
        return next((c for c in self.cases if c.case == case_id), None)


def paired_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``attnprof.paired/v1``."""
    schema = PairedDocument.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://attnprof.dev/schemas/" + PAIRED_SCHEMA
    return schema
