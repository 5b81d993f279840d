"""How much a paired run spends on a case: warm-up rounds until the device is steady, then pairs within a budget.

**Warm-up.** A case's first rounds can run on a device that the case before it left in another state: on an H100 the
first two or three rounds of a memory-bound decode step after a compute-bound prefill read about 19% slow on both
sides, and one pair whose slowness ended between its two timed windows left a real +5.5% slowdown ambiguous. So before
its first pair each case runs warm-up pairs (both sides build and time a round exactly as a pair does; none joins the
test) until ``steady``: on each side the last two round medians lie within ``tolerance`` of each other. What it waits
out is a step, not a drift: drift slower than a pair cancels in the pair's ratio and linear drift over two pairs in
the ABBA order, where a step between a pair's two timed windows reads in full in that one pair; so a third round is
not asked for (it would cost every case another pair, and on the simulated 19% start it caught nothing the pairs'
set-aside did not). The tolerance is four times the case's paired minimum effect
(``warmup_tolerance``): 2% on CUDA, where the same side's consecutive rounds of unchanged code on the H200 differ by
at most 1.5-1.7% (95th percentile) on the decode and Triton cases and a 19% step is ten times outside it; 40% on the
2-core CPU hosts, whose rounds move by tens of percent while another process takes a core. At most
``max_rounds`` warm-up rounds per side: a case whose rounds never agree (a compute-bound case whose clock steps every
few rounds) goes on to its pairs after that, and the paired document says the bound was spent.

**Budget.** A case may take as many pairs as ``factor`` times the device time its rounds take in an unpaired profile
allows (``Budget``), within a floor and a ceiling in pairs. An unpaired profile times each case in ``rounds`` rounds,
each a build, a warm-up and twice a paired round's samples; the sides report each round's build and timing seconds,
so the reference is ``rounds x`` the median of ``prepare_s + 2 x time_s`` over the case's rounds after each side's
first (whose build may compile or autotune: an unpaired profile pays that too). The case's spend is the device time
of its pairs, warm-up pairs included, its first pair counted at the median of the others. Once the warm-up ends the
plan is fixed: the pairs the rest of the budget pays for at the pairs' median cost, rounded down to an even count
(AB and BA pairs balanced), at least the floor and at most the ceiling; the sequential rule's looks are planned up
to it (``paired_stats.Rule``), so the error it promises holds wherever the case stops. A pair set aside as disturbed
is replaced beyond the plan. Pure Python (no SciPy: the GPU worker's coordinator plans with it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from attnprof.core.documents.paired import Limit


def warmup_tolerance(min_effect: float) -> float:
    """The relative agreement of consecutive warm-up rounds that counts as steady: four times ``min_effect``."""
    return 4 * min_effect


def _agree(rounds_us: Sequence[float], tolerance: float) -> bool:
    last = rounds_us[-2:]
    return max(last) <= min(last) * (1 + tolerance)


def steady(base_us: Sequence[float], head_us: Sequence[float], tolerance: float) -> bool:
    """Whether both sides' warm-up rounds (round medians in time order, microseconds) have settled: on each side the
    last two within ``tolerance`` (relative) of each other."""
    if len(base_us) < 2 or len(head_us) < 2:
        return False
    return _agree(base_us, tolerance) and _agree(head_us, tolerance)


@dataclass(frozen=True)
class RoundCost:
    """One side's round: the seconds its build and warm-up took (``prepare_s``) and its timed round (``time_s``)."""

    prepare_s: float
    time_s: float


@dataclass(frozen=True)
class Budget:
    """A case's allowance: ``factor`` times the device time of its rounds in an unpaired profile of ``rounds`` rounds
    (``None``: no device-time budget, the case may take ``ceiling`` pairs), at least ``floor`` pairs counted and at
    most ``ceiling``."""

    factor: float | None
    rounds: int
    floor: int
    ceiling: int

    def __post_init__(self) -> None:
        if self.factor is not None and not self.factor > 0:
            raise ValueError(f"factor must be > 0, got {self.factor}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if not 2 <= self.floor <= self.ceiling:
            raise ValueError(f"need 2 <= floor <= ceiling, got {self.floor} and {self.ceiling}")


@dataclass(frozen=True)
class Plan:
    """The pairs a case may count (``pairs``) and why that many: ``limit`` is ``budget`` where its budget set it (the
    floor included), ``ceiling`` where the ceiling did. Seconds of device time: ``reference_s`` its rounds in an
    unpaired profile (estimated), ``budget_s`` what it may spend (``None`` without a budget), ``spent_s`` what the
    warm-up spent, ``pair_s`` a pair's median cost."""

    pairs: int
    limit: Limit
    reference_s: float | None = None
    budget_s: float | None = None
    spent_s: float | None = None
    pair_s: float | None = None


def _even_down(n: float) -> int:
    return 2 * math.floor(n / 2 + 1e-9)


def reference_s(budget: Budget, base: Sequence[RoundCost], head: Sequence[RoundCost]) -> float | None:
    """The device seconds an unpaired profile's ``budget.rounds`` rounds of the case take, estimated from the sides'
    rounds after each one's first; ``None`` before either side has two."""
    costs = [r.prepare_s + 2 * r.time_s for side in (base, head) for r in side[1:]]
    return budget.rounds * statistics.median(costs) if costs else None


def spent_s(pair_walls_s: Sequence[float]) -> float:
    """The device seconds the case's pairs spent so far, its first pair (first builds) at the median of the others."""
    if len(pair_walls_s) < 2:
        return math.fsum(pair_walls_s)
    rest = pair_walls_s[1:]
    return statistics.median(rest) + math.fsum(rest)


def plan(budget: Budget, base: Sequence[RoundCost], head: Sequence[RoundCost], pair_walls_s: Sequence[float]) -> Plan:
    """The pairs a case may count, planned after its warm-up from what its rounds (``base``, ``head``: per side, in
    order) and its pairs so far (``pair_walls_s``: each pair's device seconds, warm-up pairs included) cost."""
    if budget.factor is None:
        return Plan(pairs=budget.ceiling, limit="ceiling")
    reference = reference_s(budget, base, head)
    later = pair_walls_s[1:] or pair_walls_s
    if reference is None or not later:
        return Plan(pairs=budget.floor, limit="budget")
    allowed = budget.factor * reference
    spent = spent_s(pair_walls_s)
    pair = statistics.median(later)
    fits = _even_down((allowed - spent) / pair) if pair > 0 else budget.ceiling
    pairs = max(budget.floor, min(budget.ceiling, fits))
    return Plan(
        pairs=pairs,
        limit="ceiling" if pairs == budget.ceiling and fits >= budget.ceiling else "budget",
        reference_s=reference,
        budget_s=allowed,
        spent_s=spent,
        pair_s=pair,
    )
