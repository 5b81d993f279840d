"""What a paired run spends on a case: the warm-up detector, the device-time budget planned from the case's own rounds,
its floor and ceiling; the coordinator's warm-up with scripted sides; the suite keys that set them."""

from __future__ import annotations

from typing import Any

import pytest

from attnprof.core.analysis.paired_plan import Budget, RoundCost, plan, reference_s, spent_s, steady, warmup_tolerance
from attnprof.core.analysis.paired_stats import Rule
from attnprof.core.errors import SuiteError
from attnprof.core.measure.paired_case import CaseRounds, run_case
from attnprof.core.suite import TimingConfig, parse_suite


def test_the_tolerance_is_four_times_the_minimum_effect() -> None:
    assert warmup_tolerance(0.005) == pytest.approx(0.02)  # CUDA
    assert warmup_tolerance(0.10) == pytest.approx(0.40)  # the CPU hosts


@pytest.mark.parametrize(
    ("base", "head", "settled"),
    [
        ([207.0, 205.0], [206.0, 207.5], True),  # both sides' last two within 2%
        ([207.0], [206.0], False),  # one round: nothing to compare
        ([207.0, 174.0], [206.0, 174.5], False),  # the slowness ended between the rounds: a 19% step
        ([207.0, 174.0, 174.8], [206.0, 205.0, 174.2], False),  # the head still stepping
        ([207.0, 174.0, 174.8], [206.0, 174.3, 174.2], True),
        ([174.0, 177.6], [174.0, 174.0], False),  # 2.07% apart: outside
    ],
)
def test_steady_asks_each_sides_last_two_rounds_to_agree(base: list[float], head: list[float], settled: bool) -> None:
    assert steady(base, head, 0.02) is settled


def _costs(n: int, prepare_s: float = 0.004, time_s: float = 0.003, first_s: float = 2.0) -> list[RoundCost]:
    return [RoundCost(first_s if i == 0 else prepare_s, time_s) for i in range(n)]


def test_the_reference_is_the_profiles_rounds_after_each_sides_first_build() -> None:
    budget = Budget(6.0, rounds=5, floor=16, ceiling=40)
    # The first build (a compile: 2 s) is not the profile's round; each later one is a build and twice the timing.
    assert reference_s(budget, _costs(3), _costs(3)) == pytest.approx(5 * (0.004 + 2 * 0.003))
    assert reference_s(budget, _costs(1), _costs(1)) is None
    assert spent_s([2.5, 0.01, 0.012]) == pytest.approx(0.011 + 0.022)  # the first pair at the median of the others


def test_the_plan_spends_what_is_left_of_the_budget_in_pairs_rounded_down_to_an_even_count() -> None:
    budget = Budget(6.0, rounds=5, floor=16, ceiling=40)
    planned = plan(budget, _costs(3), _costs(3), [2.01, 0.01, 0.01])
    # 0.3 s allowed, 0.03 s spent by three warm-up pairs: 27 pairs of 10 ms more, 26 to keep AB and BA even.
    assert planned.pairs == 26 and planned.limit == "budget"
    assert (planned.reference_s, planned.budget_s, planned.spent_s, planned.pair_s) == pytest.approx(
        (0.05, 0.3, 0.03, 0.01)
    )


def test_the_floor_and_the_ceiling_bound_the_plan() -> None:
    costly = plan(Budget(6.0, rounds=1, floor=16, ceiling=40), _costs(2), _costs(2), [1.0, 0.01])
    assert costly.pairs == 16 and costly.limit == "budget"  # a tiny suite's one round: the floor
    cheap = plan(Budget(6.0, rounds=20, floor=16, ceiling=40), _costs(2), _costs(2), [1.0, 0.01])
    assert cheap.pairs == 40 and cheap.limit == "ceiling"
    counted = plan(Budget(None, rounds=5, floor=16, ceiling=12 + 4), _costs(2), _costs(2), [1.0, 0.01])
    assert counted.pairs == 16 and counted.limit == "ceiling" and counted.budget_s is None


def test_a_budget_refuses_impossible_bounds() -> None:
    with pytest.raises(ValueError, match="floor"):
        Budget(6.0, rounds=5, floor=20, ceiling=10)
    with pytest.raises(ValueError, match="factor"):
        Budget(0.0, rounds=5, floor=4, ceiling=10)


class _Scripted:
    """A side answering from a list of round medians (microseconds), one per ``time``; it notes which were warm-up."""

    def __init__(self, medians_us: list[float]) -> None:
        self.medians_us = list(medians_us)
        self.warmup: list[bool] = []

    def send(self, message: dict[str, Any]) -> None:
        pass

    def receive(self, message: dict[str, Any]) -> dict[str, Any]:
        if message["op"] != "time":
            return {"ok": True, "s": 0.004}
        self.warmup.append(bool(message.get("warmup")))
        return {"ok": True, "median_us": self.medians_us.pop(0), "samples": 3, "mhz": None, "s": 0.003}

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.receive(message)


def test_the_warm_up_stops_when_both_sides_agree_and_its_rounds_are_not_recorded() -> None:
    slow = [207.0, 206.0, 174.0, 174.5]  # two slow rounds, the step, then agreement
    sides = {"base": _Scripted([*slow, *[174.0] * 40]), "head": _Scripted([*slow, *[180.0] * 40])}
    rounds = CaseRounds(
        "decode", Rule(0.005, max_pairs=40), budget=Budget(6.0, 5, 16, 40), warmup_rounds=6, warmup_tolerance=0.02
    )
    rule = run_case(sides, rounds, stop_early=True, first_apart=True, on_pair=lambda: None)  # type: ignore[arg-type]
    # Rounds 1-2 agree (both slow): the warm-up ends there, on a plateau whose end no detector can see coming; the
    # step after it falls between pairs or inside one, and is then the pairs' to handle
    # (tests/core/test_paired_defaults.py).
    assert rounds.warmup_end == "steady" and len(rounds.warmup) == 2
    assert [p.base_us for p in rounds.warmup] == [207.0, 206.0]
    assert sides["base"].warmup == [True, True] + [False] * len(rounds.pairs)
    assert rounds.stopped_by == "slower" and rule.max_pairs == rounds.planned.pairs  # type: ignore[union-attr]


def test_the_warm_up_goes_on_past_a_step_until_the_rounds_agree_again() -> None:
    stepping = [207.0, 195.0, 174.0, 174.5]  # still falling at round 2, then the step, then agreement
    sides = {"base": _Scripted([*stepping, *[174.0] * 40]), "head": _Scripted([*stepping, *[180.0] * 40])}
    rounds = CaseRounds(
        "decode", Rule(0.005, max_pairs=40), budget=Budget(6.0, 5, 16, 40), warmup_rounds=6, warmup_tolerance=0.02
    )
    run_case(sides, rounds, stop_early=True, first_apart=True, on_pair=lambda: None)  # type: ignore[arg-type]
    assert rounds.warmup_end == "steady" and [p.base_us for p in rounds.warmup] == stepping
    assert all(p.base_us == 174.0 for p in rounds.pairs)


def test_a_warm_up_that_never_agrees_spends_its_bound_and_says_so() -> None:
    wobbling = [174.0 * (1.05 if i % 2 else 1.0) for i in range(6)]
    sides = {"base": _Scripted([*wobbling, *[174.0] * 40]), "head": _Scripted([*wobbling, *[180.0] * 40])}
    rounds = CaseRounds(
        "fused", Rule(0.005, max_pairs=40), budget=Budget(6.0, 5, 16, 40), warmup_rounds=6, warmup_tolerance=0.02
    )
    run_case(sides, rounds, stop_early=True, first_apart=True, on_pair=lambda: None)  # type: ignore[arg-type]
    assert rounds.warmup_end == "bound" and len(rounds.warmup) == 6
    assert rounds.stopped_by == "slower" and rounds.pairs


def test_the_suite_sets_the_paired_budget_and_refuses_impossible_values() -> None:
    assert (TimingConfig().paired_budget, TimingConfig().paired_floor_pairs, TimingConfig().paired_max_pairs) == (
        6.0,
        16,
        40,
    )
    assert TimingConfig().paired_warmup_rounds == 6
    text = '[suite]\nname = "s"\n[suite.timing]\n{}\n[[cases]]\nname = "c"\ntarget = "pkg.mod:make"\n'
    suite = parse_suite(text.format("paired_budget = 3\npaired_floor_pairs = 8\npaired_max_pairs = 24"))
    assert (suite.timing.paired_budget, suite.timing.paired_floor_pairs, suite.timing.paired_max_pairs) == (3.0, 8, 24)
    for bad, key in (
        ("paired_budget = 0", "paired_budget"),
        ("paired_floor_pairs = 30\npaired_max_pairs = 20", "paired_floor_pairs"),
        ("paired_warmup_rounds = 1", "paired_warmup_rounds"),
        ("paired_max_pairs = 2", "paired_max_pairs"),
    ):
        with pytest.raises(SuiteError) as caught:
            parse_suite(text.format(bad))
        assert caught.value.key == f"suite.timing.{key}"
