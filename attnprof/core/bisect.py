"""Bisection: which commit of a range made a step, found with paired A/B probes and confirmed before it is named.

A range is the commits between the last good one and the first bad one, oldest first (``commits[0]`` good,
``commits[-1]`` bad). Each probe compares a commit of the range against the last commit known good, paired on one
device (``attnprof paired``), so the noise of other runs and other days never enters; a probe's verdict on the
step's cases says whether the commit holds the step (``bad``), not yet (``good``), or could not be measured
(``skip``: it does not build or its case fails, as ``git bisect skip``). Midpoints halve the range until one commit
is left, ``⌈log₂ N⌉`` probes for N commits when one commit holds the whole effect; then the culprit against its own
parent, paired: only an effect within the step's interval confirms it. A smaller real effect says the step is
spread over several commits (each probe's share is kept), none says it was not reproduced. No pair is probed twice:
where the last probe already compared the culprit with its parent, it is the confirmation.

The same logic runs locally over two refs of a checkout (``attnprof bisect``) and, on the service, for an alert.
Torch-free: probes are run by the caller.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from attnprof.core.documents.comparison import ComparisonDocument, Finding

Outcome = Literal["bad", "good", "skip"]
Status = Literal["confirmed", "spread", "not_reproduced", "skipped", "running"]
TIMING = ("latency", "bandwidth", "throughput")
PART = 0.1
"""A probe's slowdown of at least this share of the step, with its interval above zero, is a part of the step."""


@dataclass(frozen=True)
class Step:
    """The step to explain: its size on the stepped cases (``(bad - good) / good`` of the latency), with its interval.
    A probe counts as holding the step when its effect reaches ``share`` of it."""

    cases: tuple[str, ...]
    effect: float
    low: float
    high: float
    share: float = 0.5

    def __post_init__(self) -> None:
        if not self.cases:
            raise ValueError("a step needs at least one case")
        if not (self.low <= self.effect <= self.high) or self.effect <= 0:
            raise ValueError(f"a step is a slowdown with its estimate inside its interval, got {self}")


@dataclass(frozen=True)
class Probe:
    """One paired comparison: ``candidate`` against ``good`` on the step's cases."""

    good: str
    candidate: str
    outcome: Outcome
    effect: float | None = None  # the largest latency effect over the step's cases
    low: float | None = None
    high: float | None = None
    detail: str = ""


def slowdown(f: Finding) -> tuple[float, float | None, float | None] | None:
    """A timing finding as a change of latency, with its interval: a latency finding as it is; a rate (bandwidth,
    throughput: higher is better) as ``baseline / candidate - 1``, so that a case whose primary metric is a rate is
    judged on the same scale as the step. None for other findings."""
    if f.metric not in TIMING or f.change is None:
        return None
    low, high = (f.ci.low, f.ci.high) if f.ci is not None else (None, None)
    rate = f.higher_is_better if f.higher_is_better is not None else f.metric != "latency"
    if not rate:
        return f.change, low, high

    def inverse(c: float | None) -> float | None:
        return None if c is None or c <= -1 else 1 / (1 + c) - 1

    change = inverse(f.change)
    return (change, inverse(high), inverse(low)) if change is not None else None


def classify(comparison: ComparisonDocument, step: Step, failed: set[str] | frozenset[str] = frozenset()) -> Probe:
    """What a paired comparison says about the step: ``skip`` where a stepped case failed or did not run on either
    side (``failed``: ids of such cases), else ``bad`` where a stepped case's latency rose by at least the step's
    share of its size (a rate's fall, as ``slowdown`` reads it), else ``good``. Its effect is the largest latency
    change over the stepped cases."""
    missing = [c for c in step.cases if c in failed]
    if missing:
        return Probe("", "", "skip", detail="did not run: " + ", ".join(missing))
    best: tuple[float, float | None, float | None] | None = None
    for f in comparison.findings:
        moved = slowdown(f) if f.case in step.cases else None
        if moved is not None and (best is None or moved[0] > best[0]):
            best = moved
        if f.case in step.cases and f.metric == "status":
            return Probe("", "", "skip", detail=f"{f.case}: {f.detail or 'did not run'}")
    if best is None:
        return Probe("", "", "skip", detail="no timing finding for the step's cases")
    effect, low, high = best
    bad = effect >= step.share * step.effect and (low is None or low > 0)
    return Probe("", "", "bad" if bad else "good", effect, low, high)


@dataclass
class Bisection:
    """The state of one bisection over ``commits`` (oldest first: ``[0]`` good, ``[-1]`` bad)."""

    commits: list[str]
    step: Step
    probes: list[Probe] = field(default_factory=list)
    good: int = 0
    bad: int = -1
    skipped: set[int] = field(default_factory=set)
    confirmation: Probe | None = None

    def __post_init__(self) -> None:
        if len(self.commits) < 2 or len(set(self.commits)) != len(self.commits):
            raise ValueError("a range is at least a good and a bad commit, each once")
        self.bad = len(self.commits) - 1

    @property
    def budget(self) -> int:
        """Probes when one commit holds the whole effect: ``⌈log₂ N⌉`` midpoints and a confirmation, for N commits."""
        return math.ceil(math.log2(max(len(self.commits) - 1, 1))) + 1

    def _between(self) -> list[int]:
        return [i for i in range(self.good + 1, self.bad) if i not in self.skipped]

    def _probed(self, good: str, candidate: str) -> Probe | None:
        return next((p for p in self.probes if p.good == good and p.candidate == candidate), None)

    def next_pair(self) -> tuple[str, str] | None:
        """The next (good, candidate) to probe, or None when the bisection has its answer."""
        left = self._between()
        if left:
            middle = (self.good + self.bad) / 2
            m = min(left, key=lambda i: (abs(i - middle), i))  # the nearest not skipped, as git bisect skip does
            return self.commits[self.good], self.commits[m]
        if self.confirmation is not None or self.ambiguous():
            return None
        parent = self._parent()
        pair = (self.commits[parent], self.commits[self.bad])
        earlier = self._probed(*pair)
        if earlier is not None:  # the last midpoint already compared the culprit with its parent
            self.confirmation = earlier
            return None
        return pair

    def _parent(self) -> int:
        return max(i for i in range(self.bad) if i not in self.skipped)

    def ambiguous(self) -> list[str]:
        """The commits the culprit may be, where skipped ones lie between the last good and the first bad."""
        skipped = [i for i in range(self.good + 1, self.bad) if i in self.skipped]
        return [self.commits[i] for i in [*skipped, self.bad]] if skipped else []

    def record(self, good: str, candidate: str, probe: Probe) -> None:
        """Take the answer of a probe the caller ran for ``next_pair``'s (good, candidate)."""
        probe = Probe(good, candidate, probe.outcome, probe.effect, probe.low, probe.high, probe.detail)
        self.probes.append(probe)
        i = self.commits.index(candidate)
        if self.commits.index(good) == self._parent() and i == self.bad and not self._between():
            self.confirmation = probe
            return
        if probe.outcome == "skip":
            self.skipped.add(i)
        elif probe.outcome == "bad":
            self.bad = i
        else:
            self.good = i

    def status(self) -> Status:
        if self.next_pair() is not None:
            return "running"
        if self.ambiguous():
            return "skipped"
        c = self.confirmation
        if c is not None and c.outcome != "skip" and c.effect is not None and self.within(c):
            return "confirmed"
        # No one commit holds it: spread where some probe saw a real part of it (a slowdown of at least
        # ``PART`` of the step with its interval above zero: each probe against the last good commit sees only the
        # part after it, so a step of many small parts can stay under the share on every probe), else not reproduced.
        seen = [p for p in self.probes if p.outcome != "skip" and p.effect is not None and p.low is not None]
        return "spread" if any(p.low > 0 and p.effect >= PART * self.step.effect for p in seen) else "not_reproduced"  # type: ignore[operator]

    def within(self, probe: Probe) -> bool:
        """Whether a probe's effect agrees with the step's: its interval overlaps the step's (its estimate inside,
        where it has no interval)."""
        if probe.effect is None:
            return False
        low = probe.low if probe.low is not None else probe.effect
        high = probe.high if probe.high is not None else probe.effect
        return low <= self.step.high and high >= self.step.low and probe.outcome == "bad"

    @property
    def culprit(self) -> str:
        return self.commits[self.bad]

    def shares(self) -> list[tuple[str, float]]:
        """For a step spread over commits: the stretches of the range that hold a part of it, each with its share of
        the step, newest first. Effects add up along a history: each probe says that the commits after its good one
        up to its candidate hold its effect (and the whole range holds the step). The probes' ends cut the range
        into stretches, and the shares are the least-squares solution of those sums (the smallest, where probes
        leave a part open). Stretches under 5% of the step are left out. A stretch of one commit is named by it; a
        longer one as ``first..last (n commits)``."""
        index = {c: i for i, c in enumerate(self.commits)}
        spans = [
            (index[p.good], index[p.candidate], p.effect)
            for p in self.probes
            if p.effect is not None and p.outcome != "skip" and p.good in index and p.candidate in index
        ]
        if not any(lo == 0 and hi == len(self.commits) - 1 for lo, hi, _ in spans):
            spans.append((0, len(self.commits) - 1, self.step.effect))  # the step spans the whole range
        cuts = sorted({i for lo, hi, _ in spans for i in (lo, hi)})
        atoms = list(itertools.pairwise(cuts))
        a = np.array([[1.0 if lo <= x and y <= hi else 0.0 for x, y in atoms] for lo, hi, _ in spans])
        b = np.array([effect for _, _, effect in spans])
        solved = np.linalg.lstsq(a, b, rcond=None)[0]
        out = []
        for (lo, hi), part in sorted(zip(atoms, solved, strict=True), key=lambda s: -s[0][1]):
            share = float(part) / self.step.effect
            if abs(share) >= 0.05:
                name = (
                    self.commits[hi]
                    if hi - lo == 1
                    else f"{self.commits[lo + 1]}..{self.commits[hi]} ({hi - lo} commits)"
                )
                out.append((name, share))
        return out

    def summary(self) -> str:
        status = self.status()
        n = len(self.commits) - 1
        head = f"{n} commit(s), {len(self.probes)} paired probe(s)"
        if status == "confirmed":
            c = self.confirmation
            assert c is not None and c.effect is not None
            return (
                f"{self.culprit} made the step: {c.effect:+.1%} against its parent {c.good}, within the step's "
                f"[{self.step.low:+.1%}, {self.step.high:+.1%}] ({head})"
            )
        if status == "spread":
            shares = ", ".join(f"{commit} {share:.0%}" for commit, share in self.shares())
            return f"spread over several commits: no one commit holds the step; shares of it: {shares} ({head})"
        if status == "skipped":
            return f"one of {', '.join(self.ambiguous())}: the commits between could not be measured ({head})"
        if status == "not_reproduced":
            return f"not reproduced: {self.culprit} against its parent showed no step ({head})"
        return f"running: {head}"
