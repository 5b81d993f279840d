"""The comparison chart's spec (``attnprof.server.web.pages.figures.comparison_changes``): one quantity, the change of a
case's time, up is worse whatever the finding's metric; intervals cut at the chart's edge with the cut ends marked;
non-timing failures as flags in words."""

from __future__ import annotations

from typing import Any

import pytest

from attnprof.core.documents.comparison import Finding, Interval
from attnprof.server.web.pages import figures

THRESHOLDS = {"latency": 0.02, "bandwidth": 0.02, "throughput": 0.02}


def _timing(case: str, metric: str, change: float, low: float, high: float, status: str = "unchanged") -> Finding:
    return Finding(
        case=case,
        metric=metric,  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
        verdict="fail" if status == "regressed" else "pass",
        change=change,
        higher_is_better=metric != "latency",
        ci=Interval(low=low, high=high, level=0.95),
    )


def _trace(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in spec["data"] if t["name"] == name)


def _point(spec: dict[str, Any], case: str) -> tuple[float, float, float]:
    """(y, top of its error bar, bottom of it) of ``case``'s marker, in percent."""
    for t in spec["data"]:
        if t["name"] in ("regressed", "improved", "unchanged", "inconclusive") and case in t["x"]:
            i = t["x"].index(case)
            y = t["y"][i]
            return y, y + t["error_y"]["array"][i], y - t["error_y"]["arrayminus"][i]
    raise AssertionError(f"no point for {case}")


def test_worse_is_up_whatever_the_metric() -> None:
    findings = [
        _timing("slower", "latency", 0.066, 0.05, 0.08, "regressed"),
        # a memory-bound case 6.6% slower: its bandwidth fell by 1 - 1/1.066 = 6.2%
        _timing("bandwidth-drop", "bandwidth", 1 / 1.066 - 1, 1 / 1.08 - 1, 1 / 1.05 - 1, "regressed"),
        _timing("throughput-rise", "throughput", 0.10, 0.08, 0.12, "improved"),
        _timing("faster", "latency", -0.05, -0.06, -0.04, "improved"),
    ]
    spec = figures.comparison_changes(findings, THRESHOLDS, "/run")
    assert spec is not None
    y, top, bottom = _point(spec, "slower")
    assert y == pytest.approx(6.6) and (bottom, top) == (pytest.approx(5.0), pytest.approx(8.0))
    # The bandwidth drop is the same slowdown, and its interval turns over with it.
    y, top, bottom = _point(spec, "bandwidth-drop")
    assert y == pytest.approx(6.6) and (bottom, top) == (pytest.approx(5.0), pytest.approx(8.0))
    assert _point(spec, "throughput-rise")[0] == pytest.approx(100 * (1 / 1.10 - 1))
    assert _point(spec, "faster")[0] == pytest.approx(-5.0)
    title = spec["layout"]["yaxis"]["title"]["text"]
    assert "worse" in title and "time" in title
    # The minimum-effect band: 2% of latency, and a 2% fall of a rate, 2.04% more time.
    band = spec["layout"]["shapes"][0]
    assert (band["y0"], band["y1"]) == (pytest.approx(-100 * 0.02 / 0.98), pytest.approx(100 * 0.02 / 0.98))


def test_one_wide_interval_is_cut_at_the_edge_and_marked() -> None:
    findings = [
        _timing("slower", "latency", 0.066, 0.05, 0.08, "regressed"),
        _timing("steady", "latency", 0.001, -0.004, 0.006),
        _timing("noisy", "latency", 0.01, -0.60, 0.90, "inconclusive"),
    ]
    spec = figures.comparison_changes(findings, THRESHOLDS, "/run")
    assert spec is not None
    lo, hi = spec["layout"]["yaxis"]["range"]
    assert spec["layout"]["yaxis"]["autorange"] is False
    # The range follows the points (−2 % band … +6.6 %), not the noisy case's −60 % … +90 %.
    assert -10.0 < lo < -2.0 and 6.6 < hi < 15.0
    _, top, bottom = _point(spec, "noisy")
    assert (bottom, top) == (pytest.approx(lo), pytest.approx(hi))
    cut = _trace(spec, "interval runs past the chart")
    assert cut["x"] == ["noisy", "noisy"] and sorted(cut["y"]) == [pytest.approx(lo), pytest.approx(hi)]
    assert sorted(cut["marker"]["symbol"]) == ["triangle-down", "triangle-up"]
    assert "−60.0% … +90.0%" in cut["text"][0]
    # The narrow intervals are whole.
    assert _point(spec, "slower")[1:] == (pytest.approx(8.0), pytest.approx(5.0))
    assert _point(spec, "steady")[1:] == (pytest.approx(0.6), pytest.approx(-0.4))


def test_an_interval_a_little_past_the_points_widens_the_chart_instead() -> None:
    findings = [
        _timing("slower", "latency", 0.25, 0.20, 0.31, "regressed"),
        _timing("steady", "latency", 0.0, -0.01, 0.01),
    ]
    spec = figures.comparison_changes(findings, THRESHOLDS, "/run")
    assert spec is not None
    assert not [t for t in spec["data"] if t["name"] == "interval runs past the chart"]
    assert spec["layout"]["yaxis"]["range"][1] > 31.0
    assert _point(spec, "slower")[1] == pytest.approx(31.0)


def test_failures_backend_switches_and_accuracy_are_flags_above_the_points() -> None:
    findings = [
        _timing("slower", "latency", 0.066, 0.05, 0.08, "regressed"),
        Finding(
            case="broke",
            metric="status",
            status="regressed",
            verdict="fail",
            baseline="ok",
            candidate="failed",
            detail="ran in the baseline, failed in the candidate (RuntimeError: " + "x" * 1000 + ")",
        ),
        Finding(
            case="switched", metric="backend", status="regressed", verdict="fail", baseline="cudnn", candidate="math"
        ),
        Finding(case="wrong", metric="accuracy", status="regressed", verdict="fail", baseline=1e-3, candidate=0.2),
        Finding(case="new", metric="status", status="inconclusive", verdict="warn", candidate="ok"),
    ]
    spec = figures.comparison_changes(findings, THRESHOLDS, "/run")
    assert spec is not None
    _, hi = spec["layout"]["yaxis"]["range"]
    for name, case in (("case failed", "broke"), ("backend switched", "switched"), ("accuracy regressed", "wrong")):
        flag = _trace(spec, name)
        assert flag["x"] == [case] and _point(spec, "slower")[1] < flag["y"][0] < hi
        assert flag["customdata"] == [f"/run#{figures.case_anchor(case)}"]
    assert "cudnn → math" in _trace(spec, "backend switched")["text"][0]
    assert len(_trace(spec, "case failed")["text"][0]) < 400  # the error is in the answer, not in a hover
    assert "new" not in spec["layout"]["xaxis"]["categoryarray"]
    # A comparison whose only finding is a failed case still has its chart.
    only = figures.comparison_changes(findings[1:2], THRESHOLDS, "/run")
    assert only is not None and _trace(only, "case failed")["x"] == ["broke"]
