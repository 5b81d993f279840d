"""Bursts: a stretch of samples far slower than the rest is found; noise, heavy tails and real H200 runs are not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnprof.core.analysis.bursts import find_burst
from attnprof.core.documents import load_result

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "bench" / "reports" / "data" / "h200-2026-11-29"
CPU_LOADED = REPO / "tests" / "data" / "service" / "cpu-run-1.json"  # a 2-core host with load 2.3


def _noise(seed: int, n: int = 200, sigma: float = 0.05) -> list[float]:
    return [float(x) for x in 100.0 * np.exp(sigma * np.random.default_rng(seed).standard_normal(n))]


def test_ten_samples_at_160x_in_200_are_a_burst_with_their_place_and_size() -> None:
    samples = _noise(1)
    for i in range(100, 110):
        samples[i] *= 160.0
    burst = find_burst(samples)
    assert burst is not None
    assert (burst.far, burst.samples, burst.first, burst.last, burst.longest_run) == (10, 200, 100, 109, 10)
    assert 140 < burst.median_factor < 180
    text = burst.describe()
    assert text.startswith("a burst of 10 of 200 samples at 1")
    assert "between samples 101 and 110" in text and "took the machine" in text


def test_a_burst_over_half_the_samples_is_still_found() -> None:
    # The median lies inside such a burst; the lower quartile does not.
    samples = _noise(2, n=20)
    for i in range(4, 16):
        samples[i] *= 100.0
    burst = find_burst(samples)
    assert burst is not None and burst.far == 12 and burst.median_factor > 50


def test_three_scattered_far_samples_in_a_short_case_are_a_burst_but_two_are_not() -> None:
    samples = _noise(3, n=10)
    samples[1] *= 6.0
    samples[6] *= 9.0
    assert find_burst(samples) is None
    samples[8] *= 5.0
    assert find_burst(samples) is not None


def test_log_normal_and_heavy_tailed_noise_of_the_same_size_are_not_bursts() -> None:
    for seed in range(20):
        rng = np.random.default_rng(seed)
        log_normal = 100.0 * np.exp(0.25 * rng.standard_normal(200))
        student_t = 100.0 * np.exp(0.1 * rng.standard_t(3, 200))  # heavy tails on the log scale
        pareto_tail = 100.0 * (1.0 + 0.05 * rng.pareto(2.0, 200))  # a one-sided power-law tail of slow samples
        for samples in (log_normal, student_t, pareto_tail):
            assert find_burst([float(x) for x in samples]) is None, seed


def test_odd_slow_samples_in_a_long_case_are_not_a_burst() -> None:
    samples = _noise(4, n=2000)
    for i in (10, 500, 900, 1500, 1999):  # five lone hiccups at 4x, never two in a row: 0.25% of the case
        samples[i] *= 4.0
    assert find_burst(samples) is None


def test_committed_h200_runs_have_one_burst_a_real_flex_stall() -> None:
    flagged = []
    timed = 0
    for path in sorted(H200.glob("set-*/*.json.gz")):
        if path.name.startswith("dobench"):
            continue
        for case in load_result(path).cases:
            if case.latency_us is None or not case.latency_us.samples:
                continue
            timed += 1
            if find_burst(case.latency_us.samples) is not None:
                flagged.append((path.parent.name, path.name, case.id))
    assert timed == 150
    assert flagged == [("set-b", "run1.json.gz", "flex[pass=fwd]")]


def test_the_loaded_cpu_run_has_bursts_where_its_samples_split() -> None:
    doc = load_result(CPU_LOADED)
    cases = {c.id: c for c in doc.cases if c.latency_us is not None and c.latency_us.samples}
    flash = cases["sdpa[backend=flash,kv_heads=4]"]
    assert flash.latency_us is not None
    burst = find_burst(flash.latency_us.samples)
    assert burst is not None and burst.far == 9 and burst.samples == 20 and burst.median_factor > 30
    steady = cases["naive[pass=fwd_bwd]"]  # 10 samples within 8% of each other
    assert steady.latency_us is not None and find_burst(steady.latency_us.samples) is None


def test_too_few_or_degenerate_samples_are_no_burst() -> None:
    assert find_burst([]) is None
    assert find_burst([1.0, 500.0]) is None
    assert find_burst([0.0] * 10 + [5.0] * 5) is None


@pytest.mark.parametrize(("slow", "where"), [(range(4, 20), (5, 20)), (range(0, 17), (1, 17))])
def test_a_burst_over_three_quarters_of_the_samples_is_found_from_the_fastest_stretch(
    slow: range, where: tuple[int, int]
) -> None:
    # 160x over 16 or 17 of 20 samples: the lower quartile is inside the burst; the case's usual time is the
    # stretch of at least three samples in a row it ran at before or after the disturbance
    samples = [(100.0 + i % 3) * (160.0 if i in slow else 1.0) for i in range(20)]
    burst = find_burst(samples)
    assert burst is not None and burst.far == len(slow) and (burst.first + 1, burst.last + 1) == where
    assert burst.usual_us == 102.0 and "its fastest 3 samples in a row" in burst.describe()
    # two fast samples are no stretch, and a case that is slow throughout has no burst
    assert find_burst([s * 160.0 if i >= 2 else s for i, s in enumerate([100.0] * 20)]) is None
    assert find_burst([16_000.0 + i % 3 for i in range(20)]) is None
