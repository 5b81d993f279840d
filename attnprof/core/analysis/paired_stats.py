"""The sequential test of a paired A/B run: one case's paired round differences to slower, faster, same or not yet.

Each pair is a base round and a head round run back to back on the same device; its difference is
``d = ln(head_us / base_us)``, so drift slower than a pair cancels, and the order alternates (ABBA) so drift within
a pair cancels over pairs too. ``d`` of successive pairs are taken as independent draws around the true log
ratio (the workload is built again for every round, so where its tensors land varies from pair to pair as well).

The rule looks at the pairs after ``min_pairs`` and then every ``step`` pairs (or, with ``growth`` above 1, each look
that many times the last, rounded up to an even count so that AB and BA pairs stay balanced) up to ``max_pairs``; at
each look an interval on the location of ``d`` decides. The error is split over the K looks planned (Bonferroni, so
the chance that any look of an A/A case errs is at most its share) and, for a change, over the ``family`` of cases the
run judges: a change is called at level ``1 - alpha / (family x K)``, so that a case the rule calls slower or faster
is one that Benjamini-Hochberg across the run's cases confirms at ``alpha`` whatever the other cases show (its q-value
is at most ``family`` times its p); "the same" is called at ``1 - alpha / K``, since calling it wrongly misses a change
and adds no false discovery. The location is the mean of ``d`` trimmed by ``trim`` at each
end (Yuen's trimmed-mean t: ``g = floor(trim x n)`` pairs dropped from each end, the spread from the winsorized
variance, ``n - 2g - 1`` degrees of freedom), so below ``1 / trim`` pairs (10 by default) it is Student's t on the
plain mean. Why trim: on the H200 a pair whose two timed windows straddle an SM clock step reads 2-6% off either way
(the clock NVML reports is the same for both sides: it is sampled too rarely to see the step), one or two in 15 on
a compute-bound case after it has run for seconds; such a pair alone can keep the plain mean's interval from
settling a 1% change. Measured on recorded pairs: bench/reports/h200-paired.md. The rule:

- **slower** (faster): the change interval lies above (below) zero and the estimate is at least the minimum effect;
- **same**: the interval at the per-case level lies within +-ln(1 + minimum effect): whatever changed is smaller than
  the minimum effect;
- otherwise the next look; after the last, **ambiguous**, with how many more pairs would settle it at the spread
  seen so far.

A look that does not settle may first set aside one **disturbed** pair and take another in its place (at most
``max_set_aside`` per case, so a case takes at most ``max_pairs + max_set_aside`` pairs): a pair far out of line with
the case's other pairs, the mark of one side's round stalled by something else on the host (on a 2-core CI host one
base round of a 2 ms case read 15 ms, and that pair, at -59% against three near +200%, left a threefold slowdown
ambiguous after 4 pairs) or of a GPU whose state changed between the pair's two timed windows (a case's first rounds
after a compute-bound case that read 19% slow, the slowness over before the pair's second window). Far means both:

- at least ``disturbed_factor`` off the others' mean ratio (``disturbed_floor``: 1.5x on the CPU hosts, where round
  medians of one side move by tens of percent; 1.05x on CUDA, where a one-sided slowdown of 19% must not hide under a
  floor meant for the CPU, and clean H200 pairs stay within 1.06x of their median): the floor keeps three near-identical
  pairs from making an outlier of every small step;
- further from that mean than the others' spread allows: the deleted residual, ``(d_i - mean of the others) / (their
  sd x sqrt(1 + 1 / (n - 1)))``, a Student's t with ``n - 2`` degrees of freedom under normal noise, past its
  ``1 - disturbed_alpha / (2n)`` quantile, so a look sets a clean pair aside with a chance of at most
  ``disturbed_alpha`` (Bonferroni over the pairs). With ``spread_prior`` the others' variance is first pooled with
  that prior spread, worth ``spread_prior_df`` degrees of freedom (a moderated t, as the stored-history test pools
  its runs with the testbed's noise floor): three pairs alone give two degrees of freedom, whose quantile (about 20)
  would let a pair 19% off three pairs spread by 0.8% stay in the first look; pooled with CUDA's prior of 1% it is
  about 5, and the pair is set aside at the first look.

The others are summed up by their mean and standard deviation, not robust ones, on purpose: a second pair as far out
widens their spread and nothing is set aside (two such pairs are a spread, not one accident). A look that settles
sets nothing aside, so no answer the pairs give is changed by it. What setting aside costs is the chance that the
pairs kept lie close by accident; over 20,000 simulated A/A sequences a setting it raised false answers (slower or
faster) by at most 0.9 of a point, false slower answers stayed at or under 2.7%, and with each device's quieter
noise all but 0.03% of the sequences kept their answers (docs/findings.md#disturbed-pairs-set-aside). The pairs set
aside stay in the paired document.

Pure Python (``math`` only): the GPU worker's coordinator stops rounds with it, where scipy may be absent.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
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
    spread_prior: float = 0.0  # a prior pair spread (sd of d) pooled into the set-aside test; 0: none
    spread_prior_df: int = 4  # what the prior is worth, in degrees of freedom
    family: int = 1  # cases a change decision's error is split over (the run's cases with a paired test)
    growth: float = 1.0  # above 1: each look after min_pairs at least this many times the last (even counts)
    schedule: tuple[int, ...] = ()  # the looks, given outright (a document's); empty: from the fields above

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
        if self.spread_prior < 0 or self.spread_prior_df < 1:
            raise ValueError(
                f"spread_prior must be >= 0 and spread_prior_df >= 1, got {self.spread_prior}, {self.spread_prior_df}"
            )
        if self.family < 1:
            raise ValueError(f"family must be >= 1 case, got {self.family}")
        if not self.growth >= 1:
            raise ValueError(f"growth must be >= 1, got {self.growth}")
        if self.schedule:
            s = self.schedule
            if s[0] != self.min_pairs or s[-1] != self.max_pairs or any(b <= a for a, b in itertools.pairwise(s)):
                raise ValueError(
                    f"schedule must rise from min_pairs ({self.min_pairs}) to max_pairs ({self.max_pairs}), got {s}"
                )

    @property
    def looks(self) -> list[int]:
        """The pair counts at which the rule looks: ``min_pairs``, then every ``step`` pairs (with ``growth``, at least
        ``growth`` times the last look, rounded up to an even count), and ``max_pairs``; or ``schedule``."""
        if self.schedule:
            return list(self.schedule)
        out = [self.min_pairs]
        while out[-1] < self.max_pairs:
            grown = 2 * math.ceil(out[-1] * self.growth / 2 - 1e-9) if self.growth > 1 else 0
            out.append(min(self.max_pairs, max(out[-1] + self.step, grown)))
        return out

    @property
    def look_alpha(self) -> float:
        """The two-sided error of one look of one case: what "the same" is called at."""
        return self.alpha / len(self.looks)

    @property
    def change_alpha(self) -> float:
        """The two-sided error of one look for a change, split over the ``family`` of cases as well."""
        return self.look_alpha / self.family


@dataclass(frozen=True)
class Assessment:
    """What the pairs so far say. ``change`` and the interval are relative changes of the head's time over the
    base's (0.01 = the head 1% slower); the interval is the one the answer was read from, at ``level``: the per-case
    level for "same", the change level (split over the family of cases too) otherwise. ``p`` is the two-sided p of
    "no change", Bonferroni-adjusted over the looks planned (valid whatever look the rule stopped at); the rule calls
    a change only where ``p`` is at most ``alpha / family``. ``more_pairs`` is, for ``ambiguous``, how many more pairs
    would settle the answer if the spread stayed what it is."""

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
    mean, sd, df, g = location(d, rule.trim)
    se = sd / math.sqrt(n)
    t_change = t_quantile(1 - rule.change_alpha / 2, df)
    t_same = t_quantile(1 - rule.look_alpha / 2, df)
    low, high = mean - t_change * se, mean + t_change * se
    no_spread = 0.0 if mean != 0 else 1.0
    p = min(1.0, k * 2 * t_sf(abs(mean) / se, df)) if se > 0 else no_spread
    bound = math.log1p(rule.min_effect)
    state: State = "ambiguous"
    level = 1 - rule.change_alpha
    if low > 0 and mean >= bound:
        state = "slower"
    elif high < 0 and -mean >= bound:
        state = "faster"
    elif -bound < mean - t_same * se and mean + t_same * se < bound:
        state = "same"
        low, high, level = mean - t_same * se, mean + t_same * se, 1 - rule.look_alpha
    more = None
    if state == "ambiguous":
        more = _more_pairs(mean, sd, n, bound, t_change if abs(mean) >= bound else t_same)
    return Assessment(
        state=state,
        pairs=n,
        change=math.expm1(mean),
        low=math.expm1(low),
        high=math.expm1(high),
        level=level,
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


def disturbed_floor(min_effect: float) -> float:
    """The least ratio a pair must be off the others' to be set aside, for a case judged at ``min_effect``: ten times
    the minimum effect above 1, at most 1.5 (1.05x on CUDA's 0.5%, 1.5x on the CPU hosts' 10%)."""
    return min(1.5, 1 + 10 * min_effect) if min_effect > 0 else 1.5


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
    degrees of freedom under normal noise, exceeds the ``1 - rule.disturbed_alpha / (2n)`` quantile. With
    ``rule.spread_prior`` the others' variance is pooled with it first (``spread_prior_df`` more degrees of freedom)."""
    n = len(d)
    if n < 4:
        return None
    mean = math.fsum(d) / n
    i = max(range(n), key=lambda j: abs(d[j] - mean))
    others = [x for j, x in enumerate(d) if j != i]
    centre = math.fsum(others) / (n - 1)
    squares = math.fsum((x - centre) ** 2 for x in others)
    df = n - 2
    if rule.spread_prior > 0:
        squares += rule.spread_prior_df * rule.spread_prior**2
        df += rule.spread_prior_df
    sd = math.sqrt(squares / df)
    t_crit = t_quantile(1 - rule.disturbed_alpha / (2 * n), df)
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


@functools.lru_cache(maxsize=4096)  # a rule asks for the same few quantiles at every look of every case
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
