"""A case's rounds: each round's own median, and the distinct levels those medians land on.

A profile takes each case's samples in rounds, the case built again in each (``latency_us.round_samples`` says how
many samples each round took, in time order). Some kernels run at one of a few distinct speeds from one build to the
next: on the H200, hd256 through the efficient backend landed its rounds on levels about 3% and 5% below its most
common one (spans 3.3-6.7% in 50 of 58 runs), and cuDNN's MQA decode on levels 3.8-15.1% apart (16 of 16 runs:
docs/findings.md#levels-between-builds). Within a round the samples agree; the run's median depends on how many
rounds drew each level, and so moves from run to run (a comparison allows for that: ``analysis.timing``).

:func:`round_levels` finds such levels. It sorts the round medians and cuts between two neighbours that lie
further apart than :data:`LEVEL_GAP` and than twice a round median's own 95% confidence half-width (distribution-free;
the median over the rounds), so that rounds which differ only by sampling noise are rarely cut apart (none in 400
simulated runs of one level with rounds of 30 samples or more, at 0.8% and at 30% noise). There are levels when at
least two of the groups hold :data:`LEVEL_MIN_ROUNDS` rounds or more: a single round set apart is a slow (or fast)
round, not a level, and is named as such. The rule finds groups, not their cause: the profiler builds each case again
for each round, and a step in time (a GPU slowing halfway) groups the rounds too.

Torch-free and numpy-free: the report uses it, and the timing loop stops on :func:`relative_ci_half_width`.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from attnprof.core.documents.result import LatencyStats
from attnprof.core.units import fmt_duration_us

LEVEL_GAP: Final = 0.01  # neighbouring round medians further apart than this (relative) may be two levels
LEVEL_MIN_ROUNDS: Final = 2  # a level is seen in at least this many rounds
MIN_ROUNDS: Final = 4  # fewer rounds cannot show two levels of two rounds and the gap between them


@dataclass(frozen=True)
class Level:
    median_us: float  # the median of the level's round medians
    rounds: int


@dataclass(frozen=True)
class Levels:
    """The levels a case's rounds landed on, fastest first (groups of one round included, as seen)."""

    levels: tuple[Level, ...]

    @property
    def recurring(self) -> tuple[Level, ...]:
        return tuple(level for level in self.levels if level.rounds >= LEVEL_MIN_ROUNDS)

    @property
    def span(self) -> float:
        """Relative distance from the fastest to the slowest level seen in at least two rounds."""
        seen = self.recurring
        return seen[-1].median_us / seen[0].median_us - 1.0

    def describe(self) -> str:
        """``rounds on N levels X% apart (a µs ×k, b µs ×m; one round at c µs)``: the levels seen in at least two
        rounds, then the rounds set apart alone."""
        seen = self.recurring
        parts = ", ".join(f"{fmt_duration_us(lv.median_us)} ×{lv.rounds}" for lv in seen)
        alone = [lv for lv in self.levels if lv.rounds < LEVEL_MIN_ROUNDS]
        if alone:
            parts += "; " + ("one round" if len(alone) == 1 else f"{len(alone)} rounds") + " alone at "
            parts += ", ".join(fmt_duration_us(lv.median_us) for lv in alone)
        return (
            f"rounds on {len(seen)} levels {self.span:.1%} apart ({parts}): the case is built again for each round, "
            "and the run's median mixes the levels its rounds drew"
        )


def median_ci(sorted_values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics (values sorted)."""
    n = len(sorted_values)
    if n < 3:
        return sorted_values[0], sorted_values[-1]
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return sorted_values[lo], sorted_values[hi]


def relative_ci_half_width(samples: list[float]) -> float:
    ordered = sorted(samples)
    lo, hi = median_ci(ordered)
    med = statistics.median(ordered)
    return (hi - lo) / 2 / med if med > 0 else math.inf


def round_slices(latency: LatencyStats) -> list[list[float]] | None:
    """Each round's samples, in time order; ``None`` when the document does not say which samples each round took."""
    if latency.round_samples is None:
        return None
    out, start = [], 0
    for n in latency.round_samples:
        out.append(latency.samples[start : start + n])
        start += n
    return out


def round_medians(latency: LatencyStats) -> list[float] | None:
    """Each round's median, in time order; ``None`` when the document does not say which samples each round took."""
    rounds = round_slices(latency)
    return None if rounds is None else [statistics.median(r) for r in rounds]


def _half_width(samples: Sequence[float]) -> float:
    """Relative half-width of the distribution-free 95% confidence interval of the median of ``samples``; unknown
    (infinite) under 3 samples, so that rounds too small to say anything never make levels."""
    return relative_ci_half_width(list(samples)) if len(samples) >= 3 else math.inf


def find_levels(medians: Sequence[float], half_widths: Sequence[float]) -> Levels | None:
    """The levels of round medians (``half_widths``: each round median's relative 95% half-width), or ``None``."""
    if len(medians) < MIN_ROUNDS or min(medians) <= 0:
        return None
    gap = max(LEVEL_GAP, 2.0 * statistics.median(half_widths)) if half_widths else LEVEL_GAP
    ordered = sorted(medians)
    groups: list[list[float]] = [[ordered[0]]]
    for previous, value in itertools.pairwise(ordered):
        if value / previous - 1.0 > gap:
            groups.append([])
        groups[-1].append(value)
    levels = tuple(Level(statistics.median(g), len(g)) for g in groups)
    if sum(1 for level in levels if level.rounds >= LEVEL_MIN_ROUNDS) < 2:
        return None
    return Levels(levels)


def round_levels(latency: LatencyStats | None) -> Levels | None:
    """The levels a case's rounds landed on, or ``None`` (one level, too few rounds, or rounds not recorded)."""
    rounds = round_slices(latency) if latency is not None else None
    if rounds is None:
        return None
    return find_levels([statistics.median(r) for r in rounds], [_half_width(r) for r in rounds])
