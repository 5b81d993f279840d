"""The clock study `bench/h200_clock.py` runs on the H200, its pure parts on the CPU: which kernels and probes belong
to which iteration, the clock a probe's reading gives, and NVML's summary."""

from __future__ import annotations

import pytest

from bench.h200_clock import Sampler, _overlap, around, inside, mhz, split_step

SPIN = "at::cuda::(anonymous namespace)::spin_kernel(long)"


def _e(name: str, start: float, dur: float, grid: tuple[int, ...] = (1, 1, 1)) -> tuple:
    return (name, grid, (128, 1, 1), start, dur)


def test_each_iteration_gets_its_kernels_and_probes_and_the_flush_is_dropped() -> None:
    flush = _e("reduce_kernel<amax>", 0, 60, (528, 1, 1))
    events = [
        _e("fill", 0, 1),  # zero_grads, outside the markers
        flush,
        _e(SPIN, 61, 1),
        _e("clock_probe", 62, 10),
        _e("gemm", 63, 80),  # the second stream's probe started first
        _e("clock_probe", 150, 10),
        _e("softmax", 151, 20),
        _e(SPIN, 172, 1),
        _e(SPIN, 180, 1),
        _e("clock_probe", 181, 10),
        _e("gemm", 182, 80),
        _e(SPIN, 263, 1),
        _e("clock_probe", 264, 10),  # a late probe of the second stream: it belongs to the last iteration
    ]
    got = split_step(events, {flush[:3]})
    assert [[k[0] for k in ks] for ks, _ in got] == [["gemm", "softmax"], ["gemm"]]
    assert [[i for i, _ in ps] for _, ps in got] == [[0, 1], [2, 3]]


def test_a_probe_reading_is_cycles_over_nanoseconds_in_mhz() -> None:
    assert mhz((19_800, 10_000)) == pytest.approx(1980.0)
    assert mhz((17_000, 10_000)) == pytest.approx(1700.0)
    assert mhz((100, 0)) is None  # a timer that did not advance gives no clock


def test_overlap_is_the_shared_time_of_two_launches() -> None:
    assert _overlap(_e("a", 0, 10), _e("b", 5, 10)) == 5
    assert _overlap(_e("a", 0, 10), _e("b", 10, 10)) == 0
    assert _overlap(_e("a", 0, 10), _e("b", 20, 1)) == 0


def test_nvml_summary_counts_each_reason_by_its_bit() -> None:
    s = Sampler.__new__(Sampler)
    s.samples = [(1980.0, 300.0, 0), (1755.0, 690.0, 0x4), (1700.0, 700.0, 0x4 | 0x80), (1980.0, 310.0, 0)]
    got = s.summary()
    assert got["sm_mhz"] == {"median": 1867.5, "min": 1700.0}
    assert got["reasons"]["sw_power_cap"] == 0.5
    assert got["reasons"]["hw_power_brake"] == 0.25
    assert got["reasons"]["hw_slowdown"] == 0.0
    assert s.samples == []  # the next case starts with none


def test_a_probe_beside_a_kernel_counts_only_when_it_lies_inside_it() -> None:
    gemm, soft = _e("gemm", 100, 80), _e("softmax", 181, 20)
    probes = [
        (_e("clock_probe", 101, 4), 1750.0),  # inside the GEMM
        (_e("clock_probe", 178, 4), 1950.0),  # mostly after it: a sliver of the GEMM, most of the softmax
    ]
    assert inside([gemm, soft], probes) == [1750.0, None]  # 1 µs of its 4 inside the softmax: not its clock
    late = [(_e("clock_probe", 182, 4), 1960.0)]
    assert inside([gemm, soft], late) == [None, 1960.0]
    assert inside([gemm], []) == [None]
    assert inside([_e("short", 0, 2)], [(_e("clock_probe", 0, 4), 1900.0)]) == [None]  # longer than the kernel


def test_the_probes_between_kernels_are_the_nearest_before_and_after() -> None:
    gemm, soft = _e("gemm", 100, 80), _e("softmax", 200, 20)
    probes = [
        (_e("clock_probe", 80, 10), 1960.0),
        (_e("clock_probe", 90, 10), 1955.0),  # the last to end before the GEMM
        (_e("clock_probe", 180, 10), 1800.0),  # right after the GEMM, before the softmax
        (_e("clock_probe", 225, 10), 1965.0),
    ]
    before, after = around([gemm, soft], probes)
    assert before == [1955.0, 1800.0]
    assert after == [1800.0, 1965.0]
    assert around([gemm], []) == ([None], [None])
