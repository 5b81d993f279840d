"""Per-case statistical findings: timing (latency, bandwidth or throughput), variance, DRAM bytes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnprof.core.analysis.config import PRIOR_RUNS, RANGE_TO_SD, SPREAD_RUN_SD, Resolved
from attnprof.core.analysis.kernels import case_spread, dram_pair, kernel_moves
from attnprof.core.analysis.stats import (
    RunStat,
    TestResult,
    bootstrap_diffs,
    hierarchical_test,
    log_samples,
    median_stat,
    percentile_interval,
    spread_stat,
)
from attnprof.core.documents.comparison import Finding, FindingStatus, Interval, Verdict
from attnprof.core.documents.result import Case, LatencyStats, Mode
from attnprof.core.rounds import Levels, round_levels, round_slices
from attnprof.core.units import fmt_duration_us

CI_LEVEL = 0.95
BOOTSTRAP_REPLICATES = 2000


@dataclass
class Tested:
    """A finding whose status waits for its q-value (Benjamini-Hochberg over the whole comparison)."""

    finding: Finding
    minimum: float  # effective minimum relative change of the finding's metric
    regression_verdict: Verdict  # what a regression contributes: fail for timing, warn for variance


@dataclass(frozen=True)
class Context:
    mode: Mode
    noise_floor: float  # relative range of run medians of unchanged code
    rng: np.random.Generator


def _timed(cases: Sequence[Case]) -> list[Case]:
    return [c for c in cases if c.status == "ok" and c.latency_us is not None and c.latency_us.samples]


def _naming(base: Sequence[Case], cand: Case) -> tuple[str, str, float | None]:
    """(metric, unit, work per iteration) by what the case is bound by; latency when work is unknown."""
    bounds = [c.achieved.bound for c in [*reversed(base), cand] if c.achieved and c.achieved.bound]
    bound = bounds[0] if bounds else None
    work = cand.work
    if bound == "memory" and work is not None and work.bytes_min > 0:
        return "bandwidth", "GB/s", work.bytes_min / 1e9
    if bound == "compute" and work is not None and work.flops > 0:
        return "throughput", "TFLOP/s", work.flops / 1e12
    return "latency", "us", None


def _rate(latency_us: float, work: float | None) -> float:
    if work is None:
        return latency_us
    return work / (latency_us * 1e-6)


def timing_finding(case_id: str, base_cases: Sequence[Case], cand: Case, th: Resolved, ctx: Context) -> Tested | None:
    """The timing finding of one case, or ``None`` when a side has no latency samples."""
    base = _timed(base_cases)
    if not base or not _timed([cand]):
        return None
    assert cand.latency_us is not None
    base_levels = [round_levels(c.latency_us) for c in base]
    cand_levels = round_levels(cand.latency_us)
    base_stats = [run_median(c.latency_us, lv) for c, lv in zip(base, base_levels, strict=True) if c.latency_us]
    cand_stat = run_median(cand.latency_us, cand_levels)
    test = hierarchical_test(base_stats, cand_stat, prior_sd=ctx.noise_floor / RANGE_TO_SD, prior_runs=PRIOR_RUNS)
    draws = bootstrap_diffs(base_stats, cand_stat, test, rng=ctx.rng, replicates=BOOTSTRAP_REPLICATES)
    low, high = percentile_interval(draws, CI_LEVEL)
    metric, unit, work = _naming(base, cand)
    base_us = math.exp(float(np.mean([s.value for s in base_stats])))
    cand_us = math.exp(cand_stat.value)
    if work is None:
        change, ci = math.expm1(test.diff), (math.expm1(low), math.expm1(high))
    else:
        # A rate is work over time: its relative change is the reciprocal of the latency ratio.
        change, ci = math.expm1(-test.diff), (math.expm1(-high), math.expm1(-low))
    minimum = max(th.minimum(metric), ctx.noise_floor, math.expm1(test.baseline_range))
    level_runs = sum(lv is not None for lv in base_levels)
    kernels = kernel_moves(
        [c.kernels for c in base], cand.kernels, case_us=base_us, case_spread=case_spread([*base, cand])
    )
    finding = Finding(
        case=case_id,
        metric=metric,
        status="unchanged",
        verdict="pass",
        baseline=_rate(base_us, work),
        candidate=_rate(cand_us, work),
        unit=unit,
        change=change,
        higher_is_better=work is not None,
        threshold=minimum,
        ci=Interval(low=ci[0], high=ci[1], level=CI_LEVEL),
        p=test.p,
        detail=_timing_detail(len(base), test, ctx.noise_floor, base_us, cand_us)
        + _levels_detail(level_runs, cand_levels),
        kernels=kernels,
    )
    return Tested(finding, minimum, "fail")


LEVEL_REPLICATES = 1000  # round-bootstrap replicates for a run whose rounds landed on levels
LEVEL_SEED = 20261203  # their own generator: the comparison's draws for every finding stay as they were


def run_median(latency: LatencyStats, levels: Levels | None) -> RunStat:
    """A run's median (log scale) and its sampling distribution within the run (``levels``: its rounds', if any).

    Its samples are not independent where its rounds landed on levels (``attnprof.core.rounds``): the case was built
    again for each round, and each build ran at one of a few speeds, so the median depends on which levels the rounds
    drew as much as on the samples. There the rounds are resampled with replacement (``LEVEL_REPLICATES`` times, from
    a generator of their own with a fixed seed) and the median of the pooled samples taken again, as a cluster
    bootstrap does: that distribution replaces the samples' exact one when it is wider. The hierarchical test then
    carries it like any within-run variance (for one candidate and k baselines alike), and a change that another draw
    of levels could make is not confirmed: past the minimum it is ``inconclusive`` and warns. Elsewhere the exact
    bootstrap of the samples' median is used, as before.
    """
    logs = log_samples(latency.samples)
    stat = median_stat(logs)
    slices = round_slices(latency) if levels is not None else None
    if slices is None:
        return stat
    rounds = [log_samples(r) for r in slices]
    picks = np.random.default_rng(LEVEL_SEED).integers(0, len(rounds), size=(LEVEL_REPLICATES, len(rounds)))
    medians = np.sort([float(np.median(np.concatenate([rounds[i] for i in row]))) for row in picks])
    var = float(medians.var(ddof=1))
    if var <= stat.within_var:
        return stat
    return RunStat(stat.value, var, medians, np.full(medians.size, 1.0 / medians.size))


def _levels_detail(runs: int, cand: Levels | None) -> str:
    if not runs and cand is None:
        return ""
    who = [f"{runs} baseline run(s)"] if runs else []
    if cand is not None:
        who.append(f"the candidate ({cand.describe().split(':')[0]})")
    return (
        f"; the rounds of {' and '.join(who)} landed on levels: their medians' precision comes from resampling their "
        "rounds, so a change that another draw of levels could make is not confirmed"
    )


def _timing_detail(k: int, test: TestResult, floor: float, base_us: float, cand_us: float) -> str:
    source = "the noise floor alone" if k < 2 else f"{k} runs pooled with the noise floor"
    return (
        f"median {fmt_duration_us(base_us, ascii=True)} -> {fmt_duration_us(cand_us, ascii=True)}; "
        f"{k} baseline run(s); run-to-run sd "
        f"{math.expm1(test.between_sd):.2%} from {source} ({floor:.1%} range); t-test on {test.df:g} df"
    )


def variance_finding(case_id: str, base_cases: Sequence[Case], cand: Case, th: Resolved, ctx: Context) -> Tested | None:
    """The spread finding of one case (a change of spread alone only ever warns), or ``None``."""
    base = _timed(base_cases)
    if not base or not _timed([cand]):
        return None
    assert cand.latency_us is not None
    spreads = [spread_stat(log_samples(c.latency_us.samples)) for c in base if c.latency_us]
    cand_spread = spread_stat(log_samples(cand.latency_us.samples))
    base_stats: list[RunStat] = [s for s in spreads if s is not None]
    if cand_spread is None or len(base_stats) != len(spreads):
        return None
    test = hierarchical_test(base_stats, cand_spread, prior_sd=SPREAD_RUN_SD[ctx.mode], prior_runs=PRIOR_RUNS)
    draws = bootstrap_diffs(base_stats, cand_spread, test, rng=ctx.rng, replicates=BOOTSTRAP_REPLICATES)
    low, high = percentile_interval(draws, CI_LEVEL)
    base_level = math.exp(float(np.mean([s.value for s in base_stats])))
    minimum = max(th.variance, math.expm1(test.baseline_range))
    finding = Finding(
        case=case_id,
        metric="variance",
        status="unchanged",
        verdict="pass",
        baseline=base_level,
        candidate=math.exp(cand_spread.value),
        unit="fraction",
        change=math.expm1(test.diff),
        higher_is_better=False,
        threshold=minimum,
        ci=Interval(low=math.expm1(low), high=math.expm1(high), level=CI_LEVEL),
        p=test.p,
        detail="spread = mean absolute deviation of log latency from the run median (~ relative)",
    )
    return Tested(finding, minimum, "warn")


def dram_finding(case_id: str, base_cases: Sequence[Case], cand: Case, th: Resolved) -> Finding | None:
    """More DRAM bytes per iteration (ncu counters on both sides), whatever the time did; else ``None``."""
    base = [c for c in base_cases if c.status == "ok"]
    if cand.status != "ok" or not base:
        return None
    pair = dram_pair([c.kernels for c in base], cand.kernels)
    if pair is None or pair[0] <= 0:
        return None
    before, after, counted = pair
    change = (after - before) / before
    status: FindingStatus = "unchanged"
    if change >= th.dram_bytes:
        status = "regressed"
    elif change <= -th.dram_bytes:
        status = "improved"
    return Finding(
        case=case_id,
        metric="dram_bytes",
        status=status,
        verdict="fail" if status == "regressed" else "pass",
        baseline=before,
        candidate=after,
        unit="bytes",
        change=change,
        higher_is_better=False,
        threshold=th.dram_bytes,
        detail=f"dram__bytes_read.sum + dram__bytes_write.sum over {counted} kernel(s) counted on both sides",
    )


def decide(tested: Tested, q: float, fdr: float) -> Finding:
    """Set status and verdict from the q-value and the effective minimum effect."""
    f = tested.finding
    f.q = q
    change = f.change or 0.0
    bad = change < 0 if f.higher_is_better else change > 0
    big = abs(change) >= tested.minimum
    if big and q <= fdr:
        f.status = "regressed" if bad else "improved"
        f.verdict = tested.regression_verdict if bad else "pass"
    elif big:
        f.status = "inconclusive"
        # A slowdown past the minimum that the noise cannot confirm is worth a look, never a failure.
        f.verdict = "warn" if bad and tested.regression_verdict == "fail" else "pass"
    else:
        f.status = "unchanged"
        f.verdict = "pass"
    return f
