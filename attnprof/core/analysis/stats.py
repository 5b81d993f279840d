"""The statistics behind a comparison: per-run statistics, the hierarchical test, intervals, FDR.

Everything works on the natural log of latencies (microseconds), so relative changes are differences and
scaling every time by a constant changes nothing. A run is summarised by a statistic with a within-run
sampling distribution (the median: its exact bootstrap distribution; the spread: a delta-method normal);
runs then differ from one another by a run-level offset whose variance is the between-run variance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class RunStat:
    """One run's statistic (on the log scale) and its within-run sampling distribution."""

    value: float
    within_var: float
    support: FloatArray  # values the bootstrapped statistic can take
    weights: FloatArray  # their probabilities; empty for a normal approximation

    def draw(self, rng: np.random.Generator, size: int) -> FloatArray:
        """Draws of the statistic from its within-run sampling distribution."""
        row: FloatArray = draw_runs([self], rng, size)[0]
        return row


def _cdf(weights: FloatArray) -> FloatArray:
    # What Generator.choice(p=weights) inverts: the same cumulative sums, so the draws are the same too.
    cdf = weights.cumsum()
    cdf /= cdf[-1]
    return cdf


def draw_runs(runs: Sequence[RunStat], rng: np.random.Generator, size: int) -> FloatArray:
    """Draws of each run's statistic from its sampling distribution: one row of ``size`` per run.

    Runs of one kind (all bootstrapped, or all normal) take one call of the generator for all their draws; the
    stream is consumed in the order of ``runs``, exactly as one ``draw`` per run would consume it, so the rows are
    the same as those of ``[r.draw(rng, size) for r in runs]`` (``Generator.choice`` with ``p`` draws uniforms and
    inverts the cumulative weights, which is what happens here).
    """
    out = np.empty((len(runs), size), dtype=np.float64)
    if not runs:
        return out
    if all(r.weights.size for r in runs):
        uniforms = rng.random((len(runs), size))
        for i, r in enumerate(runs):
            out[i] = r.support[_cdf(r.weights).searchsorted(uniforms[i], side="right")]
    elif not any(r.weights.size for r in runs):
        values = np.array([r.value for r in runs])[:, None]
        sds = np.sqrt(np.array([r.within_var for r in runs]))[:, None]
        out[:] = values + sds * rng.standard_normal((len(runs), size))
    else:
        for i, r in enumerate(runs):
            out[i] = draw_runs([r], rng, size)[0]
    return out


def log_samples(samples_us: list[float] | FloatArray) -> FloatArray:
    """Natural log of latency samples (microseconds); zeros are clipped to 1 ps so the log exists."""
    x = np.asarray(samples_us, dtype=np.float64)
    return np.log(np.maximum(x, 1e-6))


def median_stat(log_x: FloatArray) -> RunStat:
    """The median of one run's log samples and its exact bootstrap distribution.

    The bootstrap median of n samples is an order statistic: it lies at or below the j-th smallest sample
    exactly when at least k = ceil(n/2) of the n draws do, a binomial event. So its distribution, and the
    within-run variance of the median, need no resampling at all (O(n) after a sort).
    """
    xs = np.sort(log_x)
    n = xs.size
    if n == 0:
        raise ValueError("no samples")
    half = n // 2
    value = float(xs[half]) if n % 2 else float((xs[half - 1] + xs[half]) / 2.0)
    if n == 1:
        return RunStat(value, 0.0, xs, np.ones(1))
    pmf = _median_pmf(n)
    mean = float(pmf @ xs)
    var = float(pmf @ (xs - mean) ** 2)
    return RunStat(value, var, xs, pmf)


def spread_stat(log_x: FloatArray) -> RunStat | None:
    """Log of the mean absolute deviation of log samples from their median (a relative spread).

    Returns ``None`` when the run has fewer than 5 samples or no spread at all. The within-run variance is
    the delta-method variance of the log of a mean: var(z) / (n mean(z)^2).
    """
    n = log_x.size
    if n < 5:
        return None
    z = np.abs(log_x - _median(log_x))
    m = float(z.mean())
    if m <= 0.0:
        return None
    var = float(z.var(ddof=1)) / (n * m * m)
    return RunStat(float(np.log(m)), var, np.empty(0), np.empty(0))


@lru_cache(maxsize=256)
def _median_pmf(n: int) -> FloatArray:
    """P(bootstrap median of n samples = the j-th smallest), j = 1..n. It depends on n alone, and runs of a
    suite mostly share a sample count: computed once per n (read-only)."""
    k = (n + 1) // 2
    from scipy import stats as sps  # here: SciPy takes a second to import, and a profiling process never needs it

    cdf = sps.binom.sf(k - 1, n, np.arange(1, n + 1) / n)
    pmf = np.diff(np.concatenate(([0.0], cdf)))
    pmf = np.clip(pmf, 0.0, None)
    pmf /= pmf.sum()
    pmf.setflags(write=False)
    return pmf


@dataclass(frozen=True)
class TestResult:
    """A hierarchical comparison of a candidate run with k baseline runs, on the log scale."""

    diff: float  # candidate minus baseline level
    se: float
    df: float
    p: float  # two-sided
    between_sd: float  # run-to-run standard deviation used (pooled with the prior)
    baseline_range: float  # max - min of the baseline runs' statistics


def hierarchical_test(baseline: list[RunStat], candidate: RunStat, *, prior_sd: float, prior_runs: int) -> TestResult:
    """Test candidate against pooled baseline runs with the between-run variance in the error term.

    The baseline level is the mean of its runs' statistics. A single candidate run carries its own run
    offset, so the difference has variance tau^2 (1 + 1/k) plus the within-run variances. tau^2 pools the
    observed between-run variance (method of moments: variance of the run statistics less their mean
    within-run variance, k - 1 degrees of freedom) with the prior run-to-run variance ``prior_sd``^2 worth
    ``prior_runs - 1`` degrees of freedom, as in a moderated t-test; the reference distribution is Student's
    t with the pooled degrees of freedom.
    """
    k = len(baseline)
    values = np.array([b.value for b in baseline])
    within = np.array([b.within_var for b in baseline])
    prior_df = max(prior_runs - 1, 0)
    obs_df = k - 1
    observed = 0.0
    if obs_df > 0:
        observed = max(float(values.var(ddof=1)) - float(within.mean()), 0.0)
    total_df = prior_df + obs_df
    tau2 = (prior_df * prior_sd**2 + obs_df * observed) / total_df if total_df > 0 else 0.0
    diff = candidate.value - float(values.mean())
    var = tau2 * (1.0 + 1.0 / k) + candidate.within_var + float(within.sum()) / k**2
    se = float(np.sqrt(var))
    df = float(max(total_df, 1))
    # Zero variance (identical constant runs, no noise floor): any difference at all is certain.
    # special.stdtr(df, -t) is what scipy.stats.t.sf(t, df) computes, without its argument checking (~0.2 ms).
    from scipy import special

    p = (1.0 if diff == 0.0 else 0.0) if se <= 0.0 else float(2.0 * special.stdtr(df, -abs(diff) / se))
    spread = float(values.max() - values.min()) if k > 1 else 0.0
    return TestResult(diff, se, df, min(p, 1.0), float(np.sqrt(tau2)), spread)


def bootstrap_diffs(
    baseline: list[RunStat],
    candidate: RunStat,
    test: TestResult,
    *,
    rng: np.random.Generator,
    replicates: int,
) -> FloatArray:
    """Hierarchical bootstrap replicates of the candidate-minus-baseline difference (log scale).

    Samples level: each run's statistic is drawn from its within-run bootstrap distribution. Runs level:
    one run offset for the candidate and the mean offset of k baseline runs, drawn together as a scaled
    Student t with the pooled between-run standard deviation, because one to three runs are too few to
    resample and a single candidate run cannot show its own offset.
    """
    k = len(baseline)
    draws = draw_runs([*baseline, candidate], rng, replicates)
    base = np.zeros(replicates)
    for row in draws[:k]:
        base += row
    base /= k
    cand = draws[k]
    offsets = test.between_sd * np.sqrt(1.0 + 1.0 / k) * rng.standard_t(test.df, replicates)
    return np.asarray(cand - base + offsets, dtype=np.float64)


def percentile_interval(draws: FloatArray, level: float) -> tuple[float, float]:
    """Equal-tailed percentile interval of ``draws`` at coverage ``level``.

    ``np.quantile(draws, [tail, 1 - tail])`` (its default, linear method), computed from a partition at the four
    order statistics it interpolates between and with its interpolation formula, so the bounds are the same to
    the last bit; without its generic machinery, which cost more than the partition for one case's draws.
    """
    tail = (1.0 - level) / 2.0
    n = draws.size
    virtual = (n - 1) * np.array([tail, 1.0 - tail])
    below = np.floor(virtual)
    gamma = virtual - below
    lo = np.minimum(below.astype(np.intp), n - 1)
    hi = np.minimum(lo + 1, n - 1)
    part = np.partition(draws, np.unique(np.concatenate((lo, hi))))
    a, b = part[lo], part[hi]
    diff = b - a
    bounds = np.where(gamma >= 0.5, b - diff * (1.0 - gamma), a + diff * gamma)
    return float(bounds[0]), float(bounds[1])


def _median(x: FloatArray) -> float:
    """``np.median(x)`` of a non-empty array without NaNs: the middle order statistic, or the mean of the two."""
    n = x.size
    half = n // 2
    if n % 2:
        return float(np.partition(x, half)[half])
    part = np.partition(x, [half - 1, half])
    return float((part[half - 1] + part[half]) / 2.0)


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order: ``scipy.stats.false_discovery_control``
    (its default ``method="bh"``), as plain floats."""
    if not p_values:
        return []
    from scipy import stats as sps

    return [float(q) for q in sps.false_discovery_control(np.asarray(p_values, dtype=np.float64), method="bh")]
