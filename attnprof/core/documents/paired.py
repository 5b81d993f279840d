"""The paired document, ``attnprof.paired/v1``: the interleaved rounds of a paired run
(docs/architecture.md, "The paired job").

A paired run profiles two source trees, the merge base (``base``: the comparison's baseline) and the head (the
candidate), on the same device and in the same time: per case, warm-up pairs until both sides' rounds agree, then
rounds of the two sides alternate in ABBA order (base then head, head then base, ...), each round timed as a profile
run times one, and stops once the paired round differences settle the answer or the case's planned pairs run out.
This document holds, per case, each pair's two round medians (microseconds) and SM clocks (MHz; null on CPU), the
order the pair ran in, whether it was set aside as disturbed (and why), the warm-up pairs and how the warm-up ended,
the pairs its budget allowed and what they cost (seconds of device time), and why the case stopped. Fields added
after the first documents have defaults that say how those were judged (no warm-up, the run's rule for every case,
one case per family). Each side's whole profile is an ``attnprof.result/v1`` document of its own (``base_run`` and
``head_run``); the head's is an ordinary run of its branch, the base's is evidence for this comparison only and
never joins a history.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from attnprof.core.documents.result import Mode

PAIRED_SCHEMA: Final = "attnprof.paired/v1"

# Why a case's rounds ended: the answer settled (slower, faster, same within the minimum effect), the rounds ran
# out with no answer (max_rounds; ``PairedCase.limit`` says whether its budget or the ceiling ended them), a side did
# not give a round (failed: see the sides' result documents), or both sides skipped the case (skipped: a backend this
# device does not have).
StoppedBy = Literal["slower", "faster", "same", "max_rounds", "failed", "skipped"]
# How a case's warm-up ended: both sides' last rounds agreed (steady), or the warm-up bound was spent first (bound).
WarmupEnd = Literal["steady", "bound"]
# What set the pairs a case could take: its device-time budget (with the floor), or the ceiling in pairs.
Limit = Literal["budget", "ceiling"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Pair(_Model):
    """One round of the merge base (the baseline) and one of the head (the candidate), run back to back."""

    order: Literal["AB", "BA"] = Field(description="AB: the base's round ran first; BA: the head's")
    base_us: float = Field(gt=0, description="median of the merge base's round (the baseline), microseconds")
    head_us: float = Field(gt=0, description="median of the head's round (the candidate), microseconds")
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
    max_pairs: int = Field(
        ge=2,
        description="pairs a case may count at most: the ceiling (a case's own plan, PairedCase.max_pairs, may be "
        "fewer: its budget)",
    )
    looks: list[int] = Field(
        description="pair counts at which the rule looks up to max_pairs (alpha is split evenly among them; a case "
        "with a plan of its own has its own looks, PairedCase.looks)"
    )
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
    family: int = Field(
        1,
        ge=1,
        description="cases the error of a change decision is split over (the run's cases): a case is called slower "
        "or faster at level 1 - alpha / (family x looks), so Benjamini-Hochberg across the cases confirms it; the "
        "same within the minimum effect at 1 - alpha / looks. 1 in documents without this field",
    )
    budget: float | None = Field(
        None,
        gt=0,
        description="a case's pairs, warm-up included, may take this many times the device time its rounds take in "
        "an unpaired profile (estimated from its own rounds); null: no device-time budget, every case may take "
        "max_pairs (--max-pairs, or documents without this field)",
    )
    floor_pairs: int | None = Field(
        None, ge=2, description="pairs a case may count whatever its budget; null: no budget"
    )
    warmup_rounds: int = Field(
        0,
        ge=0,
        description="warm-up rounds per side at most before a case's first pair (0: none, as in documents without "
        "this field)",
    )
    disturbed_factor: float | None = Field(
        None, gt=1, description="how far off the other pairs' mean ratio a pair must be to be set aside (a ratio)"
    )
    spread_prior: float | None = Field(
        None,
        ge=0,
        description="the pair spread (standard deviation of ln(head/base)) pooled into the set-aside test as a prior",
    )


class PairedCase(_Model):
    case: str
    min_effect: float = Field(ge=0, description="the minimum effect applied to this case (its thresholds win)")
    stopped_by: StoppedBy
    detail: str | None = Field(None, description="why the case stopped, in words")
    wall_s: float | None = Field(None, ge=0, description="wall time of the case's rounds, both sides, seconds")
    pairs: list[Pair] = Field(default_factory=list)
    warmup: list[Pair] = Field(
        default_factory=list,
        description="warm-up pairs, run as pairs before the first that counts until both sides' rounds agree; none "
        "joins the test",
    )
    warmup_end: WarmupEnd | None = Field(
        None,
        description="steady: each side's last warm-up rounds agreed within warmup_tolerance; bound: the warm-up "
        "bound was spent first and the pairs began anyway; null: no warm-up",
    )
    warmup_tolerance: float | None = Field(
        None, ge=0, description="the relative agreement of consecutive warm-up rounds that counts as steady"
    )
    max_pairs: int | None = Field(
        None, ge=2, description="pairs this case could count, planned after its warm-up; null: the rule's max_pairs"
    )
    looks: list[int] | None = Field(
        None, description="pair counts at which the rule looked for this case, planned with max_pairs"
    )
    limit: Limit | None = Field(
        None,
        description="what set max_pairs: budget (its device-time budget, at least the floor) or ceiling (the most "
        "pairs a case may take); null: the run's rule",
    )
    reference_s: float | None = Field(
        None,
        ge=0,
        description="device seconds the case's rounds take in an unpaired profile, estimated from its own rounds "
        "(each side's build and warm-up plus twice its timed round, after its first)",
    )
    budget_s: float | None = Field(None, ge=0, description="device seconds the case's budget allowed")
    spent_s: float | None = Field(
        None,
        ge=0,
        description="device seconds the case's pairs took, warm-up pairs included, its first pair (first builds) "
        "counted at the median of the others",
    )

    @property
    def counted(self) -> list[Pair]:
        """The pairs the test uses, in time order: all but those set aside as disturbed."""
        return [p for p in self.pairs if p.disturbed is None]


class PairedDocument(_Model):
    schema_: Literal["attnprof.paired/v1"] = Field(PAIRED_SCHEMA, alias="schema")
    mode: Mode
    base_run: str = Field(
        description="id of the result document of the merge base (the baseline; never stored as a run)"
    )
    head_run: str = Field(description="id of the result document of the head (the candidate; stored as the job's run)")
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
