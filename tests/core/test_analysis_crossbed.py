"""Findings that are not portable across testbeds (``attnprof.core.analysis.crossbed``): one change compared on two
testbeds, each against its own baseline. The comparisons are made by ``compare`` on H200-like documents (the
helpers of ``tests.core.result_documents``), the candidate scaled per testbed; the edges of the rule on findings
written out."""

from __future__ import annotations

import pytest

from attnprof.core.analysis.compare import compare
from attnprof.core.analysis.crossbed import Side, disagreement, not_portable
from attnprof.core.documents.comparison import ComparisonDocument
from tests.core.result_documents import runs, scaled

CASES = ("prefill[backend=cudnn]", "prefill[backend=flash]")


def _compared(factor_cudnn: float, factor_flash: float, *, seed: int) -> ComparisonDocument:
    """A testbed's comparison: three baseline runs, and a candidate whose cudnn and flash cases take ``factor_*``
    times as long."""
    base = runs(3, seed=seed, backends=("cudnn", "flash"))
    cand = runs(1, seed=seed + 50, backends=("cudnn", "flash"), prefix="cand")[0]
    slow_cudnn = scaled(cand, factor_cudnn, run_id="c1")
    flash = scaled(cand, factor_flash, run_id="c2")
    mixed = slow_cudnn.model_copy(update={"cases": [slow_cudnn.cases[0], flash.cases[1]]})
    return compare(base, mixed)


def _latency(doc: ComparisonDocument, case: str):
    return next(f for f in doc.findings if f.case == case and f.metric == "latency")


def test_a_change_that_helps_one_testbed_and_hurts_the_other_is_not_portable_naming_both_and_their_kernels() -> None:
    h100 = _compared(0.85, 1.0, seed=1)  # 15% faster on h100
    h200 = _compared(1.15, 1.0, seed=2)  # 15% slower on h200
    assert _latency(h100, CASES[0]).status == "improved" and _latency(h200, CASES[0]).status == "regressed"
    found = not_portable({"h100": h100, "h200": h200})
    assert [(n.case, n.kind, n.testbeds) for n in found] == [(CASES[0], "direction", ("h100", "h200"))]
    sides = {s.testbed: s for s in found[0].sides}
    assert sides["h100"].high < 0 < sides["h200"].low
    assert all(s.kernels for s in found[0].sides)  # the kernels that moved on each, named
    moved = _latency(h200, CASES[0]).kernels
    assert set(sides["h200"].kernels) <= {k.name or k.key for k in moved}


def test_the_same_change_on_both_testbeds_is_portable() -> None:
    a = _compared(1.15, 1.0, seed=3)
    b = _compared(1.15, 1.0, seed=4)
    assert _latency(a, CASES[0]).status == "regressed" and _latency(b, CASES[0]).status == "regressed"
    assert not_portable({"h100": a, "h200": b}) == []


def test_a_change_of_clearly_different_sizes_one_way_is_not_portable_by_size() -> None:
    a = _compared(1.04, 1.0, seed=5)
    b = _compared(1.40, 1.0, seed=6)
    found = not_portable({"h100": a, "h200": b})
    assert [(n.case, n.kind) for n in found] == [(CASES[0], "size")]


def test_one_testbed_alone_is_never_flagged() -> None:
    assert not_portable({"h100": _compared(0.8, 1.2, seed=7)}) == []


def _side(testbed: str, change: float, low: float, high: float, status: str) -> Side:
    return Side(testbed=testbed, change=change, low=low, high=high, status=status, kernels=())


@pytest.mark.parametrize(
    ("a", "b", "kind"),
    [
        # opposite ways, each beyond its interval
        (_side("x", -0.10, -0.12, -0.08, "improved"), _side("y", 0.10, 0.08, 0.12, "regressed"), "direction"),
        # point estimates opposite, but the intervals overlap: consistent
        (_side("x", -0.03, -0.08, 0.01, "inconclusive"), _side("y", 0.05, -0.01, 0.09, "regressed"), None),
        # moved on one, not at all on the other, the intervals apart
        (_side("x", 0.10, 0.08, 0.12, "regressed"), _side("y", 0.0, -0.01, 0.01, "unchanged"), "size"),
        # apart, but neither found a change past its threshold: nothing to carry across
        (_side("x", 0.010, 0.008, 0.012, "unchanged"), _side("y", -0.010, -0.012, -0.008, "unchanged"), None),
        # touching intervals overlap
        (_side("x", 0.05, 0.04, 0.06, "regressed"), _side("y", 0.08, 0.06, 0.10, "regressed"), None),
    ],
)
def test_the_rule_on_two_sides(a: Side, b: Side, kind: str | None) -> None:
    assert disagreement(a, b) == kind
    assert disagreement(b, a) == kind
