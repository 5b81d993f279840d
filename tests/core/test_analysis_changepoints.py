"""E-divisive means on plain numbers and over a history of result documents."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from attnprof.core.analysis import changepoints, e_divisive, edivisive, render_changepoints
from attnprof.core.analysis.edivisive import _ranks, q_curves
from tests.core.result_documents import make_case, make_doc


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


def _bench_like(rng: np.random.Generator, n: int, shifts: list[tuple[int, float]]) -> np.ndarray:
    """Run medians with 0.6% noise, level shifts and 3% of runs in a slow mode, as in the benchmark."""
    level = np.full(n, 100.0)
    for at, size in shifts:
        level[at:] *= 1.0 + size
    x = level * np.exp(0.006 * rng.standard_normal(n))
    slow = rng.random(n) < 0.03
    x[slow] *= 1.0 + rng.uniform(0.03, 0.06, slow.sum())
    return x


def _full_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every permutation gets its exact Q, all of them at once: the test without bounds or early batches."""
    monkeypatch.setattr(edivisive._Bounds, "__call__", lambda self, bins: np.full(bins.shape[0], np.inf))
    monkeypatch.setattr(edivisive, "_BATCHES", ())


# (generator seed, length, shifts)
SERIES = [
    (0, 300, [(150, 0.02)]),
    (1, 300, [(100, 0.004)]),
    (100, 150, [(75, 0.003)]),  # near the threshold: accepted with some seeds, not with others
    (2, 400, [(120, -0.015), (260, 0.006)]),
    (3, 250, []),
    (4, 200, [(60, 0.03), (130, -0.03)]),
]


@pytest.mark.parametrize(("alpha", "permutations"), [(0.01, 99), (0.05, 39)])
@pytest.mark.parametrize(("series_seed", "n", "shifts"), SERIES)
def test_bounds_and_early_stopping_decide_as_the_full_test(
    series_seed: int,
    n: int,
    shifts: list[tuple[int, float]],
    alpha: float,
    permutations: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = _bench_like(np.random.default_rng(series_seed), n, shifts)
    fast = {seed: e_divisive(x, seed=seed, alpha=alpha, permutations=permutations) for seed in range(6)}
    _full_test(monkeypatch)
    for seed, found in fast.items():
        assert found == e_divisive(x, seed=seed, alpha=alpha, permutations=permutations)


def test_bounds_spare_the_exact_statistic_of_a_clear_change() -> None:
    x = _bench_like(np.random.default_rng(5), 400, [(200, 0.03)])
    null = edivisive._Null(x, 5, 0)
    best = null.candidate(0, x.size)
    assert best is not None
    assert null.p_value([(0, x.size)], best[1], 99, 0.01) == pytest.approx(0.01)
    shuffles = null.shuffles[(0, x.size)]
    assert shuffles.upper.size == 99
    assert np.isnan(shuffles.exact).sum() >= 90  # decided by the bound alone


@pytest.mark.parametrize("kind", ["normal", "ties", "shift", "skewed"])
def test_bound_is_an_upper_bound(kind: str) -> None:
    rng = np.random.default_rng(len(kind))
    for m, min_size in [(10, 5), (11, 2), (37, 3), (150, 5), (333, 8)]:
        x = rng.normal(100, 1, m)
        if kind == "ties":
            x = np.round(x)
        elif kind == "shift":
            x[m // 3 :] += 3
        elif kind == "skewed":
            x = rng.exponential(1, m) * 1e-3
        ranks, ordered = _ranks(x), np.sort(x)
        bounds = edivisive._Bounds(ordered, min_size)
        perm = rng.permuted(np.broadcast_to(np.arange(m), (40, m)), axis=1)
        perm = np.concatenate([perm, np.argsort(x)[None], np.argsort(-x)[None]])
        q = q_curves(x[perm], ranks[perm], ordered)
        q[:, :min_size] = -np.inf
        q[:, m - min_size + 1 :] = -np.inf
        upper = bounds(bounds.bin_of_rank[ranks][perm])
        assert (upper >= q.max(axis=1)).all()


def test_bin_edges_isolate_the_gap_between_two_levels() -> None:
    rng = np.random.default_rng(0)
    x = np.sort(np.concatenate([rng.normal(100, 0.5, 200), rng.normal(110, 0.5, 200)]))
    edges = edivisive._bin_edges(x, 16)
    assert edges[0] == 0 and edges[-1] == 400 and edges.size == 17 and (np.diff(edges) > 0).all()
    k = int(np.searchsorted(edges, 199, side="right")) - 1  # the bin holding the stretch from x[199] to x[200]
    assert edges[k + 1] - edges[k] == 1
    assert list(edivisive._bin_edges(np.arange(100.0), 4)) == [0, 25, 50, 75, 100]
    assert list(edivisive._bin_edges(np.ones(50), 16)) == [0, 50]


def test_sorted_top_is_the_best_q_of_the_sorted_arrangements() -> None:
    rng = np.random.default_rng(9)
    for m, min_size in [(10, 5), (31, 2), (200, 5)]:
        x = np.round(rng.normal(0, 3, m))
        ordered = np.sort(x)
        for arrangement, ascending in ((ordered, ordered), (ordered[::-1].copy(), -ordered[::-1])):
            best = edivisive._best(arrangement, min_size)
            assert best is not None
            assert edivisive._sorted_top(ascending, min_size) == pytest.approx(best[1], rel=1e-5, abs=1e-9)
    assert edivisive._sorted_top(np.arange(9.0), 5) == -np.inf


def test_permutations_do_not_depend_on_batches_or_on_other_segments() -> None:
    x = np.random.default_rng(6).normal(0, 1, 120)
    once = edivisive._Shuffles(x[40:], 5, 3, 40, 120)
    once.exceeds(np.arange(99), 0.0, 0.0)
    chunked = edivisive._Shuffles(x[40:], 5, 3, 40, 120)
    for upto in (1, 6, 30, 99):
        chunked.exceeds(np.arange(upto), 0.0, 0.0)
    assert np.array_equal(once.perms, chunked.perms) and np.array_equal(once.upper, chunked.upper)
    other = edivisive._Shuffles(x[:40], 5, 3, 0, 40)
    other.exceeds(np.arange(50), 0.0, 0.0)
    assert not np.array_equal(other.perms[:, :40], once.perms[:50, :40])


@pytest.mark.parametrize("batches", [(), (1,), (1, 2, 3), (50,), (98, 99, 100)])
def test_results_do_not_depend_on_the_batches(batches: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    xs = [_bench_like(np.random.default_rng(s), n, sh) for s, n, sh in SERIES]
    default = [e_divisive(x, seed=s) for s, x in enumerate(xs)]
    monkeypatch.setattr(edivisive, "_BATCHES", batches)
    assert [e_divisive(x, seed=s) for s, x in enumerate(xs)] == default
