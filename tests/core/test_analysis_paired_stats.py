"""The sequential paired test: Student's t without scipy, the looks, the four answers, the trimmed location, the error
rates it promises."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

from attnprof.core.analysis.paired_stats import Rule, assess, location, log_ratios, run, t_quantile, t_sf


@pytest.mark.parametrize("df", [1, 2, 3, 7, 14, 30, 200])
def test_t_distribution_matches_scipy(df: int) -> None:
    for q in (0.6, 0.9, 0.975, 0.995, 0.9983, 0.99964):
        assert t_quantile(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-8)
        assert t_quantile(1 - q, df) == pytest.approx(stats.t.ppf(1 - q, df), rel=1e-8)
    for t in (-3.0, 0.0, 0.2, 1.0, 2.5, 9.0):
        assert t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-9, abs=1e-14)


def test_looks_start_at_min_pairs_step_and_end_at_max() -> None:
    assert Rule(0.005, min_pairs=4, max_pairs=15).looks == [4, 6, 8, 10, 12, 14, 15]
    assert Rule(0.005, min_pairs=4, max_pairs=4).looks == [4]
    assert Rule(0.005, alpha=0.06, min_pairs=4, max_pairs=8).look_alpha == pytest.approx(0.02)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_effect": -0.1}, "min_effect"),
        ({"min_effect": 0.01, "alpha": 1.5}, "alpha"),
        ({"min_effect": 0.01, "min_pairs": 9, "max_pairs": 5}, "min_pairs"),
        ({"min_effect": 0.01, "trim": 0.3}, "trim"),
        ({"min_effect": 0.01, "trim": -0.1}, "trim"),
    ],
)
def test_rule_refuses_impossible_settings(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Rule(**kwargs)  # type: ignore[arg-type]


def _pairs(effect: float, sd: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [math.log1p(effect) + rng.gauss(0, sd) for _ in range(n)]


def test_a_clear_slowdown_is_slower_and_a_clear_speedup_faster() -> None:
    rule = Rule(0.005)
    slow = run(_pairs(0.02, 0.003, 15, 1), rule)
    assert slow.state == "slower" and slow.pairs == 4 and slow.low > 0 and slow.change == pytest.approx(0.02, abs=0.003)
    fast = run(_pairs(-0.02, 0.003, 15, 2), rule)
    assert fast.state == "faster" and fast.high < 0


def test_identical_code_with_small_noise_is_the_same() -> None:
    settled = run(_pairs(0.0, 0.001, 15, 3), Rule(0.005))
    assert settled.state == "same" and settled.low > -0.005 and settled.high < 0.005


def test_a_change_at_the_margin_stays_ambiguous_and_says_how_many_more_pairs() -> None:
    d = _pairs(0.004, 0.004, 15, 5)
    rule = Rule(0.005, trim=0.0)  # the padding below spreads pairs by the plain standard deviation
    settled = run(d, rule)
    assert settled.state == "ambiguous" and settled.pairs == 15
    assert settled.more_pairs is not None and settled.more_pairs >= 1
    # The estimate is what it will stay; given the pairs it asked for at the spread it saw, the interval is as narrow
    # as the distance to the nearest boundary, so the answer settles.
    more = settled.more_pairs
    mean = math.log1p(settled.change)
    padded = d + [mean + (settled.sd if i % 2 else -settled.sd) for i in range(more + 2)]
    longer = assess(padded, Rule(0.005, max_pairs=len(padded), trim=0.0), final=True)
    assert longer.high - longer.low < settled.high - settled.low
    assert longer.state != "ambiguous"


def test_p_is_bonferroni_adjusted_over_the_looks() -> None:
    d = _pairs(0.01, 0.01, 8, 6)
    one_look = assess(d, Rule(0.005, min_pairs=8, max_pairs=8))
    seven_looks = assess(d, Rule(0.005, min_pairs=4, max_pairs=16))
    assert seven_looks.p == pytest.approx(min(1.0, one_look.p * len(Rule(0.005, max_pairs=16).looks)))


def test_log_ratios_are_head_over_base() -> None:
    assert log_ratios([100.0, 200.0], [101.0, 198.0]) == pytest.approx([math.log(1.01), math.log(0.99)])


def test_error_rates_hold_over_many_simulated_cases() -> None:
    """A/A cases almost never end slower; 1% slowdowns with a 0.3% pair spread are almost always caught."""
    rule = Rule(0.005)
    trials = 2000
    false_alarms = sum(run(_pairs(0.0, 0.003, 15, s), rule).state == "slower" for s in range(trials))
    caught = sum(run(_pairs(0.01, 0.003, 15, 10_000 + s), rule).state == "slower" for s in range(trials))
    assert false_alarms / trials <= 0.01
    assert caught / trials >= 0.95


def test_the_trimmed_location_is_yuens() -> None:
    d = [*_pairs(0.01, 0.004, 15, 7), 0.06, -0.05]
    mean, spread, df, g = location(d, 0.1)
    n = len(d)
    assert g == 1 and df == n - 2 * g - 1
    assert mean == pytest.approx(stats.trim_mean(d, 0.1))
    winsorized = np.asarray(stats.mstats.winsorize(np.asarray(d), limits=(0.1, 0.1)))
    # Yuen's standard error, s_w / ((1 - 2g/n) sqrt(n)), is what the spread gives as spread / sqrt(n).
    assert spread / math.sqrt(n) == pytest.approx(np.std(winsorized, ddof=1) / ((1 - 2 * g / n) * math.sqrt(n)))
    # Under 10 pairs nothing is trimmed: Student's t on the mean.
    assert location(d[:9], 0.1) == pytest.approx((np.mean(d[:9]), np.std(d[:9], ddof=1), 8, 0))
    assert assess(d[:9], Rule(0.005)) == assess(d[:9], Rule(0.005, trim=0.0))


def test_one_pair_across_a_clock_step_does_not_hide_a_one_percent_change() -> None:
    """14 pairs at +1% and one that read -6% (its two windows straddled a clock step): the trimmed rule still calls
    the change; the plain mean's interval, widened by that one pair, does not settle."""
    d = _pairs(0.01, 0.002, 15, 8)
    d[9] = math.log(0.94)
    trimmed = assess(d, Rule(0.005), final=True)
    plain = assess(d, Rule(0.005, trim=0.0), final=True)
    assert trimmed.state == "slower" and trimmed.trimmed == 1
    assert trimmed.change == pytest.approx(0.01, abs=0.002)
    assert plain.state == "ambiguous"


def test_looks_grow_by_a_quarter_after_eight_pairs_and_stay_even() -> None:
    assert Rule(0.005, max_pairs=40, growth=1.25).looks == [4, 6, 8, 10, 14, 18, 24, 30, 38, 40]
    assert Rule(0.005, max_pairs=16, growth=1.25).looks == [4, 6, 8, 10, 14, 16]
    assert Rule(0.005, max_pairs=4, growth=1.25).looks == [4]
    given = Rule(0.005, min_pairs=4, max_pairs=12, schedule=(4, 8, 12))
    assert given.looks == [4, 8, 12] and given.look_alpha == pytest.approx(0.05 / 3)
    with pytest.raises(ValueError, match="schedule"):
        Rule(0.005, min_pairs=4, max_pairs=12, schedule=(4, 12, 8))


def test_a_change_is_called_at_alpha_split_over_the_family_and_the_same_at_alpha_per_case() -> None:
    one, three = Rule(0.005, max_pairs=16), Rule(0.005, max_pairs=16, family=3)
    assert three.change_alpha == pytest.approx(one.change_alpha / 3) and three.look_alpha == one.look_alpha
    # A slowdown the per-case level calls, the family's does not yet: its p lies between alpha / 3 and alpha.
    d = [math.log(1.012) + x for x in (0.008, -0.006, 0.006, -0.008, 0.002, -0.002)]
    alone, split = assess(d, one), assess(d, three)
    assert alone.state == "slower" and split.state == "ambiguous" and alone.p == split.p
    assert one.alpha / 3 < split.p <= one.alpha
    assert split.level == pytest.approx(1 - three.change_alpha)
    # "The same" is read at the per-case level whatever the family: a wrong "same" misses a change, it discovers none.
    same = [0.0005 * (1 if i % 2 else -1) for i in range(8)]
    alone_same, split_same = assess(same, one), assess(same, three)
    assert alone_same.state == split_same.state == "same"
    assert (split_same.low, split_same.high, split_same.level) == (alone_same.low, alone_same.high, alone_same.level)


def test_family_and_growth_refuse_impossible_values() -> None:
    with pytest.raises(ValueError, match="family"):
        Rule(0.005, family=0)
    with pytest.raises(ValueError, match="growth"):
        Rule(0.005, growth=0.5)
