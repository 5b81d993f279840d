"""bench/h200_settle.py's wait: idle until the GPU's temperature stops falling, bounded, and no wait without NVML."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

from attnprof.core.documents import GpuHealth
from attnprof.core.measure.environment import Nvml
from bench.h200_settle import Settled, settle


class _FakeNvml:
    """A GPU whose temperature follows ``curve`` (°C at each second of a fake clock)."""

    def __init__(self, curve: list[float | None]) -> None:
        self.curve = curve
        self.t = 0.0

    def health(self) -> GpuHealth:
        return GpuHealth(temperature_c=self.curve[min(int(self.t), len(self.curve) - 1)])

    def sleep(self, s: float) -> None:
        self.t += s

    def now(self) -> float:
        return self.t


def _settle(curve: list[float | None], **kw: float) -> tuple[Settled, _FakeNvml]:
    gpu = _FakeNvml(curve)
    return settle(cast(Nvml, gpu), sleep=gpu.sleep, now=gpu.now, **kw), gpu


def _cooling(start: float, floor: float, per_s: float) -> Iterator[float]:
    t = start
    while True:
        yield t
        t = max(floor, t - per_s)


def test_a_cool_gpu_is_timed_after_one_window() -> None:
    result, _ = _settle([34.0] * 20)
    assert result.settled and result.waited_s == 5.0
    assert result.temperature_start_c == 34.0 and result.temperature_end_c == 34.0


def test_a_hot_gpu_waits_until_its_temperature_stops_falling() -> None:
    gen = _cooling(52.0, 40.0, 1.0)  # one degree a second down to 40 °C, reached at 12 s
    curve = [next(gen) for _ in range(40)]
    result, _ = _settle(curve)
    assert result.settled
    # settled once the reading 5 s before is at most 1 °C above: at 16 s it reads 40 against 41 at 11 s
    assert result.waited_s == 16.0
    assert result.temperature_start_c == 52.0 and result.temperature_end_c == 40.0


def test_the_wait_is_bounded_for_a_gpu_that_keeps_cooling() -> None:
    gen = _cooling(90.0, 0.0, 0.5)
    result, _ = _settle([next(gen) for _ in range(200)], max_s=20.0)
    assert not result.settled and 20.0 <= result.waited_s < 21.0


def test_without_a_temperature_there_is_no_wait() -> None:
    result, gpu = _settle([None])
    assert not result.settled and result.waited_s == 0.0 and gpu.t == 0.0
    assert result.temperature_start_c is None


def test_a_temperature_lost_mid_wait_ends_it_with_what_it_saw() -> None:
    result, gpu = _settle([60.0, 58.0, 56.0, None])
    assert not result.settled and result.waited_s == 3.0 and gpu.t == 3.0
    assert result.temperature_start_c == 60.0 and result.temperature_end_c == 56.0
