"""Findings that are not portable: one change compared on several testbeds (a matrix, one job per testbed, each
against its own testbed's baseline), where what it did differs between them beyond the intervals.

``attnprof.core.analysis.portability`` reads two runs of the same code on two GPU models apart (hardware or code);
this reads two comparisons of the same change apart: the change's effect, a relative change with its interval, is
what each testbed measured of the code alone, since each side of each comparison ran on one testbed. Where those
effects disagree beyond their intervals, a verdict on one GPU says nothing of the other, and the reviewer is told.

For each case and timing metric (``METRICS``), and each two testbeds whose findings both have an interval, where at
least one of the two found the change (regressed or improved past its threshold):

``direction``  one interval lies wholly above 0 and the other wholly below: faster on one, slower on the other
``size``       the intervals do not overlap, and the change is not opposite: it moved by clearly different amounts
               (on one only, or on both by sizes whose intervals are apart)

Intervals that overlap are consistent: nothing is flagged, however far apart the point estimates. A testbed where the
case was not compared (skipped there, no baseline yet) says nothing either way. Torch-free.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from attnprof.core.documents.comparison import ComparisonDocument, Finding

METRICS = ("latency", "throughput", "bandwidth")
"""The metrics compared across testbeds: a case's time, which its comparison tests as a time (``latency``) or, where
the case's work is known, as a rate of that work (``throughput``, ``bandwidth``: higher is better). A case has one
of them, the same on every testbed, since the work is the suite's."""
KERNELS_NAMED = 2
"""Kernels named per testbed: those whose time moved most in the case, by microseconds."""
_MOVED = ("regressed", "improved")


@dataclass(frozen=True)
class Side:
    """What one testbed found of a case: the relative change and its interval (fractions: ``0.05`` is 5% slower for
    latency), its status, and the kernels that moved most (by absolute microseconds)."""

    testbed: str
    change: float
    low: float
    high: float
    status: str
    kernels: tuple[str, ...]
    higher_is_better: bool = False

    @property
    def way(self) -> str:
        """``faster`` or ``slower`` where the interval lies wholly on one side of 0, else ``unchanged``."""
        if self.low <= 0 <= self.high:
            return "unchanged"
        return "faster" if (self.low > 0) == self.higher_is_better else "slower"


@dataclass(frozen=True)
class NotPortable:
    """A case whose change is not the same on every testbed: ``kind`` is ``direction`` when any two testbeds saw it
    go opposite ways beyond their intervals, else ``size``. ``pairs`` are the testbeds that disagree, two by two;
    ``sides`` every testbed that compared the case."""

    case: str
    metric: str
    kind: str
    sides: tuple[Side, ...]
    pairs: tuple[tuple[str, str], ...]

    @property
    def testbeds(self) -> tuple[str, ...]:
        """The testbeds named in a disagreeing pair, in the order of ``sides``."""
        named = {t for pair in self.pairs for t in pair}
        return tuple(s.testbed for s in self.sides if s.testbed in named)


def _top_kernels(finding: Finding) -> tuple[str, ...]:
    moved = [k for k in finding.kernels if k.delta_us is not None]
    moved.sort(key=lambda k: abs(k.delta_us or 0.0), reverse=True)
    return tuple((k.name or k.key) for k in moved[:KERNELS_NAMED])


def _side(testbed: str, finding: Finding) -> Side | None:
    if finding.ci is None or finding.change is None:
        return None
    return Side(
        testbed=testbed,
        change=finding.change,
        low=finding.ci.low,
        high=finding.ci.high,
        status=finding.status,
        kernels=_top_kernels(finding),
        higher_is_better=bool(finding.higher_is_better),
    )


def disagreement(a: Side, b: Side) -> str | None:
    """How ``a`` and ``b`` (one case and metric on two testbeds) disagree: ``direction``, ``size``, or None when they
    do not beyond their intervals, or when neither found the change."""
    if a.status not in _MOVED and b.status not in _MOVED:
        return None
    if a.low > b.high or b.low > a.high:
        opposite = (a.low > 0 and b.high < 0) or (b.low > 0 and a.high < 0)
        return "direction" if opposite else "size"
    return None


def not_portable(comparisons: Mapping[str, ComparisonDocument]) -> list[NotPortable]:
    """The cases whose change differs across testbeds beyond their intervals, from each testbed's comparison of the
    same change (``comparisons``: testbed name to its comparison), in case order of the first testbed that has
    each. Fewer than two testbeds: none."""
    sides: dict[tuple[str, str], list[Side]] = {}
    for testbed, doc in comparisons.items():
        for finding in doc.findings:
            if finding.metric not in METRICS:
                continue
            side = _side(testbed, finding)
            if side is not None:
                sides.setdefault((finding.case, finding.metric), []).append(side)
    out: list[NotPortable] = []
    for (case, metric), found in sides.items():
        pairs: list[tuple[str, str]] = []
        kinds: set[str] = set()
        for a, b in itertools.combinations(found, 2):
            kind = disagreement(a, b)
            if kind is not None:
                pairs.append((a.testbed, b.testbed))
                kinds.add(kind)
        if pairs:
            kind = "direction" if "direction" in kinds else "size"
            out.append(NotPortable(case=case, metric=metric, kind=kind, sides=tuple(found), pairs=tuple(pairs)))
    return out
