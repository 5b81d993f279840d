"""Change points over a chronological series of result documents (the default branch's history)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from attnprof.core.analysis.edivisive import e_divisive
from attnprof.core.analysis.errors import AnalysisError
from attnprof.core.analysis.kernels import dram_pair
from attnprof.core.analysis.stats import log_samples, spread_stat
from attnprof.core.documents.result import Case, ResultDocument

METRICS: dict[str, str] = {
    "latency": "us",
    "bandwidth": "GB/s",
    "throughput": "TFLOP/s",
    "variance": "fraction",
    "dram_bytes": "bytes",
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChangePointRecord(_Model):
    """A change point in one case's series, tied to the run where the new level starts."""

    index: int = Field(description="position of that run in the series given (0-based)")
    run_id: str
    created_at: str
    mean_before: float = Field(description="mean of the metric over the segment before, in the case's unit")
    mean_after: float = Field(description="mean over the segment from index on")
    change: float | None = Field(description="mean_after / mean_before - 1")
    p: float = Field(description="permutation p-value")
    regression: bool = Field(description="the change is in the metric's bad direction")


class CaseChangepoints(_Model):
    case: str
    unit: str
    length: int = Field(description="runs in which the case has a value")
    points: list[ChangePointRecord] = Field(default_factory=list)


class ChangepointReport(_Model):
    metric: str
    runs: list[str] = Field(description="run ids in the order given")
    alpha: float
    permutations: int
    min_size: int
    seed: int
    cases: list[CaseChangepoints] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    def to_json(self, *, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)


def _value(case: Case, metric: str) -> float | None:
    """The metric's value for one run of a case, or ``None`` when it did not run or lacks the data."""
    if case.status != "ok" or case.latency_us is None:
        return None
    lat = case.latency_us
    if metric == "latency":
        return lat.median
    if metric == "variance":
        s = spread_stat(log_samples(lat.samples))
        return None if s is None else math.exp(s.value)
    if metric == "dram_bytes":
        pair = dram_pair([case.kernels], case.kernels)
        return None if pair is None else pair[1]
    achieved = case.achieved
    if achieved is None:
        return None
    return achieved.gbps if metric == "bandwidth" else achieved.tflops


def changepoints(
    series: Sequence[ResultDocument],
    *,
    metric: str = "latency",
    case: str | None = None,
    alpha: float = 0.01,
    permutations: int = 99,
    min_size: int = 5,
    seed: int = 0,
) -> ChangepointReport:
    """E-divisive change points per case over ``series`` (result documents in chronological order).

    ``metric``: latency (median, microseconds), bandwidth (GB/s), throughput (TFLOP/s), variance (spread,
    a fraction) or dram_bytes (per iteration, with counters). ``case`` restricts the search to one case
    id. Runs where a case failed or lacks the metric are left out of that case's series. Deterministic for
    a ``seed``. Raises ``AnalysisError`` on an empty series, an unknown metric or case.
    """
    if metric not in METRICS:
        raise AnalysisError(f"unknown metric {metric!r}; one of: {', '.join(METRICS)}")
    if not series:
        raise AnalysisError("no result documents: a change-point search needs a series of runs")
    ids = list(dict.fromkeys(c.id for doc in series for c in doc.cases))
    if case is not None:
        if case not in ids:
            raise AnalysisError(f"case {case!r} is in none of the {len(series)} documents")
        ids = [case]
    report = ChangepointReport(
        metric=metric,
        runs=[d.run.id for d in series],
        alpha=alpha,
        permutations=permutations,
        min_size=min_size,
        seed=seed,
    )
    keys = list(dict.fromkeys(d.environment.testbed_key for d in series))
    if len(keys) > 1:
        report.notes.append(
            f"the series spans {len(keys)} testbeds ({', '.join(keys)}): a change point may be a move "
            "between testbeds rather than a change of the code"
        )
    higher_is_better = metric in ("bandwidth", "throughput")
    for case_id in ids:
        points: list[tuple[int, float]] = []
        for i, doc in enumerate(series):
            c = doc.case(case_id)
            v = _value(c, metric) if c is not None else None
            if v is not None and math.isfinite(v):
                points.append((i, v))
        values = np.array([v for _, v in points], dtype=np.float64)
        found = (
            e_divisive(values, alpha=alpha, permutations=permutations, min_size=min_size, seed=seed)
            if values.size >= 2 * min_size
            else []
        )
        records = []
        for cp in found:
            at = points[cp.index][0]
            run = series[at].run
            bad = cp.mean_after < cp.mean_before if higher_is_better else cp.mean_after > cp.mean_before
            records.append(
                ChangePointRecord(
                    index=at,
                    run_id=run.id,
                    created_at=run.created_at.isoformat(),
                    mean_before=cp.mean_before,
                    mean_after=cp.mean_after,
                    change=cp.change,
                    p=cp.p,
                    regression=bad,
                )
            )
        report.cases.append(CaseChangepoints(case=case_id, unit=METRICS[metric], length=len(points), points=records))
    return report
