"""Disturbed pairs in the sequential paired test: one pair far out of line with the others (a side's round stalled by
the host) is set aside at a look that does not settle and the next pair takes its place; clean pairs, a genuine spread,
a small step and a settled look are left alone; the set-asides stop at the rule's budget."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from attnprof.core.analysis.paired_stats import Rule, assess, disturbed, disturbed_floor, replay, run, set_aside_budget

# A tiny suite's rule on CPU (tests/worker/stack.py TINY_TIMING): one look at 4 pairs, minimum effect 10%.
TINY = Rule(0.10, min_pairs=4, max_pairs=4, max_set_aside=set_aside_budget(4))
# The CI failure: the head sleeps 6 ms a call, the base 2 ms (3x), and the base's round of the fourth pair read
# 15 ms: the host stalled it.
THREEFOLD = [1.032, 1.018, 1.036]
STALLED = math.log(6.2 / 15.0)


def test_one_stalled_pair_of_four_leaves_a_threefold_slowdown_ambiguous_by_the_plain_rule() -> None:
    plain = run([*THREEFOLD, STALLED], dataclasses.replace(TINY, max_set_aside=0))
    assert plain.state == "ambiguous" and plain.pairs == 4
    assert plain.low < 0 < plain.high and plain.p > 0.05


def test_the_stalled_pair_is_set_aside_and_the_pair_after_it_settles_the_slowdown() -> None:
    waiting = replay([*THREEFOLD, STALLED], TINY)
    assert not waiting.done and waiting.kept == 3  # the stalled pair is out; a fifth pair takes its place
    ((aside,),) = [waiting.set_aside]
    assert aside.index == 3 and aside.value == STALLED
    settled = replay([*THREEFOLD, STALLED, 1.031], TINY)
    assert settled.done and settled.used == 5 and settled.kept == 4
    assert settled.assessment is not None and settled.assessment.state == "slower"
    assert settled.assessment == assess([*THREEFOLD, 1.031], TINY)
    assert run([*THREEFOLD, STALLED, 1.031], TINY).state == "slower"
    assert aside.describe() == (
        "disturbed: head/base -58.7% against +179.7% over the other pairs (sd 0.009 in log ratio): 6.77x off them, "
        "where 1.50x would have been in line; set aside and run again"
    )


def test_a_stalled_first_pair_is_set_aside_as_well() -> None:
    settled = replay([STALLED, *THREEFOLD, 1.031], TINY)
    assert [a.index for a in settled.set_aside] == [0]
    assert settled.assessment is not None and settled.assessment.state == "slower"


def test_set_asides_stop_at_the_budget() -> None:
    """A second stalled pair in a case of at most 4 pairs (budget 1) is kept: the case ends ambiguous after 5 pairs,
    never runs a sixth."""
    out = replay([*THREEFOLD, STALLED, STALLED, 1.03, 1.03], TINY)
    assert out.done and out.used == 5 and len(out.set_aside) == 1
    assert out.assessment is not None and out.assessment.state == "ambiguous" and out.assessment.pairs == 4


@pytest.mark.parametrize(
    ("d", "why"),
    [
        ([0.0, 0.5, 1.0, 1.5], "evenly spread: none is out of line"),
        ([1.1, 1.1, 1.1, 1.1, -0.9, -0.9], "two far pairs: a spread, not one accident"),
        ([0.0, 0.4, -0.3, 0.1, 0.9], "a noisy case: within what its other pairs spread"),
        ([0.01, 0.01, 0.01, 0.2], "a step of 1.21x from near-identical pairs: under the 1.5x floor"),
        ([1.1, 1.1, 1.1], "three pairs: too few to tell"),
    ],
)
def test_a_genuine_spread_or_a_small_step_is_not_set_aside(d: list[float], why: str) -> None:
    assert disturbed(d, TINY) is None, why


def test_a_pair_out_of_line_with_consistent_others_is_found_wherever_it_is() -> None:
    rng = random.Random(4)
    base = [0.01 + rng.gauss(0, 0.003) for _ in range(12)]
    for where in (0, 5, 11):
        d = list(base)
        d[where] = math.log(2.0)  # one side's round half as fast: a 2x stall
        found = disturbed(d, Rule(0.005))
        assert found is not None and found.index == where


def test_a_settled_look_sets_nothing_aside() -> None:
    """Eight pairs at +172% and one at +447%: the look settles as slower with the far pair in it; setting it aside
    would change no answer, so it stays."""
    d = [1.0, 1.01, 0.99, 1.0, 1.005, 0.995, 1.002, 1.7]
    rule = Rule(0.10, min_pairs=8, max_pairs=8, max_set_aside=2)
    assert disturbed(d, rule) is not None
    out = replay(d, rule)
    assert out.set_aside == () and out.assessment == assess(d, rule)
    assert out.assessment.state == "slower"


def _sequences(rng: np.random.Generator, n: int, length: int, sd: float, stall: float = 0.0) -> np.ndarray:
    """A/A sequences of log ratios; with ``stall``, that share of the pairs has one side stalled 2-4x."""
    d = rng.normal(0.0, sd, (n, length))
    hit = rng.random((n, length)) < stall
    d[hit] += rng.choice([-1.0, 1.0], hit.sum()) * np.log(rng.uniform(2.0, 4.0, hit.sum()))
    return d


@pytest.mark.parametrize(
    ("rule", "sd"), [(Rule(0.005), 0.003), (Rule(0.005), 0.01), (Rule(0.10), 0.05), (TINY, 0.03), (TINY, 0.1)]
)
def test_clean_pairs_get_the_same_answers_with_and_without_set_asides(rule: Rule, sd: float) -> None:
    rule = dataclasses.replace(rule, max_set_aside=set_aside_budget(rule.max_pairs))
    plain = dataclasses.replace(rule, max_set_aside=0)
    rng = np.random.default_rng(11)
    for row in _sequences(rng, 300, rule.max_pairs + rule.max_set_aside, sd) + 0.004:
        d = [float(x) for x in row]
        with_ = replay(d, rule)
        assert with_.set_aside == ()
        assert with_.assessment == run(d[: rule.max_pairs], plain)


def test_false_alarms_stay_rare_and_stalled_slowdowns_are_caught() -> None:
    """A/A pairs with one in 20 stalled: the rule with set-asides still almost never says slower or faster; 2%
    slowdowns with the same stalls are caught at least as often as without them."""
    rule = Rule(0.005, max_set_aside=set_aside_budget(15))
    plain = dataclasses.replace(rule, max_set_aside=0)
    rng = np.random.default_rng(5)
    aa = _sequences(rng, 1000, 18, 0.003, stall=0.05)
    wrong = sum(run([float(x) for x in row], rule).state in ("slower", "faster") for row in aa)
    assert wrong / len(aa) <= 0.01
    slow = _sequences(rng, 1000, 18, 0.003, stall=0.05) + math.log(1.02)
    caught = sum(run([float(x) for x in row], rule).state == "slower" for row in slow)
    caught_plain = sum(run([float(x) for x in row[:15]], plain).state == "slower" for row in slow)
    assert caught / len(slow) >= 0.99 and caught >= caught_plain


def test_the_budget_is_a_quarter_of_the_pairs_at_least_one() -> None:
    assert [set_aside_budget(n) for n in (2, 4, 7, 8, 15, 40)] == [1, 1, 1, 2, 3, 10]
    with pytest.raises(ValueError, match="max_pairs"):
        set_aside_budget(0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_set_aside": -1}, "max_set_aside"),
        ({"disturbed_factor": 1.0}, "disturbed_factor"),
        ({"disturbed_alpha": 0.0}, "disturbed_alpha"),
        ({"disturbed_alpha": 1.0}, "disturbed_alpha"),
    ],
)
def test_rule_refuses_impossible_set_aside_settings(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Rule(0.01, **kwargs)  # type: ignore[arg-type]


def test_replay_without_stopping_early_keeps_max_pairs_and_still_sets_aside() -> None:
    d = [*THREEFOLD, STALLED, 1.031, 1.02]
    out = replay(d, TINY, stop_early=False)
    assert out.done and out.used == 5 and [a.index for a in out.set_aside] == [3]


def test_on_cuda_one_pair_with_one_side_disturbed_is_set_aside_at_the_first_look() -> None:
    """Three pairs of a +5.5% change spread by 0.8%, and one whose base round was still 19% slow (the end of a
    disturbed start fell inside it): at the first look, four pairs, it is set aside with CUDA's floor and prior spread;
    three pairs alone, with two degrees of freedom, could not tell it from their spread."""
    clean = [math.log(1.055) + x for x in (0.009, -0.007, -0.002)]
    d = [math.log(1.055 / 1.19), *clean]
    cuda = Rule(0.005, max_set_aside=4, disturbed_factor=disturbed_floor(0.005), spread_prior=0.01)
    found = disturbed(d, cuda)
    assert found is not None and found.index == 0
    assert disturbed(d, dataclasses.replace(cuda, spread_prior=0.0)) is None
    assert disturbed(d, dataclasses.replace(cuda, disturbed_factor=1.5)) is None  # the CPU hosts' floor
    out = replay([*d, math.log(1.055) + 0.003], cuda)
    assert [a.index for a in out.set_aside] == [0]
    assert out.assessment is not None and out.assessment.state == "slower" and out.assessment.pairs == 4


def test_both_sides_slowed_alike_cancel_in_the_ratio_and_nothing_is_set_aside() -> None:
    both_slow = math.log((174.0 * 1.19 * 1.055) / (174.0 * 1.19)) + 0.004
    d = [both_slow, *(math.log(1.055) + x for x in (0.009, -0.007, -0.002))]
    cuda = Rule(0.005, max_set_aside=4, disturbed_factor=disturbed_floor(0.005), spread_prior=0.01)
    assert disturbed(d, cuda) is None


def test_the_floor_is_ten_times_the_minimum_effect_at_most_one_and_a_half() -> None:
    assert disturbed_floor(0.005) == pytest.approx(1.05)
    assert disturbed_floor(0.10) == pytest.approx(1.5)
    assert disturbed_floor(0.0) == pytest.approx(1.5)
