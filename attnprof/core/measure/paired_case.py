"""One case of a paired run: warm-up pairs until the device is steady, then pairs within the case's budget until the
sequential rule settles it, the plan runs out, or a side fails (``measure.paired`` runs the cases in turn).

A pair: both sides build the workload again and warm it up, then time their rounds back to back, in the pair's order
(AB: the base first). Warm-up pairs run exactly so and are kept in the paired document, out of the test, until each
side's last rounds agree (``analysis.paired_plan.steady``) or the warm-up bound is spent. Then the case's pairs are
planned from what its rounds cost (``analysis.paired_plan.plan``): the sequential rule (``analysis.paired_stats``)
gets that many pairs, its looks planned up to them, and a pair it sets aside as disturbed is replaced by one more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from attnprof.core.analysis.paired_plan import Budget, Plan, RoundCost, plan, spent_s, steady
from attnprof.core.analysis.paired_stats import Assessment, Replay, Rule, log_ratios, replay, set_aside_budget
from attnprof.core.documents.paired import Pair, StoppedBy, WarmupEnd

SIDES = ("base", "head")
Order = Literal["AB", "BA"]


class Side(Protocol):
    """What a case needs of a side: send a command, read its answer."""

    def send(self, message: dict[str, Any]) -> None: ...

    def receive(self, message: dict[str, Any]) -> dict[str, Any]: ...

    def ask(self, message: dict[str, Any]) -> dict[str, Any]: ...


@dataclass
class CaseRounds:
    """One case's rounds as they run. ``rule`` is the sequential rule before the plan (its ``max_pairs`` stands where
    ``budget`` is None); ``warmup_rounds`` the warm-up bound per side (0: none), ``warmup_tolerance`` the agreement
    that counts as steady."""

    case_id: str
    rule: Rule
    budget: Budget | None = None
    warmup_rounds: int = 0
    warmup_tolerance: float = 0.02
    pairs: list[Pair] = field(default_factory=list)
    warmup: list[Pair] = field(default_factory=list)
    warmup_end: WarmupEnd | None = None
    planned: Plan | None = None
    stopped_by: StoppedBy = "max_rounds"
    detail: str | None = None
    costs: dict[str, list[RoundCost]] = field(default_factory=lambda: {name: [] for name in SIDES})
    pair_s: list[float] = field(default_factory=list)  # device seconds of each pair, warm-up pairs first

    @property
    def spent_s(self) -> float:
        """Device seconds the case's pairs took, its first pair (first builds) at the median of the others."""
        return spent_s(self.pair_s)


class _Failed(Exception):
    def __init__(self, stopped_by: StoppedBy, detail: str) -> None:
        super().__init__(detail)
        self.stopped_by = stopped_by
        self.detail = detail


def _describe(a: Assessment, set_aside: int) -> str:
    text = f"head/base {a.change:+.2%} [{a.low:+.2%}, {a.high:+.2%}] after {a.pairs} pairs"
    if set_aside:
        text += f" ({set_aside} more set aside as disturbed)"
    return text


def _pair(
    sides: Mapping[str, Side], rounds: CaseRounds, order: Order, *, apart: bool, what: str, warmup: bool = False
) -> Pair:
    """One pair of rounds in ``order``; raises ``_Failed`` when a side gives no round. Both sides build and warm up
    first, then time back to back, so the pair's two timed windows are milliseconds apart; both sides run their round
    even when the other failed, so each document holds the case. ``apart``: the builds one side after the other (a
    case's first, which may tune itself by timing: Triton's autotune, max-autotune compiles), else at once (nothing
    is timed while they run). ``warmup``: the sides time their rounds without recording them."""
    turn = ("base", "head") if order == "AB" else ("head", "base")
    answers: dict[str, dict[str, Any]] = {}
    prepared: dict[str, float] = {}
    prepare = {"op": "prepare", "case": rounds.case_id}
    for name in turn:
        sides[name].send(prepare)
        if apart:
            answers[name] = sides[name].receive(prepare)
    for name in turn:
        ready = answers.pop(name) if apart else sides[name].receive(prepare)
        prepared[name] = float(ready.get("s") or 0.0)
        if not ready.get("ok"):
            answers[name] = ready
    for name in turn:
        if name not in answers:
            command: dict[str, Any] = {"op": "time", "case": rounds.case_id}
            answers[name] = sides[name].ask(command | {"warmup": True} if warmup else command)
    failed = [name for name in SIDES if not answers[name].get("ok")]
    if failed:
        if warmup:  # a warm-up round records nothing: the side that gave one times a recorded round for its document
            for name in SIDES:
                if name not in failed:
                    sides[name].ask(prepare)
                    sides[name].ask({"op": "time", "case": rounds.case_id})
        skipped = all(answers[name].get("status") == "skipped" for name in SIDES)
        raise _Failed(
            "skipped" if skipped else "failed",
            "; ".join(f"the {name} side's {what} failed: {answers[name].get('error')}" for name in failed),
        )
    timed = {name: float(answers[name].get("s") or 0.0) for name in SIDES}
    for name in SIDES:
        rounds.costs[name].append(RoundCost(prepare_s=prepared[name], time_s=timed[name]))
    builds = sum(prepared.values()) if apart else max(prepared.values())
    rounds.pair_s.append(builds + sum(timed.values()))
    base, head = answers["base"], answers["head"]
    return Pair(
        order=order,
        base_us=base["median_us"],
        head_us=head["median_us"],
        base_mhz=base.get("mhz"),
        head_mhz=head.get("mhz"),
        base_samples=base["samples"],
        head_samples=head["samples"],
    )


def _warm_up(sides: Mapping[str, Side], rounds: CaseRounds, *, first_apart: bool, on_pair: Callable[[], None]) -> None:
    for k in range(rounds.warmup_rounds):
        on_pair()
        order: Order = "AB" if k % 2 == 0 else "BA"
        apart = first_apart and k == 0
        rounds.warmup.append(_pair(sides, rounds, order, apart=apart, what=f"warm-up round {k + 1}", warmup=True))
        base_us = [p.base_us for p in rounds.warmup]
        head_us = [p.head_us for p in rounds.warmup]
        if steady(base_us, head_us, rounds.warmup_tolerance):
            rounds.warmup_end = "steady"
            return
    rounds.warmup_end = "bound"


def _planned_rule(rounds: CaseRounds) -> Rule:
    rule = rounds.rule
    if rounds.budget is None:
        return rule
    rounds.planned = plan(rounds.budget, rounds.costs["base"], rounds.costs["head"], rounds.pair_s)
    pairs = rounds.planned.pairs
    return dataclasses.replace(
        rule, min_pairs=min(rule.min_pairs, pairs), max_pairs=pairs, max_set_aside=set_aside_budget(pairs)
    )


def run_case(
    sides: Mapping[str, Side],
    rounds: CaseRounds,
    *,
    stop_early: bool,
    first_apart: bool,
    on_pair: Callable[[], None],
) -> Rule:
    """Warm-up pairs, then pairs of rounds of one case until the rule settles it, the planned pairs run out, or a side
    fails; returns the rule the pairs were judged by (looks planned up to the case's pairs). A pair the rule sets
    aside as disturbed stays in ``rounds.pairs``, marked, and one more pair takes its place."""
    try:
        _warm_up(sides, rounds, first_apart=first_apart, on_pair=on_pair)
        rule = _planned_rule(rounds)
        apart = first_apart and not rounds.warmup  # the case's first builds, unless a warm-up pair ran them
        _pairs(sides, rounds, rule, stop_early=stop_early, first_apart=apart, on_pair=on_pair)
    except _Failed as failed:
        rounds.stopped_by = failed.stopped_by
        rounds.detail = failed.detail
        return rounds.rule
    return rule


def _pairs(
    sides: Mapping[str, Side],
    rounds: CaseRounds,
    rule: Rule,
    *,
    stop_early: bool,
    first_apart: bool,
    on_pair: Callable[[], None],
) -> None:
    so_far: Replay | None = None
    for n in range(1, rule.max_pairs + rule.max_set_aside + 1):
        on_pair()
        # AB, BA, AB, ... over the pairs that count: a pair that replaces a disturbed one keeps the orders even.
        counted = [p.order for p in rounds.pairs if p.disturbed is None]
        order: Order = "AB" if counted.count("AB") <= counted.count("BA") else "BA"
        rounds.pairs.append(_pair(sides, rounds, order, apart=first_apart and n == 1, what=f"round {n}"))
        if len(rounds.pairs) < rule.min_pairs:
            continue
        so_far = replay(
            log_ratios([p.base_us for p in rounds.pairs], [p.head_us for p in rounds.pairs]),
            rule,
            stop_early=stop_early,
        )
        for found in so_far.set_aside:
            rounds.pairs[found.index].disturbed = found.describe()
        if so_far.done:
            break
    # Each set-aside takes one of max_set_aside, so max_pairs are kept by then: the rule has stopped.
    assert so_far is not None and so_far.done and so_far.assessment is not None
    final = so_far.assessment
    detail = _describe(final, len(so_far.set_aside))
    if final.state == "ambiguous":
        rounds.stopped_by = "max_rounds"
        if rounds.planned is not None and rounds.planned.limit == "budget":
            why = f"its device-time budget spent ({rule.max_pairs} pairs)"
        else:
            why = f"the most pairs a case may take ({rule.max_pairs}) reached"
        rounds.detail = f"{detail}: ambiguous, {why}; about {final.more_pairs} more pairs would settle it"
    else:
        rounds.stopped_by = final.state
        rounds.detail = detail
