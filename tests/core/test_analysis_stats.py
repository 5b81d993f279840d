"""The statistics: exact bootstrap of the median, the hierarchical test, Benjamini-Hochberg, FDR on a grid."""

from __future__ import annotations

import numpy as np
import pytest

from attnprof.core.analysis import compare
from attnprof.core.analysis.stats import (
    benjamini_hochberg,
    bootstrap_diffs,
    hierarchical_test,
    log_samples,
    median_stat,
    spread_stat,
)
from tests.core.result_documents import grid


def test_exact_median_bootstrap_matches_resampling() -> None:
    rng = np.random.default_rng(0)
    x = np.log(87.0 * np.exp(0.008 * rng.standard_normal(41)))
    exact = median_stat(x)
    boot = np.median(x[rng.integers(0, x.size, size=(20000, x.size))], axis=1)
    assert exact.within_var == pytest.approx(boot.var(), rel=0.05)
    draws = exact.draw(np.random.default_rng(1), 20000)
    assert draws.mean() == pytest.approx(boot.mean(), abs=3e-4)


def test_median_of_one_sample_has_no_within_variance() -> None:
    s = median_stat(np.array([1.0]))
    assert s.value == 1.0 and s.within_var == 0.0


def test_spread_needs_samples_and_spread() -> None:
    assert spread_stat(np.zeros(3)) is None
    assert spread_stat(np.zeros(50)) is None
    s = spread_stat(log_samples(np.exp(0.01 * np.random.default_rng(0).standard_normal(500))))
    assert s is not None and np.exp(s.value) == pytest.approx(0.01 * np.sqrt(2 / np.pi), rel=0.1)


def _runs(levels: list[float], n: int = 100, cv: float = 0.008, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [median_stat(np.log(lv) + cv * rng.standard_normal(n)) for lv in levels]


def test_between_run_variance_enters_the_test() -> None:
    cand = _runs([1.03], seed=9)[0]
    tight = hierarchical_test(_runs([1.0, 1.001, 0.999]), cand, prior_sd=0.002, prior_runs=6)
    loose = hierarchical_test(_runs([1.0, 1.04, 0.96]), cand, prior_sd=0.002, prior_runs=6)
    assert loose.between_sd > 5 * tight.between_sd
    assert loose.p > 100 * tight.p
    assert loose.baseline_range == pytest.approx(np.log(1.04 / 0.96), abs=0.005)


def test_single_baseline_run_leans_on_the_prior() -> None:
    base = _runs([1.0])
    cand = _runs([1.02], seed=3)[0]
    small = hierarchical_test(base, cand, prior_sd=0.002, prior_runs=6)
    big = hierarchical_test(base, cand, prior_sd=0.02, prior_runs=6)
    assert small.p < 0.01 < 0.3 < big.p
    assert small.df == 5


def test_identical_constant_runs() -> None:
    same = median_stat(np.zeros(10))
    t = hierarchical_test([same], same, prior_sd=0.0, prior_runs=6)
    assert t.p == 1.0 and t.diff == 0.0
    moved = median_stat(np.full(10, 0.1))
    assert hierarchical_test([same], moved, prior_sd=0.0, prior_runs=6).p < 1e-12


def test_bootstrap_is_seeded_and_centred() -> None:
    base, cand = _runs([1.0, 1.004, 0.997]), _runs([1.05], seed=5)[0]
    t = hierarchical_test(base, cand, prior_sd=0.006, prior_runs=6)
    a = bootstrap_diffs(base, cand, t, rng=np.random.default_rng(3), replicates=4000)
    b = bootstrap_diffs(base, cand, t, rng=np.random.default_rng(3), replicates=4000)
    assert np.array_equal(a, b)
    assert np.median(a) == pytest.approx(t.diff, abs=0.002)
    assert a.std() == pytest.approx(t.se, rel=0.15)


def test_benjamini_hochberg_q_values() -> None:
    # Worked by hand: sorted p 0.005, 0.01, 0.03, 0.04 times m/rank = 0.02, 0.02, 0.04, 0.04 (already monotone);
    # a p-value that would round above 1 is capped at 1; answers come back in the input order.
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert benjamini_hochberg([0.9, 0.02]) == pytest.approx([0.9, 0.04])
    assert benjamini_hochberg([0.6, 0.7, 0.8]) == pytest.approx([0.8, 0.8, 0.8])
    assert benjamini_hochberg([]) == []
    p = list(np.random.default_rng(0).random(40) ** 3)
    q = benjamini_hochberg(p)
    assert all(qi >= pi for pi, qi in zip(p, q, strict=True))  # an adjustment never makes a test more significant
    assert [q[i] for i in np.argsort(p)] == sorted(q)  # and keeps the order of the p-values


def test_a_48_case_grid_of_unchanged_code_does_not_fail() -> None:
    # A/A with realistic noise: every run carries its own offset (sd 0.4%) and 0.8% CV within.
    rng = np.random.default_rng(42)
    verdicts = []
    for trial in range(4):
        offsets = np.exp(0.004 * rng.standard_normal(4))
        base = [grid(48, seed=100 * trial + r, offset=float(offsets[r]), run_id=f"b{r}", n=60) for r in range(3)]
        cand = grid(48, seed=100 * trial + 9, offset=float(offsets[3]), run_id="c", n=60)
        c = compare(base, cand, seed=trial)
        verdicts.append(c.verdict)
        assert c.summary.regressed == 0, [f.case for f in c.findings if f.status == "regressed"]
    assert "fail" not in verdicts


def test_a_grid_with_one_real_regression_flags_only_that_case() -> None:
    base = [grid(48, seed=r, run_id=f"b{r}", n=60) for r in range(3)]
    c = compare(base, grid(48, seed=9, run_id="c", regress={17: 1.10}, n=60))
    assert c.verdict == "fail"
    assert [f.case for f in c.findings if f.status == "regressed"] == ["grid[case=17,backend=efficient]"]
