"""The statistics behind a comparison: per-run statistics, the hierarchical test, intervals, FDR.

Everything works on the natural log of latencies (microseconds), so relative changes are differences and
scaling every time by a constant changes nothing. A run is summarised by a statistic with a within-run
sampling distribution (the median: its exact bootstrap distribution; the spread: a delta-method normal);
runs then differ from one another by a run-level offset whose variance is the between-run variance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps

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
        if self.weights.size:
            return np.asarray(rng.choice(self.support, size=size, p=self.weights), dtype=np.float64)
        return np.asarray(self.value + np.sqrt(self.within_var) * rng.standard_normal(size), dtype=np.float64)


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
    value = float(np.median(xs))
    if n == 1:
        return RunStat(value, 0.0, xs, np.ones(1))
    k = (n + 1) // 2
    cdf = sps.binom.sf(k - 1, n, np.arange(1, n + 1) / n)
    pmf = np.diff(np.concatenate(([0.0], cdf)))
    pmf = np.clip(pmf, 0.0, None)
    pmf /= pmf.sum()
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
    z = np.abs(log_x - np.median(log_x))
    m = float(z.mean())
    if m <= 0.0:
        return None
    var = float(z.var(ddof=1)) / (n * m * m)
    return RunStat(float(np.log(m)), var, np.empty(0), np.empty(0))


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
    p = (1.0 if diff == 0.0 else 0.0) if se <= 0.0 else float(2.0 * sps.t.sf(abs(diff) / se, df))
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
    base = np.zeros(replicates)
    for run in baseline:
        base += run.draw(rng, replicates)
    base /= k
    cand = candidate.draw(rng, replicates)
    offsets = test.between_sd * np.sqrt(1.0 + 1.0 / k) * rng.standard_t(test.df, replicates)
    return np.asarray(cand - base + offsets, dtype=np.float64)


def percentile_interval(draws: FloatArray, level: float) -> tuple[float, float]:
    """Equal-tailed percentile interval of ``draws`` at coverage ``level``."""
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(draws, [tail, 1.0 - tail])
    return float(low), float(high)


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order."""
    m = len(p_values)
    if m == 0:
        return []
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p)
    ranked = p[order] * m / np.arange(1, m + 1)
    q_sorted = np.minimum.accumulate(ranked[::-1])[::-1]
    q = np.empty(m)
    q[order] = np.clip(q_sorted, 0.0, 1.0)
    return [float(v) for v in q]
