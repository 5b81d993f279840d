"""E-divisive means (Matteson & James 2014) with a permutation significance test, on plain numbers.

The divergence between the two sides of a split at tau of a segment of m points is, with alpha = 1,

    Q(tau) = 2/m * sum_cross |x_i - x_j| - 2 (m - tau) / (m (tau - 1)) * sum_left |x_i - x_k|
             - 2 tau / (m (m - tau - 1)) * sum_right |x_j - x_k|,

the form Apache Otava and MongoDB's signal-processing package use, with the split's right end at the
segment's end. The best split of every segment is found; the overall best is kept when a permutation test
(points shuffled within each segment, the best Q over all segments recomputed) says it is significant, and
the search repeats on the new segments. Sums of pairwise distances come from dominance counts, so the
statistic for every tau of a permutation costs O(m^1.5) with numpy, never an m x m matrix. Most permutations
need not even that: an upper bound on their best Q from counts on a coarse grid (``_Bounds``, one bincount)
already stays below the Q of a clear change point, and only the permutations whose bound reaches it get the
exact statistic. The decisions and p-values are those of the full test on the same permutations.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, Field

from attnprof.core.analysis.errors import AnalysisError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# Permutations are evaluated in growing batches; the test stops at the first batch that settles it.
_BATCHES = (5, 20)
# Grid of the cheap upper bound on a permutation's best Q: rank bins, and growth of the blocks of splits.
_BOUND_BINS = 16
_BOUND_STEP = 0.08


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


def _sorted_top(ascending: FloatArray, min_size: int) -> float:
    """Best Q over the allowed splits of points in ascending order, in O(m).

    Every left point is at most every right one, so the cross sum is a difference of sums, and the pair sum
    of a sorted prefix is sum_k (k x_k - sum_{i<k} x_i).
    """
    m = ascending.size
    if m < 2 * min_size:
        return -np.inf
    x = ascending - ascending[m // 2]
    j = np.arange(m, dtype=np.float64)
    before = np.cumsum(x) - x
    within_left = np.concatenate([[0.0], np.cumsum(j * x - before)])  # pairs among the first t, t = 0..m
    total = np.concatenate([[0.0], np.cumsum(x)])
    t = np.arange(min_size, m - min_size + 1, dtype=np.float64)
    ti = t.astype(np.intp)
    r = m - t
    cross = t * (total[m] - total[ti]) - r * total[ti]
    within_right = within_left[m] - within_left[ti] - cross
    q = 2.0 / m * cross - 2.0 * r / (m * (t - 1.0)) * within_left[ti] - 2.0 * t / (m * (r - 1.0)) * within_right
    return float(q.max())


def _bin_edges(sorted_values: FloatArray, bins: int) -> IntArray:
    """Rank edges of at most ``bins`` bins for ``_Bounds``, cut where the bound is loosest.

    A bin of width W (in values) spanning dH of the pooled CDF loosens the bound by about
    W dH (dH + 2 |F - H|), and |F - H| is about 1/sqrt(m) in a permutation: quantile bins alone are loose
    across the sparse stretch between two levels, equal-width bins within a level. The costliest bin is split
    at the rank that leaves its costlier half cheapest, until there are ``bins``.
    """
    m = sorted_values.size
    top = sorted_values[np.minimum(np.arange(m + 1), m - 1)]  # a bin ending at rank g spans up to top[g]
    c = 2.0 / np.sqrt(m)

    def cost(lo: int, hi: int) -> float:
        dh = (hi - lo) / m
        return float((top[hi] - sorted_values[lo]) * dh * (dh + c)) if hi > lo else 0.0

    edges = [0, m]
    costs = [cost(0, m)]
    while len(edges) - 1 < bins:
        k = int(np.argmax(costs))
        if costs[k] <= 0:
            break
        lo, hi = edges[k], edges[k + 1]
        if hi - lo < 2:
            costs[k] = 0.0
            continue
        g = np.arange(lo + 1, hi)
        dl, dr = (g - lo) / m, (hi - g) / m
        left = (top[g] - sorted_values[lo]) * dl * (dl + c)
        right = (top[hi] - sorted_values[g]) * dr * (dr + c)
        split = int(g[np.argmin(np.maximum(left, right))])
        edges.insert(k + 1, split)
        costs[k : k + 1] = [cost(lo, split), cost(split, hi)]
    return np.asarray(edges, dtype=np.int64)


class _Bounds:
    """Upper bounds on the best Q of permutations of one segment, from counts on a coarse grid.

    With F the empirical CDF of the first t points, G that of the other r = m - t and H that of all m,
    Q(t) = t r / m * E, where E (U-statistic energy distance) is at most its V-statistic form
    2 * integral (F - G)^2 dz, and F - G = m (F - H) / r = -m (G - H) / t. On a grid of rank bins (H within a
    bin lies between its edges; see ``_bin_edges``) and blocks of t (prefix counts grow with t), F and G lie
    in boxes whose corners give (F - H)^2 and (G - H)^2 at most, so one bincount per permutation bounds Q for
    every split, at a fraction of the cost of Q itself. The bound is loose for a typical permutation (the
    V-statistic adds about the mean distance between points), which is what a real change point's Q stands
    far above.
    """

    def __init__(self, sorted_values: FloatArray, min_size: int) -> None:
        m = sorted_values.size
        edges = _bin_edges(sorted_values, _BOUND_BINS)
        self.bins = edges.size - 1
        self.width = sorted_values[np.minimum(edges[1:], m - 1)] - sorted_values[edges[:-1]]
        # Blocks of t grow geometrically away from both ends, where Q's coefficients change fastest.
        ts = [min_size]
        while ts[-1] < m // 2:
            ts.append(min(m // 2, max(ts[-1] + 1, int(ts[-1] * (1 + _BOUND_STEP)))))
        grid = np.unique([*ts, *(m - t for t in ts)])
        grid = grid[(grid >= min_size) & (grid <= m - min_size)]
        if grid.size == 1:
            grid = np.repeat(grid, 2)
        self.blocks = grid.size
        self.group = np.searchsorted(grid, np.arange(m), side="right").astype(np.intp) * self.bins
        self.bin_of_rank = (np.searchsorted(edges, np.arange(m), side="right") - 1).astype(np.intp)
        t0, t1 = grid[:-1].astype(np.float64), grid[1:].astype(np.float64)
        f32 = np.float32
        self.edges = edges.astype(f32)
        self.h_low, self.h_high = ((edges[:-1] + 1) / m).astype(f32), (edges[1:] / m).astype(f32)
        self.inv_t0, self.inv_t1 = (1 / t0).astype(f32)[:, None], (1 / t1).astype(f32)[:, None]
        self.inv_r0, self.inv_r1 = (1 / (m - t0)).astype(f32)[:, None], (1 / (m - t1)).astype(f32)[:, None]
        self.width32 = self.width.astype(f32)
        # The boxes are evaluated in float32: every corner is within 2e-6 of its exact square (|F - H| <= 2,
        # counts exact), so adding 3e-6 of the total width per block, and 1e-5 relative, keeps the bound an
        # upper bound.
        self.slack = 3e-6 * float(self.width.sum())
        self.coef_f = 2.0 * t1 * m / (m - t1) * (1 + 1e-5)
        self.coef_g = 2.0 * (m - t0) * m / t0 * (1 + 1e-5)

    def __call__(self, bins: IntArray) -> FloatArray:
        """Upper bound on Q's maximum over the allowed splits, per permutation.

        ``bins[i, j]``: the rank bin of the point at position j of permutation i.
        """
        p = bins.shape[0]
        k, nb = self.bins, self.blocks
        cell = bins + self.group + (np.arange(p, dtype=np.intp) * ((nb + 1) * k))[:, None]
        count = np.bincount(cell.ravel(), minlength=p * (nb + 1) * k).reshape(p, nb + 1, k)[:, :nb]
        # below[:, j, e]: how many of the first grid[j] points rank below edges[e]
        below = np.zeros((p, nb, k + 1), dtype=np.float32)
        np.cumsum(count, axis=1, out=below[:, :, 1:])
        np.cumsum(below[:, :, 1:], axis=2, out=below[:, :, 1:])
        by_f = self._side(below[:, :-1, :-1] * self.inv_t1, below[:, 1:, 1:] * self.inv_t0) * self.coef_f
        after = self.edges - below
        by_g = self._side(after[:, 1:, :-1] * self.inv_r0, after[:, :-1, 1:] * self.inv_r1) * self.coef_g
        return np.asarray(np.minimum(by_f, by_g).max(axis=1), dtype=np.float64)

    def _side(self, low: NDArray[np.float32], high: NDArray[np.float32]) -> FloatArray:
        """Bound on the integral of (F - H)^2, per block, from the box [low, high] that F lies in per bin."""
        low -= self.h_high
        high -= self.h_low
        np.square(low, out=low)
        np.square(high, out=high)
        np.maximum(low, high, out=low)
        return np.asarray(low @ self.width32, dtype=np.float64) + self.slack


class _Shuffles:
    """Random permutations of one segment and their best Q, each computed only when a test needs it.

    Each segment draws from a generator of its own, seeded by the seed and the segment's bounds, so the
    permutations a segment sees do not depend on which segments were tested before it or in what batches:
    row i is the same whether rows are drawn 5 at a time or 99 at once.
    """

    def __init__(self, seg: FloatArray, min_size: int, seed: int, a: int, b: int) -> None:
        self.seg, self.min_size = seg, min_size
        self.rng = np.random.default_rng([seed, a, b])
        self.ranks = _ranks(seg)
        self.sorted = np.sort(seg)
        self.bounds = _Bounds(self.sorted, min_size)
        self.bin_of_point = self.bounds.bin_of_rank[self.ranks]
        self.perms = np.empty((0, seg.size), dtype=np.int32)
        self.upper = np.empty(0)
        self.exact = np.empty(0)

    def _draw(self, upto: int) -> None:
        n = upto - self.upper.size
        if n <= 0:
            return
        m = self.seg.size
        perm = self.rng.permuted(np.broadcast_to(np.arange(m, dtype=np.int32), (n, m)), axis=1)
        self.perms = np.concatenate([self.perms, perm])
        self.upper = np.concatenate([self.upper, self.bounds(self.bin_of_point[perm])])
        self.exact = np.concatenate([self.exact, np.full(n, np.nan)])

    def exceeds(self, rows: IntArray, observed: float, tol: float) -> NDArray[np.bool_]:
        """Whether the best Q of each permutation in ``rows`` reaches ``observed - tol``.

        Rows whose bound stays below ``observed - 2 tol`` cannot (Q in float32 sums is within ``tol``);
        only the rest cost an exact Q, which is kept for later tests.
        """
        self._draw(int(rows.max()) + 1 if rows.size else 0)
        maybe = self.upper[rows] >= observed - 2.0 * tol
        todo = rows[maybe & np.isnan(self.exact[rows])]
        if todo.size:
            perm = self.perms[todo]
            q = q_curves(self.seg[perm], self.ranks[perm], self.sorted)
            q[:, : self.min_size] = -np.inf
            q[:, self.seg.size - self.min_size + 1 :] = -np.inf
            self.exact[todo] = q.max(axis=1)
        out = np.zeros(rows.size, dtype=np.bool_)
        out[maybe] = self.exact[rows[maybe]] >= observed - tol
        return out


class _Null:
    """The permutation null, per segment, kept across tests.

    A segment that a new change point did not split has the same permutation distribution as before, so
    only new segments cost anything. A segment whose points, sorted (the arrangement that maximises Q),
    cannot reach the observed Q cannot reach it in any permutation either: it is skipped.
    """

    def __init__(self, x: FloatArray, min_size: int, seed: int) -> None:
        self.x, self.min_size, self.seed = x, min_size, seed
        self.shuffles: dict[tuple[int, int], _Shuffles] = {}
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
            self.bounds[(a, b)] = max(_sorted_top(ordered, self.min_size), _sorted_top(-ordered[::-1], self.min_size))
        return self.bounds[(a, b)]

    def _shuffles(self, a: int, b: int) -> _Shuffles:
        if (a, b) not in self.shuffles:
            self.shuffles[(a, b)] = _Shuffles(self.x[a:b], self.min_size, self.seed, a, b)
        return self.shuffles[(a, b)]

    def p_value(self, segments: list[tuple[int, int]], observed: float, permutations: int, alpha: float) -> float:
        """(exceedances + 1) / (permutations + 1), stopped as soon as it can no longer reach ``alpha``.

        A permutation exceeds when the best Q of any segment, shuffled, reaches the observed Q. Stopping at
        the first batch that holds more exceedances than ``alpha`` allows is Besag and Clifford's (1991)
        sequential test: it rejects exactly when the full test would, and every point it accepts was
        checked against all ``permutations``.
        """
        limit = alpha * (permutations + 1) - 1.0  # most exceedances that still accept
        # Float32 block sums make Q exact to ~1e-6 relative: closer than that is a tie.
        tol = 1e-5 * abs(observed)
        live = [s for s in segments if self._bound(*s) >= observed - 2 * tol]
        # The segments most likely to exceed go first, so a test that fails stops soonest.
        live.sort(key=lambda s: -(c[1] if (c := self.candidate(*s)) is not None else -np.inf))
        exceed = 0
        for done in sorted({min(n, permutations) for n in (*_BATCHES, permutations)}):
            hit = np.zeros(done, dtype=np.bool_)
            for seg in live:
                rows = np.flatnonzero(~hit)
                hit[rows] = self._shuffles(*seg).exceeds(rows, observed, tol)
                exceed = int(hit.sum())
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
    null = _Null(x, min_size, seed % 2**63)
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
