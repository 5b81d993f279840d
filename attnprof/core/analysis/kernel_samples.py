"""A kernel's own noise: the interval of its median duration over every round's traced iterations, and the interval
of its change between two sides.

Each round of a profile (and each side's round of a paired run) builds the case again, times it, then traces a few
iterations (``[suite.timing] trace_iters``). A kernel's durations come in rounds: within a round its iterations agree,
and a round can fall in a disturbed stretch as a whole (on an H100, the first two or three rounds of a decode case
after a compute-heavy one read about 19% slow, kernels and case alike). So the rounds are the units: the interval of
a kernel's median resamples the rounds with replacement and the iterations within each chosen round (a two-stage
bootstrap), and takes the median of what was drawn. One round among five that lies far off moves the median of the
pooled samples in few draws; rounds that disagree among themselves give a wide interval, which is what they show.

The change of a kernel between a baseline and a candidate is the ratio of the two pooled medians; its interval comes
from drawing both sides independently the same way. A kernel is named as having moved only where that interval
excludes no change (``analysis.kernels``). The draws come from a generator seeded by the kernel's identity, so the
same documents always give the same intervals. Durations are microseconds; changes are fractions.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Final

import numpy as np

from attnprof.core.documents.result import DurationStats

LEVEL: Final = 0.95
REPLICATES: Final = 1000
MIN_ROUNDS: Final = 2
"""Rounds a side needs for an interval: one round cannot show that it was the disturbed one."""
SEED: Final = 20261207


def rounds_of(stats: DurationStats) -> list[np.ndarray] | None:
    """A kernel's samples split by round (time order), or None where the document holds no samples."""
    if not stats.samples:
        return None
    sizes = stats.round_samples or [len(stats.samples)]
    out, start = [], 0
    for n in sizes:
        out.append(np.asarray(stats.samples[start : start + n], dtype=float))
        start += n
    return out


def _rng(identity: str) -> np.random.Generator:
    return np.random.default_rng([SEED, zlib.crc32(identity.encode())])


def median_draws(rounds: Sequence[np.ndarray], rng: np.random.Generator, replicates: int = REPLICATES) -> np.ndarray:
    """``replicates`` medians of the pooled samples, each from the rounds drawn with replacement and the iterations of
    each drawn round drawn with replacement in turn."""
    sizes = np.array([len(r) for r in rounds])
    width = int(sizes.max())
    padded = np.full((len(rounds), width), np.nan)
    for i, r in enumerate(rounds):
        padded[i, : len(r)] = r
    chosen = rng.integers(0, len(rounds), size=(replicates, len(rounds)))
    counts = sizes[chosen]
    within = (rng.random((replicates, len(rounds), width)) * counts[..., None]).astype(int)
    drawn = padded[chosen[..., None], within]
    drawn[np.arange(width) >= counts[..., None]] = np.nan
    medians: np.ndarray = np.nanmedian(drawn.reshape(replicates, -1), axis=1)
    return medians


def pooled_median(rounds: Sequence[np.ndarray]) -> float:
    return float(np.median(np.concatenate(list(rounds))))


def median_interval(rounds: Sequence[np.ndarray], identity: str) -> tuple[float, float] | None:
    """The 95% interval of the pooled median (µs) of one side's rounds; None under ``MIN_ROUNDS`` rounds."""
    if len(rounds) < MIN_ROUNDS:
        return None
    draws = median_draws(rounds, _rng(identity))
    low, high = np.quantile(draws, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return float(low), float(high)


def change_interval(
    baseline: Sequence[np.ndarray], candidate: Sequence[np.ndarray], identity: str
) -> tuple[float, float, float] | None:
    """The relative change of the pooled median from ``baseline``'s rounds to ``candidate``'s, and its 95% interval
    (fractions: 0.05 = 5% longer); None where a side has under ``MIN_ROUNDS`` rounds or a baseline median of 0."""
    if len(baseline) < MIN_ROUNDS or len(candidate) < MIN_ROUNDS:
        return None
    before = pooled_median(baseline)
    if before <= 0:
        return None
    rng = _rng(identity)
    b = median_draws(baseline, rng)
    c = median_draws(candidate, rng)
    ok = b > 0
    if not ok.any():
        return None
    ratio = c[ok] / b[ok] - 1.0
    low, high = np.quantile(ratio, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return pooled_median(candidate) / before - 1.0, float(low), float(high)
