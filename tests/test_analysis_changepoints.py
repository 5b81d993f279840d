"""E-divisive means on plain numbers and over a history of result documents."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from test_analysis_fixtures import make_case, make_doc

from profiler_core.analysis import changepoints, e_divisive, render_changepoints
from profiler_core.analysis.edivisive import _ranks, q_curves


def _brute_q(x: np.ndarray) -> np.ndarray:
    """Q(tau) straight from the definition (Otava's QQ), O(m^3)."""
    m = x.size
    out = np.full(m, -np.inf)
    for t in range(2, m - 1):
        a, b = x[:t], x[t:]
        cross = np.abs(a[:, None] - b[None, :]).sum()
        sa = np.abs(a[:, None] - a[None, :]).sum() / 2
        sb = np.abs(b[:, None] - b[None, :]).sum() / 2
        out[t] = 2 / m * cross - 2 * b.size / (m * (t - 1)) * sa - 2 * t / (m * (b.size - 1)) * sb
    return out


@pytest.mark.parametrize("m", [5, 17, 64, 150])
def test_q_matches_the_definition(m: int) -> None:
    rng = np.random.default_rng(m)
    x = 100 + rng.standard_normal(m)
    x[m // 2 :] += 2
    x[1] = x[3]  # a tie
    q = q_curves(x[None, :], _ranks(x)[None, :], np.sort(x))[0]
    ref = _brute_q(x)
    ok = np.isfinite(ref)
    assert np.allclose(q[ok], ref[ok], rtol=1e-5, atol=1e-6)
    assert not np.isfinite(q[~ok]).any()


def test_finds_two_shifts_where_they_are() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(100, 1, 120), rng.normal(103, 1, 80), rng.normal(101, 1, 100)])
    found = e_divisive(x)
    assert [c.index for c in found] == [120, pytest.approx(200, abs=3)]
    first = found[0]
    assert first.mean_before == pytest.approx(100, abs=0.3) and first.mean_after == pytest.approx(103, abs=0.3)
    assert first.change == pytest.approx(0.03, abs=0.004) and first.p <= 0.01


def test_no_change_point_in_noise() -> None:
    rng = np.random.default_rng(2)
    false = sum(len(e_divisive(rng.normal(100, 1, 200), seed=s)) for s in range(20))
    assert false <= 2


def test_min_size_is_respected() -> None:
    x = [1.0] * 60 + [5.0] * 3
    assert all(5 <= c.index <= len(x) - 5 for c in e_divisive(x, min_size=5))
    assert [c.index for c in e_divisive(x, min_size=3)] == [60]


def test_short_and_constant_series() -> None:
    assert e_divisive([]) == []
    assert e_divisive([1.0]) == []
    assert e_divisive([2.0] * 50) == []


def test_deterministic_for_a_seed() -> None:
    x = np.random.default_rng(3).normal(0, 1, 300)
    x[150:] += 0.5
    assert e_divisive(x, seed=11) == e_divisive(x, seed=11)


def test_a_1000_point_series_is_fast() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(100, 1, 1000)
    x[600:] *= 1.02
    start = time.perf_counter()
    found = e_divisive(x)
    elapsed = time.perf_counter() - start
    assert [c.index for c in found] == [pytest.approx(600, abs=3)]
    assert elapsed < 2.0  # generous: shared CI cores; bench/changepoints_vs_otava.py measures it properly


def _history(levels: list[float], metric_bound: str = "latency"):
    docs = []
    for i, lv in enumerate(levels):
        case = make_case(factor=lv, seed=i, bound=metric_bound, n=50)
        other = make_case("decode[backend=flash]", backend="flash", seed=1000 + i, n=50)
        docs.append(make_doc(f"run-{i:03d}", [case, other], day=i))
    return docs


def test_changepoints_over_result_documents() -> None:
    levels = [1.0] * 15 + [1.05] * 15
    rng = np.random.default_rng(0)
    levels = [lv * float(np.exp(0.003 * rng.standard_normal())) for lv in levels]
    report = changepoints(_history(levels))
    by_case = {c.case: c for c in report.cases}
    pre = by_case["prefill[backend=cudnn]"]
    assert [p.index for p in pre.points] == [15]
    point = pre.points[0]
    assert point.run_id == "run-015" and point.regression and point.change == pytest.approx(0.05, abs=0.01)
    assert by_case["decode[backend=flash]"].points == []
    assert report.runs[0] == "run-000" and pre.unit == "us" and pre.length == 30
    text = render_changepoints(report)
    assert "at #15 (run run-015)" in text and "decode[backend=flash]: none" in text
    assert json.loads(report.to_json())["cases"][0]["points"][0]["index"] == 15


def test_changepoints_throughput_falls_is_a_regression() -> None:
    report = changepoints(_history([1.0] * 12 + [1.1] * 12), metric="throughput", case="prefill[backend=cudnn]")
    assert len(report.cases) == 1
    point = report.cases[0].points[0]
    assert point.index == 12 and point.regression and point.mean_after < point.mean_before


def test_changepoints_skip_failed_runs_and_note_testbeds() -> None:
    docs = _history([1.0] * 12 + [1.1] * 12)
    docs[3].cases[0] = make_case(status="failed")
    docs[20].environment.testbed_key = "other"
    report = changepoints(docs, case="prefill[backend=cudnn]")
    case = report.cases[0]
    assert case.length == 23 and case.points[0].index == 12
    assert any("2 testbeds" in n for n in report.notes)
