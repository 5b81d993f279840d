"""The peaks calibration and its cache: dated and keyed by software, refused when unstable or taken under load.

Load is played by the two parameters ``measure_peaks`` takes for it (the host-busy reading and, where the
rates themselves must be chosen, the round of measurements); torch itself is never replaced, and some tests
run a real CPU calibration.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import torch

from attnprof.core.documents import Peaks
from attnprof.core.measure import environment as env
from attnprof.core.measure import peaks as peaks_mod
from attnprof.core.measure.peaks import (
    HOST_BUSY_LIMIT,
    Rates,
    cache_path,
    host_busy_meter,
    load_or_measure,
    measure_peaks,
)
from attnprof.core.measure.runner import calibrate

DEVICE_NAME = "Test CPU"
KEY = "testbed0"


def rates(gbps: float, fp32: float = 0.2) -> Rates:
    """A round's readings: GB/s and TFLOP/s, the half-precision rates scaled from fp32 as a CPU's are."""
    return {"dram_gbps": gbps, "fp32": fp32, "fp16": fp32 / 70, "bf16": fp32 * 1.5}


class Rounds:
    """Plays the given rounds in order and counts them."""

    def __init__(self, *readings: Rates) -> None:
        self.readings: Iterator[Rates] = iter(readings)
        self.calls = 0

    def __call__(self) -> Rates:
        self.calls += 1
        return next(self.readings)


def busy(*shares: float | None) -> Callable[[], Callable[[], float | None]]:
    """A busy meter reading ``shares`` in turn, one per round (the last repeated)."""
    readings = list(shares)

    def start() -> Callable[[], float | None]:
        share = readings.pop(0) if len(readings) > 1 else readings[0]
        return lambda: share

    return start


class QuietCalibration:
    """A stable calibration reading ``gbps`` and ``fp32`` TFLOP/s; counts its calls, for the cache tests."""

    def __init__(self, gbps: float = 24.0, fp32: float = 0.2) -> None:
        self.gbps, self.fp32, self.calls = gbps, fp32, 0

    def __call__(self, device: str) -> Peaks:
        self.calls += 1
        played = Rounds(rates(self.gbps, self.fp32), rates(self.gbps, self.fp32))
        return measure_peaks(device, measure_round=played, busy_meter=busy(0.0))


# The rule: each peak's best reading confirmed within 15% by another quiet round.


def test_two_agreeing_rounds_are_stable_and_give_the_best_reading() -> None:
    played = Rounds(rates(23.0, 0.2), rates(24.0, 0.19))
    peaks = measure_peaks("cpu", measure_round=played, busy_meter=busy(0.0))
    assert played.calls == 2
    assert peaks.status == "stable" and peaks.note is None
    assert peaks.dram_gbps.value == 24.0 and peaks.tflops["fp32"].value == 0.2
    assert set(peaks.tflops) == {"fp32", "fp16", "bf16"}
    assert peaks.measured_at is not None and peaks.measured_at.tzinfo is not None


def test_a_disturbed_round_is_outvoted_by_the_next() -> None:
    played = Rounds(rates(24.0), rates(12.0, fp32=0.1), rates(23.0))
    peaks = measure_peaks("cpu", measure_round=played, busy_meter=busy(0.0))
    assert played.calls == 3 and peaks.status == "stable"
    assert peaks.dram_gbps.value == 24.0 and peaks.tflops["fp32"].value == 0.2


def test_each_peak_may_be_confirmed_by_a_different_round() -> None:
    # the copy is confirmed by rounds 1 and 2, the matmuls by rounds 2 and 3
    played = Rounds(rates(24.0, 0.1), rates(23.0, 0.2), rates(15.0, 0.19))
    peaks = measure_peaks("cpu", measure_round=played, busy_meter=busy(0.0))
    assert played.calls == 3 and peaks.status == "stable"
    assert peaks.dram_gbps.value == 24.0 and peaks.tflops["fp32"].value == 0.2


def test_a_best_reading_no_other_round_reproduces_is_unstable_and_says_so() -> None:
    played = Rounds(rates(24.0), rates(12.0), rates(18.0), rates(16.0, fp32=0.05))
    peaks = measure_peaks("cpu", measure_round=played, busy_meter=busy(None))
    assert played.calls == 4 and peaks.status == "unstable"
    assert peaks.note == "4 calibration rounds left the best dram_gbps reading unconfirmed: the next was 25% lower"
    # the best reading of each peak all the same: interference only ever slows a measurement
    assert peaks.dram_gbps.value == 24.0 and peaks.tflops["fp32"].value == 0.2
    assert peaks.dram_gbps.detail and "used for this run only" in peaks.dram_gbps.detail


def test_steady_load_is_caught_by_the_host_reading_though_the_rounds_agree() -> None:
    # the user's host: 7 GB/s and 0.02 TFLOP/s in every round, consistently
    played = Rounds(rates(7.0, 0.02), rates(7.0, 0.02), rates(7.0, 0.02))
    peaks = measure_peaks("cpu", measure_round=played, busy_meter=busy(0.6))
    # two rounds under load end it: the load is not passing
    assert played.calls == 2 and peaks.status == "under load"
    assert peaks.note == "other processes used 60% of the host's CPU time (limit 25%) in 2 of 2 calibration rounds"
    assert peaks.dram_gbps.value == 7.0


def test_a_round_under_load_counts_for_nothing_and_the_quiet_ones_decide() -> None:
    played = Rounds(rates(24.0), rates(12.0, 0.02), rates(23.0))
    peaks = measure_peaks("cpu", measure_round=played, busy_meter=busy(0.0, HOST_BUSY_LIMIT + 0.1, 0.0))
    assert played.calls == 3 and peaks.status == "stable" and peaks.dram_gbps.value == 24.0

    # a round under load, whatever it read, does not confirm a quiet one
    played = Rounds(rates(24.0), rates(24.0), rates(12.0), rates(13.0))
    peaks = measure_peaks("cpu", measure_round=played, busy_meter=busy(0.0, HOST_BUSY_LIMIT + 0.1, 0.0, 0.0))
    assert played.calls == 4 and peaks.status == "under load" and peaks.dram_gbps.value == 24.0
    assert peaks.note and "in 1 of 4 calibration rounds" in peaks.note


# The cache.


def test_a_stable_calibration_is_cached_with_its_date_and_software_and_read_back(tmp_path: Path) -> None:
    measure = QuietCalibration()
    before = datetime.now(UTC)
    first = load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=measure)
    assert first.origin == "measured now" and first.status == "stable"
    path = cache_path(tmp_path, KEY)
    assert path.name == f"peaks-{KEY}.json" and list(tmp_path.iterdir()) == [path]
    stored = json.loads(path.read_text())
    assert stored["measured_with"] == {"torch": torch.__version__, "cuda": torch.version.cuda, "device": DEVICE_NAME}
    assert stored["measured_with"]["torch"] == env.software_versions()["torch"]
    measured_at = datetime.fromisoformat(stored["measured_at"])
    assert measured_at.utcoffset() is not None and measured_at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert before <= measured_at <= datetime.now(UTC)

    again = load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=measure)
    assert measure.calls == 1
    assert again.origin == "cached" and again.measured_at == first.measured_at
    assert again.dram_gbps == first.dram_gbps and again.tflops == first.tflops


def test_a_cache_dated_without_a_zone_is_read_as_utc(tmp_path: Path) -> None:
    load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=QuietCalibration(gbps=7.0, fp32=0.02))
    path = cache_path(tmp_path, KEY)
    naive = json.loads(path.read_text())
    naive["measured_at"] = "2026-11-30T08:15:00"
    path.write_text(json.dumps(naive))
    measure = QuietCalibration(gbps=24.0)
    peaks = load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=measure)
    assert measure.calls == 0 and peaks.origin == "cached" and peaks.dram_gbps.value == 7.0
    assert peaks.measured_at == datetime(2026, 11, 30, 8, 15, tzinfo=UTC)
    naive["measured_at"] = (datetime.now(UTC) + timedelta(days=30)).replace(tzinfo=None).isoformat()
    path.write_text(json.dumps(naive))
    assert load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=measure).origin == "measured now"


def test_a_cache_dated_ahead_of_the_clock_is_measured_again(tmp_path: Path) -> None:
    load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=QuietCalibration(gbps=7.0, fp32=0.02))
    path = cache_path(tmp_path, KEY)
    ahead = json.loads(path.read_text())
    ahead["measured_at"] = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    path.write_text(json.dumps(ahead))
    measure = QuietCalibration(gbps=24.0)
    peaks = load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=measure)
    assert measure.calls == 1 and peaks.origin == "measured now" and peaks.dram_gbps.value == 24.0
    assert datetime.fromisoformat(json.loads(path.read_text())["measured_at"]) <= datetime.now(UTC)


@pytest.mark.parametrize(
    ("field", "value"),
    [("torch", "1.13.1+cpu"), ("cuda", "11.8"), ("device", "Another CPU")],
)
def test_a_cache_measured_by_other_software_is_measured_again(tmp_path: Path, field: str, value: str) -> None:
    load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=QuietCalibration(gbps=7.0, fp32=0.02))
    path = cache_path(tmp_path, KEY)
    stale = json.loads(path.read_text())
    stale["measured_with"][field] = value
    path.write_text(json.dumps(stale))

    measure = QuietCalibration(gbps=24.0)
    peaks = load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=measure)
    assert measure.calls == 1 and peaks.origin == "measured now" and peaks.dram_gbps.value == 24.0
    rewritten = json.loads(path.read_text())
    assert rewritten["measured_with"][field] != value and rewritten["dram_gbps"]["value"] == 24.0


OLD_FORMAT = {
    "dram_gbps": {"value": 7.0, "source": "measured", "detail": "device copy of 256 MiB, bytes read + written"},
    "tflops": {
        "fp32": {"value": 0.02, "source": "measured", "detail": "1024x1024x1024 fp32 matmul on random data"},
        "fp16": {"value": 0.0003, "source": "measured", "detail": "256x256x256 fp16 matmul on random data"},
        "bf16": {"value": 0.03, "source": "measured", "detail": "256x256x256 bf16 matmul on random data"},
    },
}


@pytest.mark.parametrize(
    "content",
    [
        json.dumps(OLD_FORMAT),  # written by an older attnprof: no date, no software
        json.dumps(OLD_FORMAT | {"measured_at": "2026-01-02T03:04:05Z"}),  # dated, but by unknown software
        json.dumps(OLD_FORMAT | {"calibrated_by": "someone"}),  # a field this version does not know
        '{"dram_gbps": ',  # cut short
        "[]",
    ],
    ids=["old-format", "no-software", "unknown-field", "truncated", "not-an-object"],
)
def test_an_old_or_broken_cache_file_is_measured_again(tmp_path: Path, content: str) -> None:
    path = cache_path(tmp_path, KEY)
    path.write_text(content)
    measure = QuietCalibration()
    peaks = load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=measure)
    assert measure.calls == 1 and peaks.origin == "measured now" and peaks.dram_gbps.value == 24.0
    assert json.loads(path.read_text())["measured_at"]


def test_a_calibration_under_load_is_used_for_this_run_only(tmp_path: Path) -> None:
    # A real CPU calibration, read as taken while others used 90% of the host.
    loaded = functools.partial(measure_peaks, busy_meter=busy(0.9), max_rounds=2)
    peaks = load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=loaded)
    assert peaks.origin == "measured now" and peaks.status == "under load"
    assert peaks.note and peaks.note.startswith("other processes used 90%")
    assert all(v.value > 0 and v.detail and "used for this run only" in v.detail for v in peaks.tflops.values())
    assert not list(tmp_path.iterdir()), "a calibration under load was cached"

    # a stale cache stays as it was (and unused), rather than being replaced by a loaded calibration
    path = cache_path(tmp_path, KEY)
    path.write_text(json.dumps(OLD_FORMAT))
    assert load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=loaded).status == "under load"
    assert json.loads(path.read_text()) == OLD_FORMAT

    # a quiet host's calibration then takes its place
    assert load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=QuietCalibration()).status == "stable"
    assert load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=loaded).origin == "cached"


def test_a_cache_file_of_an_unconfirmed_calibration_is_not_used(tmp_path: Path) -> None:
    load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=QuietCalibration(gbps=7.0))
    path = cache_path(tmp_path, KEY)
    path.write_text(json.dumps(json.loads(path.read_text()) | {"status": "under load"}))
    peaks = load_or_measure("cpu", DEVICE_NAME, KEY, tmp_path, measure=QuietCalibration(gbps=24.0))
    assert peaks.origin == "measured now" and peaks.dram_gbps.value == 24.0


def test_the_datasheet_stands_in_when_the_calibration_fails(tmp_path: Path) -> None:
    def fails(device: str) -> object:
        raise RuntimeError("CUDA error: out of memory")

    peaks = load_or_measure("cuda", "NVIDIA H200", KEY, tmp_path, measure=fails)
    assert peaks.origin == "datasheet" and peaks.dram_gbps.source == "datasheet"
    assert not list(tmp_path.iterdir())


# A real calibration on this host.


def test_a_real_cpu_calibration_is_short_and_complete() -> None:
    started = time.perf_counter()
    peaks = measure_peaks("cpu")
    wall_s = time.perf_counter() - started
    # about 1 s on a quiet host, 2-2.5 s when loaded (three slowed rounds); the bound leaves room for a slow CI
    assert wall_s < 6.0, f"a CPU calibration took {wall_s:.1f} s"
    assert peaks.status in ("stable", "unstable", "under load")
    assert peaks.dram_gbps.value > 0 and set(peaks.tflops) == {"fp32", "fp16", "bf16"}
    assert all(v.value > 0 and v.source == "measured" for v in peaks.tflops.values())
    assert peaks.tflops["fp32"].detail and peaks.tflops["fp32"].detail.startswith("1024x1024x1024 fp32 matmul")


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the host reading needs /proc/stat")
def test_the_host_reading_counts_other_processes() -> None:
    cores = len(Path("/proc/stat").read_text().split("\ncpu")) - 1
    other = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 1.0\nwhile time.time() < end: pass"]
    )
    try:
        time.sleep(0.2)
        share = host_busy_meter()
        time.sleep(0.6)
        reading = share()
    finally:
        other.wait()
    # one busy process of another: at least most of one core of this host's
    assert reading is not None and reading >= 0.6 / cores


# The worker's calibration step.


def _key(device: str = "cpu") -> tuple[str, str]:
    dev = env.describe_device(device)
    return dev.name, env.testbed(dev, None, device)[0]


def test_calibrate_returns_the_cache_file_a_profile_run_reads(tmp_path: Path) -> None:
    name, key = _key()
    load_or_measure("cpu", name, key, tmp_path, measure=QuietCalibration())
    path, not_cached = calibrate("cpu", tmp_path)
    assert path == cache_path(tmp_path, key) and path.exists() and not_cached is None
    stored = json.loads(path.read_text())
    assert stored["status"] == "stable" and stored["measured_with"]["device"] == name


def test_calibrate_does_not_cache_a_calibration_taken_under_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the real calibration, with the host's reading played as 90% busy: nothing is cached, the reason comes back
    # (the worker starts all the same, and each job measures its own peaks)
    monkeypatch.setattr(peaks_mod, "host_busy_meter", busy(0.9))
    path, not_cached = calibrate("cpu", tmp_path, tries=2, pause_s=0.0)
    assert not_cached is not None and re.search(r"peaks-.*\.json were not cached: other processes used 90%", not_cached)
    assert not path.exists() and not list(tmp_path.glob("peaks-*.json"))
