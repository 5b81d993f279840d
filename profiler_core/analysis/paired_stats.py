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

A look that does not settle may first set aside one **disturbed** pair and take another in its place (at most
``max_set_aside`` per case, so a case takes at most ``max_pairs + max_set_aside`` pairs): a pair far out of line with
the case's other pairs, the mark of one side's round stalled by something else on the host (on a 2-core CI host one
base round of a 2 ms case read 15 ms, and that pair, at -59% against three near +200%, left a threefold slowdown
ambiguous after 4 pairs). Far means both:

- at least ``disturbed_factor`` (1.5x) off the others' mean ratio: clean pairs on the H200 stay within 1.06x of their
  median, and the floor keeps three near-identical pairs from making an outlier of every small step;
- further from that mean than the others' spread allows: the deleted residual, ``(d_i - mean of the others) / (their
  sd x sqrt(1 + 1 / (n - 1)))``, a Student's t with ``n - 2`` degrees of freedom under normal noise, past its
  ``1 - disturbed_alpha / (2n)`` quantile, so a look sets a clean pair aside with a chance of at most
  ``disturbed_alpha`` (Bonferroni over the pairs).

The others are summed up by their mean and standard deviation, not robust ones, on purpose: a second pair as far out
widens their spread and nothing is set aside (two such pairs are a spread, not one accident). A look that settles
sets nothing aside, so no answer the pairs give is changed by it. What setting aside costs is the chance that the
pairs kept lie close by accident; over 20,000 simulated A/A sequences a setting it raised false answers (slower or
faster) by at most 0.9 of a point, false slower answers stayed at or under 2.7%, and with each device's quieter
noise all but 0.03% of the sequences kept their answers (bench/reports/paired-set-aside.md). The pairs set aside
stay in the paired document.

Pure Python (``math`` only): the GPU worker's coordinator stops rounds with it, where scipy may be absent.
"""

from __future__ import annotations

import dataclasses
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
    max_set_aside: int = 0  # disturbed pairs a case may set aside and take again; 0: none
    disturbed_factor: float = 1.5  # a disturbed pair's ratio is at least this many times off the others'
    disturbed_alpha: float = 0.01  # the chance, with normal noise, that a look sets a clean pair aside

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
        if self.max_set_aside < 0:
            raise ValueError(f"max_set_aside must be >= 0, got {self.max_set_aside}")
        if not self.disturbed_factor > 1:
            raise ValueError(f"disturbed_factor must be > 1, got {self.disturbed_factor}")
        if not 0 < self.disturbed_alpha < 1:
            raise ValueError(f"disturbed_alpha must be in (0, 1), got {self.disturbed_alpha}")

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


def set_aside_budget(max_pairs: int) -> int:
    """Disturbed pairs a case of at most ``max_pairs`` pairs may set aside: a quarter of them, at least one."""
    if max_pairs < 1:
        raise ValueError(f"max_pairs must be >= 1, got {max_pairs}")
    return max(1, max_pairs // 4)


@dataclass(frozen=True)
class Disturbance:
    """One pair far out of line with the others. Log ratios: ``value`` the pair's, ``others`` the mean of the other
    pairs', ``sd`` their standard deviation; ``allowed`` is how far from ``others`` the pair could have been (the
    larger of the factor's log and the deleted residual's critical t times its standard error)."""

    index: int  # in the sequence given
    value: float
    others: float
    sd: float
    allowed: float

    def describe(self) -> str:
        """Why the pair was set aside, in words, for the paired document."""
        return (
            f"disturbed: head/base {math.expm1(self.value):+.1%} against {math.expm1(self.others):+.1%} over the "
            f"other pairs (sd {self.sd:.3f} in log ratio): {math.exp(abs(self.value - self.others)):.2f}x off them, "
            f"where {math.exp(self.allowed):.2f}x would have been in line; set aside and run again"
        )


def disturbed(d: Sequence[float], rule: Rule) -> Disturbance | None:
    """The one pair of ``d`` (log ratios, four or more) far out of line with the others, or ``None``: the pair
    furthest from the mean when it is at least ``rule.disturbed_factor`` off the others' mean ratio and its deleted
    residual, ``(d_i - mean of the others) / (their sd x sqrt(1 + 1 / (n - 1)))``, a Student's t with ``n - 2``
    degrees of freedom under normal noise, exceeds the ``1 - rule.disturbed_alpha / (2n)`` quantile."""
    n = len(d)
    if n < 4:
        return None
    mean = math.fsum(d) / n
    i = max(range(n), key=lambda j: abs(d[j] - mean))
    others = [x for j, x in enumerate(d) if j != i]
    centre = math.fsum(others) / (n - 1)
    sd = math.sqrt(math.fsum((x - centre) ** 2 for x in others) / (n - 2))
    t_crit = t_quantile(1 - rule.disturbed_alpha / (2 * n), n - 2)
    allowed = max(math.log(rule.disturbed_factor), t_crit * sd * math.sqrt(1 + 1 / (n - 1)))
    if abs(d[i] - centre) <= allowed:
        return None
    return Disturbance(index=i, value=d[i], others=centre, sd=sd, allowed=allowed)


@dataclass(frozen=True)
class Replay:
    """The rule run over pairs in time order as the rounds run it. ``assessment``: at the look it stopped at, or on
    the pairs kept when the pairs ran out between looks (``None`` when fewer than two were kept); ``done``: it
    stopped (settled at a look, or ``max_pairs`` pairs kept), else it wants another pair; ``used``: the pairs it
    took, the rest came after it stopped; ``set_aside``: the disturbed pairs, by their index in the pairs given."""

    assessment: Assessment | None
    done: bool
    used: int
    set_aside: tuple[Disturbance, ...]

    @property
    def kept(self) -> int:
        return self.used - len(self.set_aside)


def replay(d: Sequence[float], rule: Rule, *, stop_early: bool = True) -> Replay:
    """Apply the rule to the log ratios ``d`` (one per pair, in time order) as the rounds do: a look at each count of
    kept pairs in ``rule.looks``; a look that does not settle first sets aside a disturbed pair (``disturbed``) while
    ``rule.max_set_aside`` allows, and the next pair takes its place; it stops at the first look that settles
    (``stop_early``) or once ``max_pairs`` pairs are kept and none is set aside."""
    looks = set(rule.looks)
    kept: list[int] = []
    aside: list[Disturbance] = []
    last: Assessment | None = None
    for i in range(len(d)):
        kept.append(i)
        n = len(kept)
        if n not in looks:
            continue
        values = [d[k] for k in kept]
        last = assess(values, rule, final=n == rule.max_pairs)
        if last.state != "ambiguous" and stop_early:
            return Replay(last, True, i + 1, tuple(aside))
        if last.state == "ambiguous" and len(aside) < rule.max_set_aside:
            found = disturbed(values, rule)
            if found is not None:
                aside.append(dataclasses.replace(found, index=kept.pop(found.index)))
                last = None
                continue
        if n == rule.max_pairs:
            return Replay(last, True, i + 1, tuple(aside))
    if len(kept) >= 2 and (last is None or last.pairs != len(kept)):
        last = assess([d[k] for k in kept], rule, final=True)
    return Replay(last, False, len(d), tuple(aside))


def run(d: Sequence[float], rule: Rule) -> Assessment:
    """The rule applied as the rounds would have applied it (``replay``): the assessment at the look it stopped at,
    or on the pairs kept when ``d`` ends between looks. Raises ``ValueError`` when fewer than 2 pairs are kept."""
    out = replay(d, rule).assessment
    if out is None:
        raise ValueError("a paired test needs at least 2 pairs")
    return out


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
