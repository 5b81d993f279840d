"""E-divisive means (Matteson & James 2014) with a permutation significance test, on plain numbers.

The divergence between the two sides of a split at tau of a segment of m points is, with alpha = 1,

    Q(tau) = 2/m * sum_cross |x_i - x_j| - 2 (m - tau) / (m (tau - 1)) * sum_left |x_i - x_k|
             - 2 tau / (m (m - tau - 1)) * sum_right |x_j - x_k|,

the form Apache Otava and MongoDB's signal-processing package use, with the split's right end at the
segment's end. The best split of every segment is found; the overall best is kept when a permutation test
(points shuffled within each segment, the best Q over all segments recomputed) says it is significant, and
the search repeats on the new segments. Sums of pairwise distances come from dominance counts, so the
statistic for every tau of every permutation costs O(m^1.5) with numpy, never an m x m matrix per
permutation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, Field

from profiler_core.analysis.errors import AnalysisError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# Permutations are evaluated in batches; the test stops at the first batch that settles it.
_BATCH = 20


class ChangePoint(BaseModel):
    """A change point: the series is different from ``index`` on."""

    index: int = Field(description="first point of the new segment (0-based)")
    mean_before: float = Field(description="mean of the segment that ends at index")
    mean_after: float = Field(description="mean of the segment that starts at index")
    change: float | None = Field(description="mean_after / mean_before - 1; null when mean_before is 0")
    p: float = Field(description="permutation p-value when the point was accepted")
    statistic: float = Field(description="the e-divisive divergence Q at the split")


def _dominance(ranks: IntArray, sorted_values: FloatArray) -> tuple[FloatArray, FloatArray]:
    """For each row and position j: how many earlier points rank lower, and the sum of their values.

    Positions and ranks are both cut into blocks of b ~ sqrt(m). An earlier point of lower rank is either
    in j's own position block (compared directly), or in an earlier position block and a lower rank block
    (read from a cumulative block-by-block table), or in an earlier position block and j's own rank block
    (compared directly, rank block by rank block). Cost O(m sqrt(m)) per row. ``ranks`` are distinct.
    """
    p, m = ranks.shape
    b = max(4, math.ceil(math.sqrt(m) * 1.5))
    nb = -(-m // b)
    size = nb * b
    if size > m:
        # Padding goes after every real point and above every real rank, so it is never counted.
        ranks = np.concatenate([ranks, np.broadcast_to(np.arange(m, size), (p, size - m))], axis=1)
        sorted_values = np.concatenate([sorted_values, np.zeros(size - m)])
    values = sorted_values[ranks]
    tri = np.tri(b, b, -1, dtype=np.float32)
    rows = np.arange(p)[:, None]
    # 1. same position block, earlier position, lower rank
    small = np.int16 if size < 2**15 else np.int32
    r3 = ranks.astype(small).reshape(p, nb, b)
    pair = np.empty((p, nb, b, b), dtype=np.float32)
    np.less(r3[:, :, None, :], r3[:, :, :, None], out=pair, casting="unsafe")
    pair *= tri
    # float32 is exact for the counts and ample for block sums of the (centred) values.
    both = np.empty((p, nb, b, 2), dtype=np.float32)
    both[..., 0] = values.reshape(p, nb, b)
    both[..., 1] = 1.0
    own = np.matmul(pair, both).reshape(p, size, 2)
    # 2. same rank block, earlier position block, lower rank (indexed by rank)
    block_of_rank = np.empty((p, size), dtype=small)
    block_of_rank[rows, ranks] = np.arange(size) // b
    b3 = block_of_rank.reshape(p, nb, b)
    np.less(b3[:, :, None, :], b3[:, :, :, None], out=pair, casting="unsafe")
    pair *= tri
    by_rank = np.empty((nb, b, 2), dtype=np.float32)
    by_rank[..., 0] = sorted_values.reshape(nb, b)
    by_rank[..., 1] = 1.0
    same_rank_block = np.matmul(pair, by_rank).reshape(p, size, 2)[rows, ranks]
    # 3. earlier position block, lower rank block: 2-D cumulative table of (count, value sum)
    rank_block = ranks // b
    pos_block = np.arange(size) // b
    width = nb + 1
    cell = (rows * width + pos_block + 1) * width + rank_block + 1
    cells = p * width * width
    count = np.bincount(cell.ravel(), minlength=cells).reshape(p, width, width).astype(np.float64)
    total = np.bincount(cell.ravel(), weights=values.ravel(), minlength=cells).reshape(p, width, width)
    query = ((rows * width + pos_block) * width + rank_block).ravel()
    table = [np.cumsum(np.cumsum(t, axis=1), axis=2).ravel()[query].reshape(p, size) for t in (count, total)]
    n_lower = own[..., 1] + same_rank_block[..., 1] + table[0]
    s_lower = own[..., 0] + same_rank_block[..., 0] + table[1]
    return n_lower[:, :m], s_lower[:, :m]


def q_curves(values: FloatArray, ranks: IntArray, sorted_values: FloatArray) -> FloatArray:
    """Q(tau) for every split tau of every row (rows: permutations of one segment); Q[:, tau].

    ``ranks`` are each row's ranks (0..m-1, distinct) and ``sorted_values`` the segment sorted, shared by
    all rows. Entries with tau < 2 or m - tau < 2 are -inf.
    """
    p, m = values.shape
    # Q depends only on differences: centring keeps the float32 block sums in _dominance accurate.
    centre = sorted_values[m // 2]
    values = values - centre
    sorted_values = sorted_values - centre
    count, smaller = _dominance(ranks, sorted_values)
    j = np.arange(m)
    prefix = np.cumsum(values, axis=1) - values
    # sum over earlier points of |x_j - x_i|
    left = values * (2.0 * count - j) - 2.0 * smaller + prefix
    cs = np.concatenate([[0.0], np.cumsum(sorted_values)[:-1]])
    to_all = sorted_values * (2.0 * np.arange(m) - m) - 2.0 * cs + sorted_values.sum()
    right = to_all[ranks] - left
    zeros = np.zeros((p, 1))
    within_left = np.concatenate([zeros, np.cumsum(left, axis=1)], axis=1)[:, :m]
    within_right = np.cumsum(right[:, ::-1], axis=1)[:, ::-1]
    grand = within_left[:, -1:] + left[:, -1:]
    cross = grand - within_left - within_right
    tau = j.astype(np.float64)
    q = np.full((p, m), -np.inf)
    ok = (tau >= 2) & (m - tau >= 2)
    t, r = tau[ok], m - tau[ok]
    q[:, ok] = (
        2.0 / m * cross[:, ok]
        - 2.0 * r / (m * (t - 1.0)) * within_left[:, ok]
        - 2.0 * t / (m * (r - 1.0)) * within_right[:, ok]
    )
    return q


def _ranks(segment: FloatArray) -> IntArray:
    order = np.argsort(segment, kind="stable")
    ranks = np.empty(segment.size, dtype=np.int64)
    ranks[order] = np.arange(segment.size)
    return ranks


def _best(segment: FloatArray, min_size: int) -> tuple[int, float] | None:
    m = segment.size
    if m < 2 * min_size:
        return None
    q = q_curves(segment[None, :], _ranks(segment)[None, :], np.sort(segment))[0]
    q[:min_size] = -np.inf
    q[m - min_size + 1 :] = -np.inf
    tau = int(np.argmax(q))
    return (tau, float(q[tau])) if np.isfinite(q[tau]) else None


def _permuted_max(seg: FloatArray, min_size: int, rng: np.random.Generator, n: int) -> FloatArray:
    """Best Q of one segment for each of ``n`` random permutations of its points."""
    m = seg.size
    if m < 2 * min_size:
        return np.full(n, -np.inf)
    ranks = _ranks(seg)
    perm = rng.permuted(np.broadcast_to(np.arange(m), (n, m)), axis=1)
    q = q_curves(seg[perm], ranks[perm], np.sort(seg))
    q[:, :min_size] = -np.inf
    q[:, m - min_size + 1 :] = -np.inf
    return np.asarray(q.max(axis=1), dtype=np.float64)


class _Null:
    """The permutation null, per segment, kept across tests.

    A segment that a new change point did not split has the same permutation distribution as before, so
    only new segments cost anything. A segment whose points, sorted (the arrangement that maximises Q),
    cannot reach the observed Q cannot reach it in any permutation either: it is skipped.
    """

    def __init__(self, x: FloatArray, min_size: int, rng: np.random.Generator) -> None:
        self.x, self.min_size, self.rng = x, min_size, rng
        self.cache: dict[tuple[int, int], FloatArray] = {}
        self.best: dict[tuple[int, int], tuple[int, float] | None] = {}
        self.bounds: dict[tuple[int, int], float] = {}

    def candidate(self, a: int, b: int) -> tuple[int, float] | None:
        """Best split (index within the segment, Q) of x[a:b], or ``None`` if it is too short."""
        if (a, b) not in self.best:
            self.best[(a, b)] = _best(self.x[a:b], self.min_size)
        return self.best[(a, b)]

    def _bound(self, a: int, b: int) -> float:
        if (a, b) not in self.bounds:
            ordered = np.sort(self.x[a:b])
            tops = [_best(v, self.min_size) for v in (ordered, ordered[::-1].copy())]
            self.bounds[(a, b)] = max((t[1] for t in tops if t is not None), default=-np.inf)
        return self.bounds[(a, b)]

    def _segment(self, a: int, b: int, upto: int) -> FloatArray:
        have = self.cache.get((a, b), np.empty(0))
        if have.size < upto:
            more = _permuted_max(self.x[a:b], self.min_size, self.rng, upto - have.size)
            have = np.concatenate([have, more])
            self.cache[(a, b)] = have
        return have[:upto]

    def p_value(self, segments: list[tuple[int, int]], observed: float, permutations: int, alpha: float) -> float:
        """(exceedances + 1) / (permutations + 1); stops as soon as it can no longer reach ``alpha``."""
        limit = alpha * (permutations + 1) - 1.0  # most exceedances that still accept
        # Float32 block sums make Q exact to ~1e-6 relative: closer than that is a tie.
        tol = 1e-5 * abs(observed)
        live = [s for s in segments if self._bound(*s) >= observed - 2 * tol]
        # The segments most likely to exceed go first, so a test that fails stops soonest.
        live.sort(key=lambda s: -(c[1] if (c := self.candidate(*s)) is not None else -np.inf))
        # A first small batch settles most tests that fail; one that survives it needs every permutation,
        # and one large batch computes those fastest.
        exceed = 0
        for done in (min(_BATCH, permutations), permutations):
            best = np.full(done, -np.inf)
            for seg in live:
                best = np.maximum(best, self._segment(*seg, done))
                exceed = int(np.sum(best >= observed - tol))
                if exceed > limit:
                    return (exceed + 1) / (done + 1)
        return (exceed + 1) / (permutations + 1)


def e_divisive(
    values: Sequence[float] | NDArray[np.floating[Any]],
    *,
    alpha: float = 0.01,
    permutations: int = 99,
    min_size: int = 5,
    seed: int = 0,
) -> list[ChangePoint]:
    """Change points of a series by e-divisive means with a permutation test, in index order.

    ``alpha``: the largest permutation p-value, (exceedances + 1) / (permutations + 1), that accepts a point.
    ``min_size``: fewest points on either side of a change. Deterministic for a given ``seed``. Raises
    ``AnalysisError`` on bad arguments or values that are not finite.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise AnalysisError("e_divisive takes a one-dimensional series")
    if not np.all(np.isfinite(x)):
        raise AnalysisError("the series holds values that are not finite numbers")
    if not 0.0 < alpha < 1.0:
        raise AnalysisError(f"alpha must lie in (0, 1), got {alpha!r}")
    if permutations < 1:
        raise AnalysisError(f"permutations must be at least 1, got {permutations!r}")
    if min_size < 2:
        raise AnalysisError(f"min_size must be at least 2, got {min_size!r}")
    null = _Null(x, min_size, np.random.default_rng(seed % 2**63))
    cuts: list[int] = []
    accepted: dict[int, tuple[float, float]] = {}
    while True:
        segments = list(itertools.pairwise([0, *sorted(cuts), x.size]))
        candidates = []
        for a, b in segments:
            best = null.candidate(a, b)
            if best is not None:
                candidates.append((best[1], a + best[0]))
        if not candidates:
            break
        observed, index = max(candidates)
        p = null.p_value(segments, observed, permutations, alpha)
        if p > alpha:
            break
        cuts.append(index)
        accepted[index] = (p, observed)
    return _describe(x, sorted(cuts), accepted)


def _describe(x: FloatArray, cuts: list[int], accepted: dict[int, tuple[float, float]]) -> list[ChangePoint]:
    bounds = [0, *cuts, x.size]
    out = []
    for i, cut in enumerate(cuts):
        before = float(x[bounds[i] : cut].mean())
        after = float(x[cut : bounds[i + 2]].mean())
        p, q = accepted[cut]
        change = after / before - 1.0 if before != 0 else None
        out.append(ChangePoint(index=cut, mean_before=before, mean_after=after, change=change, p=p, statistic=q))
    return out
