"""The sequential test of a paired A/B run: one case's paired round differences to slower, faster, same or not yet.

Each pair is a base round and a head round run back to back on the same device; its difference is
``d = ln(head_us / base_us)``, so drift slower than a pair cancels, and the order alternates (ABBA) so drift within
a pair cancels over pairs too. ``d`` of successive pairs are taken as independent draws around the true log
ratio (the workload is built again for every round, so where its tensors land varies from pair to pair as well).

The rule looks at the pairs after ``min_pairs`` and then every ``step`` pairs up to ``max_pairs``; at each look an
interval on the location of ``d`` at level ``1 - alpha / K`` (K looks planned: Bonferroni, so the chance that any
look of an A/A case errs is at most ``alpha``) decides. The location is the mean of ``d`` trimmed by ``trim`` at each
end (Yuen's trimmed-mean t: ``g = floor(trim x n)`` pairs dropped from each end, the spread from the winsorized
variance, ``n - 2g - 1`` degrees of freedom), so below ``1 / trim`` pairs (10 by default) it is Student's t on the
plain mean. Why trim: on the H200 a pair whose two timed windows straddle an SM clock step reads 2-6% off either way
(the clock NVML reports is the same for both sides: it is sampled too rarely to see the step), one or two in 15 on
a compute-bound case after it has run for seconds; such a pair alone can keep the plain mean's interval from
settling a 1% change. Measured on recorded pairs: bench/reports/h200-paired.md. The rule:

- **slower** (faster): the interval lies above (below) zero and the estimate is at least the minimum effect;
- **same**: the interval lies within +-ln(1 + minimum effect): whatever changed is smaller than the minimum effect;
- otherwise the next look; after the last, **ambiguous**, with how many more pairs would settle it at the spread
  seen so far.

Pure Python (``math`` only): the GPU worker's coordinator stops rounds with it, where scipy may be absent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

State = Literal["slower", "faster", "same", "ambiguous"]


@dataclass(frozen=True)
class Rule:
    """``min_effect`` and the estimate are relative (0.005 = 0.5%); ``alpha`` is two-sided, for the whole sequence."""

    min_effect: float
    alpha: float = 0.05
    min_pairs: int = 4
    max_pairs: int = 15
    step: int = 2
    trim: float = 0.1  # fraction of the pairs set aside at each end; 0: Student's t on the mean

    def __post_init__(self) -> None:
        if not 0 <= self.min_effect < 1:
            raise ValueError(f"min_effect must be a fraction in [0, 1), got {self.min_effect}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 2 <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"need 2 <= min_pairs <= max_pairs, got {self.min_pairs} and {self.max_pairs}")
        if self.step < 1:
            raise ValueError(f"step must be >= 1, got {self.step}")
        if not 0 <= self.trim < 0.25:
            raise ValueError(f"trim must be in [0, 0.25), got {self.trim}")

    @property
    def looks(self) -> list[int]:
        """The pair counts at which the rule looks: ``min_pairs``, every ``step`` after it, and ``max_pairs``."""
        out = list(range(self.min_pairs, self.max_pairs + 1, self.step))
        if out[-1] != self.max_pairs:
            out.append(self.max_pairs)
        return out

    @property
    def look_alpha(self) -> float:
        return self.alpha / len(self.looks)


@dataclass(frozen=True)
class Assessment:
    """What the pairs so far say. ``change`` and the interval are relative changes of the head's time over the
    base's (0.01 = the head 1% slower); ``p`` is the two-sided p of "no change", Bonferroni-adjusted over the
    looks planned (valid whatever look the rule stopped at); ``more_pairs`` is, for ``ambiguous``, how many more
    pairs would settle the answer if the spread stayed what it is."""

    state: State
    pairs: int
    change: float
    low: float
    high: float
    level: float
    p: float
    sd: float  # the spread of d (log ratios) the interval uses: sqrt(n) x its standard error
    more_pairs: int | None = None
    trimmed: int = 0  # pairs set aside at each end


def log_ratios(base_us: Sequence[float], head_us: Sequence[float]) -> list[float]:
    return [math.log(h / b) for b, h in zip(base_us, head_us, strict=True)]


def assess(d: Sequence[float], rule: Rule, *, final: bool = False) -> Assessment:
    """Apply the rule to the log ratios ``d`` (one per pair, in order). ``final``: no more pairs will come (the last
    look, or the rounds were cut short), so an unsettled answer is ``ambiguous``; otherwise it is ``ambiguous`` too
    but the caller goes on to the next look."""
    n = len(d)
    if n < 2:
        raise ValueError("a paired test needs at least 2 pairs")
    k = len(rule.looks)
    level_alpha = rule.alpha / k
    mean, sd, df, g = location(d, rule.trim)
    se = sd / math.sqrt(n)
    t_crit = t_quantile(1 - level_alpha / 2, df)
    half = t_crit * se
    low, high = mean - half, mean + half
    no_spread = 0.0 if mean != 0 else 1.0
    p = min(1.0, k * 2 * t_sf(abs(mean) / se, df)) if se > 0 else no_spread
    bound = math.log1p(rule.min_effect)
    state: State = "ambiguous"
    if low > 0 and mean >= bound:
        state = "slower"
    elif high < 0 and -mean >= bound:
        state = "faster"
    elif -bound < low and high < bound:
        state = "same"
    more = None
    if state == "ambiguous":
        more = _more_pairs(mean, sd, n, bound, t_crit)
    return Assessment(
        state=state,
        pairs=n,
        change=math.expm1(mean),
        low=math.expm1(low),
        high=math.expm1(high),
        level=1 - level_alpha,
        p=p,
        sd=sd,
        more_pairs=more,
        trimmed=g,
    )


def location(d: Sequence[float], trim: float) -> tuple[float, float, int, int]:
    """The trimmed mean of ``d``, its spread (``sqrt(n)`` x its standard error), the degrees of freedom and the
    pairs set aside at each end. ``g = floor(trim x n)``; with ``g = 0`` these are the mean, the standard
    deviation and ``n - 1``."""
    n = len(d)
    g = math.floor(trim * n + 1e-9)
    if g == 0:
        mean = math.fsum(d) / n
        return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in d) / (n - 1)), n - 1, 0
    s = sorted(d)
    h = n - 2 * g
    kept = s[g : n - g]
    winsorized = [kept[0]] * g + kept + [kept[-1]] * g
    w_mean = math.fsum(winsorized) / n
    w_sd = math.sqrt(math.fsum((x - w_mean) ** 2 for x in winsorized) / (n - 1))
    # Yuen: se = s_w / ((1 - 2 g / n) sqrt(n)), so the spread that gives it as sd / sqrt(n) is s_w n / h.
    return math.fsum(kept) / h, w_sd * n / h, h - 1, g


def _more_pairs(mean: float, sd: float, n: int, bound: float, t_crit: float) -> int:
    """Pairs still needed for the interval to clear the nearest boundary (zero beyond the minimum effect, the
    equivalence margin within it), if the mean and the spread stayed what they are."""
    distance = abs(mean) if abs(mean) >= bound else bound - abs(mean)
    if distance <= 0 or sd == 0:
        return 1
    needed = math.ceil((t_crit * sd / distance) ** 2)
    return max(1, min(needed - n, 1_000_000))


def run(d: Sequence[float], rule: Rule) -> Assessment:
    """The rule applied as the rounds would have applied it: looks at ``rule.looks`` in order, stopping at the first
    that settles; the assessment at the last look taken (or on all of ``d`` when it ends between looks)."""
    last: Assessment | None = None
    for look in rule.looks:
        if look > len(d):
            break
        last = assess(d[:look], rule)
        if last.state != "ambiguous":
            return last
    if last is None or last.pairs != len(d):
        last = assess(d, rule, final=True)
    return last


# Student's t, without scipy: the regularized incomplete beta function by its continued fraction (Lentz), and the
# quantile by bisection. Accurate to ~1e-12 in p, far below what a decision needs.


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2, 0.5, x)
    return tail if t >= 0 else 1 - tail


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (0 < q < 1)."""
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), got {q}")
    if q < 0.5:
        return -t_quantile(1 - q, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1 - q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_sf(mid, df) > 1 - q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return h
