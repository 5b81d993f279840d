"""A paired run's cases on a simulated device, through the coordinator's own case loop (``measure.paired_case``) and
the analysis (``compare_paired``), at the defaults a suite without ``[suite.timing]`` gets.

The device: each side's round median is the case's time (the head's times ``1 + effect``), with a pair-to-pair spread
of ``spread`` in ``ln(head / base)`` (half its variance each side); a disturbed start makes each side's first two or
three rounds (drawn per side) ``slow`` slower, each such round with noise of its own (``slow_spread``), as a case's
first rounds after a compute-bound case read on an H100; ``order`` makes the side that times second in a pair read
that much slower (as on the H200's decode case). Both sides report the seconds of a build and of a timed round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from attnprof.core.analysis.paired import compare_paired
from attnprof.core.analysis.paired_plan import Budget, warmup_tolerance
from attnprof.core.documents.comparison import ComparisonDocument, Finding
from attnprof.core.documents.paired import PairedCase, PairedDocument, PairedRule
from attnprof.core.documents.result import Thresholds
from attnprof.core.measure.paired import _paired_case, case_rule
from attnprof.core.measure.paired_case import CaseRounds, run_case
from attnprof.core.suite import TimingConfig
from tests.core.result_documents import make_case, make_doc

DEFAULTS = TimingConfig()
MIN_EFFECT = 0.005
ALPHA = 0.05


@dataclass(frozen=True)
class Scenario:
    """One case on the simulated device (see the module's docstring); times in microseconds, costs in seconds."""

    case: str
    effect: float = 0.0
    spread: float = 0.008
    disturbed: bool = True
    slow: float = 0.19
    slow_spread: float = 0.02
    order: float = 0.0
    base_us: float = 174.0
    prepare_s: float = 0.004
    time_s: float = 0.003


class _Device:
    def __init__(self, scenario: Scenario, rng: np.random.Generator) -> None:
        self.scenario = scenario
        self.rng = rng
        self.slow_rounds = {side: int(rng.integers(2, 4)) for side in ("base", "head")} if scenario.disturbed else {}
        self.rounds = {"base": 0, "head": 0}
        self.window = 0

    def prepare(self) -> None:
        self.window = 0

    def time(self, side: str, warmup: bool) -> float:
        s = self.scenario
        self.rounds[side] += 1
        self.window += 1
        us = s.base_us * (1 + s.effect if side == "head" else 1.0)
        us *= math.exp(self.rng.normal(0.0, s.spread / math.sqrt(2)))
        if self.rounds[side] <= self.slow_rounds.get(side, 0):
            us *= (1 + s.slow) * math.exp(self.rng.normal(0.0, s.slow_spread))
        if self.window == 2:
            us *= 1 + s.order
        return us


class SimulatedSide:
    """One side of the simulated device, answering the coordinator's commands as ``measure.side`` does."""

    def __init__(self, name: str, device: _Device) -> None:
        self.name = name
        self.device = device
        self.warmup_rounds = 0
        self.recorded_rounds = 0

    def send(self, message: dict[str, Any]) -> None:
        self.pending = message

    def receive(self, message: dict[str, Any]) -> dict[str, Any]:
        s = self.device.scenario
        if message["op"] == "prepare":
            self.device.prepare()
            return {"ok": True, "s": s.prepare_s}
        warmup = bool(message.get("warmup"))
        self.warmup_rounds += warmup
        self.recorded_rounds += not warmup
        return {"ok": True, "median_us": self.device.time(self.name, warmup), "samples": 10, "mhz": None, "s": s.time_s}

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.receive(message)


def run_cases(
    scenarios: list[Scenario], *, seed: int, timing: TimingConfig = DEFAULTS, family: int | None = None
) -> tuple[PairedDocument, dict[str, dict[str, SimulatedSide]]]:
    """Each scenario's case run by the coordinator's case loop at ``timing``'s defaults (a budget, warm-up, the rule
    over ``family`` cases: all of them by default), and the paired document it would write."""
    rng = np.random.default_rng(seed)
    family = len(scenarios) if family is None else family
    budget = Budget(timing.paired_budget, timing.effective_rounds, timing.paired_floor_pairs, timing.paired_max_pairs)
    cases: list[PairedCase] = []
    sides_of: dict[str, dict[str, SimulatedSide]] = {}
    for scenario in scenarios:
        device = _Device(scenario, rng)
        sides = {name: SimulatedSide(name, device) for name in ("base", "head")}
        rounds = CaseRounds(
            scenario.case,
            case_rule(MIN_EFFECT, ALPHA, timing.paired_max_pairs, "cuda", family=family),
            budget=budget,
            warmup_rounds=timing.paired_warmup_rounds,
            warmup_tolerance=warmup_tolerance(MIN_EFFECT),
        )
        rule = run_case(sides, rounds, stop_early=True, first_apart=True, on_pair=lambda: None)
        cases.append(_paired_case(rounds, rule, MIN_EFFECT, 0.0))
        sides_of[scenario.case] = sides
    top = case_rule(MIN_EFFECT, ALPHA, timing.paired_max_pairs, "cuda", family=family)
    paired = PairedDocument(
        mode="cuda",
        base_run="base-sim",
        head_run="head-sim",
        rule=PairedRule(
            min_effect=MIN_EFFECT,
            alpha=ALPHA,
            min_pairs=top.min_pairs,
            max_pairs=top.max_pairs,
            looks=top.looks,
            trim=top.trim,
            samples_per_round="simulated",
            max_set_aside=top.max_set_aside,
            family=top.family,
            budget=budget.factor,
            floor_pairs=budget.floor,
            warmup_rounds=timing.paired_warmup_rounds,
            disturbed_factor=top.disturbed_factor,
            spread_prior=top.spread_prior,
        ),
        cases=cases,
    )
    return paired, sides_of


def verdict_of(
    paired: PairedDocument, scenarios: list[Scenario], *, config: Thresholds | None = None
) -> ComparisonDocument:
    """The paired comparison of the run's documents: result documents whose cases are the scenarios' (latency-bound,
    the head ``1 + effect`` times the base), with ``paired`` as their pairs; ``config`` as ``--config``."""
    base = make_doc(paired.base_run, [make_case(s.case, seed=2 * i) for i, s in enumerate(scenarios)])
    head = make_doc(
        paired.head_run,
        [make_case(s.case, factor=1 + s.effect, seed=2 * i + 1) for i, s in enumerate(scenarios)],
        day=1,
    )
    return compare_paired(base, head, paired, config=config)


def slow_round(us: float, scenario: Scenario, side: str) -> bool:
    """Whether a round median (microseconds) of ``side`` reads the disturbed start's slowness."""
    own = scenario.base_us * (1 + scenario.effect if side == "head" else 1.0)
    return us > own * (1 + scenario.slow / 2)


def timing_finding(doc: ComparisonDocument, case: str) -> Finding:
    (found,) = [f for f in doc.findings if f.case == case and f.rounds is not None]
    return found


def with_effect(scenario: Scenario, effect: float) -> Scenario:
    return replace(scenario, effect=effect)
