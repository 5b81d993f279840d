"""Device peaks measured on the host: copy bandwidth and matmul rate per dtype, cached per testbed.

Measured ceilings beat datasheet ones: an H200 copies at ~4.3 TB/s (read + write) against 4.8 on
paper, and multiplies bf16 at ~790 TFLOP/s on random data against ~989. Utilisations against the
datasheet would read 10-20% low. The datasheet table is the fallback, marked as such.

A calibration taken while something else used the device reads low, and a cache keeps that error for
every later run: a CPU host calibrated under load read 7 GB/s and 0.02 TFLOP/s against 24 GB/s and
0.2 TFLOP/s measured quietly, which moved kernels across the ridge point. So a calibration is only
cached when it is shown to be quiet, by this rule:

- It is taken in rounds, each a full calibration (the copy and every matmul; on CPU the fastest of five
  timed repetitions, on CUDA their median), at most :data:`MAX_ROUNDS` of them (4 on CPU, 3 on CUDA).
  Interference only ever slows a measurement, so each peak is its best reading over the rounds; it is
  **confirmed** when another round came within :data:`AGREEMENT` (15%) of it. The calibration is
  **stable**, and stops, as soon as every peak is confirmed: on a quiet host after two rounds. One
  disturbed round (a CI job starting next door) is outvoted by the next; a best reading no other
  round reproduces is not trusted. Per peak rather than per round, because on a shared virtual machine
  the copy and the matmuls wander by 10-20% from round to round independently (measured on a 2-core
  cloud VM: two whole rounds agreed within 15% in only a third of consecutive pairs).
- On CPU, each round also reads the share of the host's CPU time used by *other* processes while it
  ran (``/proc/stat``'s busy time of all CPUs less this process's own CPU time). A round in which others
  used more than :data:`HOST_BUSY_LIMIT` (25%) of the host is **under load** and counts for nothing:
  an all-core matmul loses about that share, yet a steady load slows every round alike, so rounds
  taken under it would confirm each other (the 7 GB/s above). The load average is not used: it lags
  by a minute and counts this process's own work (a test run's previous case). Two rounds under load
  end the calibration (the load is not passing: a loaded host is not kept waiting). Where
  ``/proc/stat`` cannot be read (not Linux) only confirmation is checked; on CUDA too (other
  processes on the GPU are the run's ``suspect`` check, through NVML).
- A calibration that ends unconfirmed is used for this run only: it is not written to the cache,
  its :class:`~attnprof.core.documents.Peaks` say ``status`` ``unstable`` or ``under load`` and why
  (``note``), and each value's ``detail`` says it came from a calibration that was not confirmed.

A cache file is ``peaks-<testbed key>.json`` holding the peaks with the time they were measured
(UTC) and the software that measured them (torch, CUDA, the device's name). A file whose software
differs from this process's, or without those fields (written by an older attnprof), is stale and is
measured again. On CPU one calibration takes about 1 s (2 s at most), since it runs at the start of
every CPU profile run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import torch

from attnprof.core.documents import Peaks, PeakValue
from attnprof.core.documents.result import PeakStatus
from attnprof.core.measure.environment import software_versions
from attnprof.core.model import datasheet_peaks

CUDA_COPY_BYTES = 2 * 1024**3
CUDA_MATMUL_N = 8192
# Larger than the last-level cache of common server CPUs, so the copy is timed against DRAM.
CPU_COPY_BYTES = 256 * 1024**2
CPU_MATMUL_N = 1024
# CPUs without native half-precision matmul run fp16/bf16 100x slower than fp32: a smaller product
# keeps the calibration under a second while still timing the same code path.
CPU_HALF_MATMUL_N = 256
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

AGREEMENT: Final = 0.15
MAX_ROUNDS: Final = {"cpu": 4, "cuda": 3}
HOST_BUSY_LIMIT: Final = 0.25
DRAM: Final = "dram_gbps"

# A round's readings: ``dram_gbps`` in GB/s and one rate per dtype in TFLOP/s.
Rates = dict[str, float]
# Called as a round starts; what it returns is called as the round ends and gives the share (0-1) of the
# host's CPU time that other processes used in between, or None where that cannot be read.
BusyMeter = Callable[[], Callable[[], float | None]]


def _time_us(fn: Callable[[], object], device: str, reps: int, warmup: int = 3) -> float:
    """Microseconds per call of ``fn``: the median of ``reps`` timed calls on CUDA, the fastest on CPU, where the
    scheduler preempting one of a parallel region's threads stalls the whole call (a ceiling is what is sought)."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    for _ in range(reps):
        if device == "cuda":
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1000.0)
        else:
            t0 = time.perf_counter_ns()
            fn()
            times.append((time.perf_counter_ns() - t0) / 1000.0)
    return statistics.median(times) if device == "cuda" else min(times)


class _Workload:
    """The operands of one calibration, allocated once and timed in every round."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.copy_bytes = CUDA_COPY_BYTES if device == "cuda" else CPU_COPY_BYTES
        # The bytes' values do not matter to a copy; filling them (rather than drawing random ones) keeps the
        # CPU calibration short while still touching every page before the first timed copy.
        self.src = torch.full((self.copy_bytes,), 7, dtype=torch.uint8, device=device)
        self.dst = torch.empty_like(self.src)
        self.sizes: dict[str, int] = {}
        self.operands: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, dt in DTYPES.items():
            n = CUDA_MATMUL_N if device == "cuda" else CPU_MATMUL_N if name == "fp32" else CPU_HALF_MATMUL_N
            gen = torch.Generator(device=device).manual_seed(0)
            a = torch.randn(n, n, device=device, generator=gen).to(dt)
            b = torch.randn(n, n, device=device, generator=gen).to(dt)
            self.sizes[name] = n
            self.operands[name] = (a, b)

    def round(self) -> Rates:
        """One calibration: the copy's GB/s (bytes read + written) and each dtype's matmul TFLOP/s."""
        cuda = self.device == "cuda"
        reps, warmup = (10, 3) if cuda else (5, 1)
        copy_us = _time_us(lambda: self.dst.copy_(self.src), self.device, reps=reps, warmup=warmup)
        rates = {DRAM: 2 * self.copy_bytes / (copy_us * 1e-6) / 1e9}
        for name, (a, b) in self.operands.items():
            us = _time_us(functools.partial(torch.matmul, a, b), self.device, reps=reps, warmup=warmup)
            rates[name] = 2 * self.sizes[name] ** 3 / (us * 1e-6) / 1e12
        return rates

    def details(self) -> dict[str, str]:
        timed = "median of 10 timed reps" if self.device == "cuda" else "fastest of 5 timed reps"
        copy = f"device copy of {self.copy_bytes / 2**20:.0f} MiB, bytes read + written, {timed}"
        return {DRAM: copy} | {
            name: f"{n}x{n}x{n} {name} matmul on random data, {timed}" for name, n in self.sizes.items()
        }


def _cpu_jiffies() -> tuple[int, int] | None:
    """The host's (busy, total) CPU time over all CPUs since boot, in clock ticks; None without ``/proc/stat``."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    busy = user + nice + system + irq + softirq + steal  # steal: another virtual machine had our CPU
    return busy, busy + idle + iowait


def host_busy_meter() -> Callable[[], float | None]:
    """Start reading the share of the host's CPU time that processes other than this one use (a :data:`BusyMeter`).

    This process's own CPU time (all its threads: torch's matmul runs on every core) is subtracted, so a
    calibration does not count as its own load."""
    start = _cpu_jiffies()
    own_start = os.times()
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def share() -> float | None:
        end = _cpu_jiffies()
        own_end = os.times()
        if start is None or end is None or end[1] <= start[1]:
            return None
        own_s = (own_end.user - own_start.user) + (own_end.system - own_start.system)
        others = (end[0] - start[0]) - own_s * tick
        return min(1.0, max(0.0, others / (end[1] - start[1])))

    return share


def _unconfirmed(rounds: Sequence[Rates]) -> tuple[float, str] | None:
    """The peak whose best reading no other round came within :data:`AGREEMENT` of (the gap, the peak), or None."""
    gaps = []
    for key in rounds[0]:
        best, second = sorted((r[key] for r in rounds), reverse=True)[:2]
        gaps.append(((best - second) / best if best > 0 else 0.0, key))
    worst = max(gaps)
    return worst if worst[0] > AGREEMENT else None


def _highest(rounds: Sequence[Rates]) -> Rates:
    return {k: max(r[k] for r in rounds) for k in rounds[0]}


def settle(
    measure_round: Callable[[], Rates], *, max_rounds: int, busy_meter: BusyMeter | None = None
) -> tuple[Rates, PeakStatus, str]:
    """Repeat ``measure_round`` until every best reading is confirmed by a second quiet round (the rule in the module
    docstring). Returns the rates (the best quiet readings, else the best of all), the status and a note in words."""
    max_rounds = max(2, max_rounds)
    quiet: list[Rates] = []
    loaded: list[tuple[Rates, float]] = []
    while len(quiet) + len(loaded) < max_rounds:
        done = busy_meter() if busy_meter else None
        rates = measure_round()
        share = done() if done else None
        if share is not None and share > HOST_BUSY_LIMIT:
            loaded.append((rates, share))
        else:
            quiet.append(rates)
            if len(quiet) >= 2 and _unconfirmed(quiet) is None:
                return (
                    _highest(quiet),
                    "stable",
                    f"confirmed within {AGREEMENT:.0%} in {len(quiet) + len(loaded)} rounds",
                )
        left = max_rounds - len(quiet) - len(loaded)
        if len(loaded) >= 2 or len(quiet) + left < 2:
            break  # the load is not passing, or too few rounds are left: a loaded host is not kept waiting
    taken = len(quiet) + len(loaded)
    if loaded:
        note = (
            f"other processes used {max(s for _, s in loaded):.0%} of the host's CPU time (limit "
            f"{HOST_BUSY_LIMIT:.0%}) in {len(loaded)} of {taken} calibration rounds"
        )
        return _highest(quiet or [r for r, _ in loaded]), "under load", note
    gap, worst = _unconfirmed(quiet) or (0.0, "")
    note = f"{taken} calibration rounds left the best {worst} reading unconfirmed: the next was {gap:.0%} lower"
    return _highest(quiet), "unstable", note


def measure_peaks(
    device: str,
    *,
    max_rounds: int | None = None,
    busy_meter: BusyMeter | None = None,
    measure_round: Callable[[], Rates] | None = None,
) -> Peaks:
    """Calibrate: the copy bandwidth (GB/s, bytes read + written) and the matmul rate per dtype (TFLOP/s).

    ``busy_meter`` defaults to :func:`host_busy_meter` on CPU and to none on CUDA; ``measure_round`` to one
    real round on ``device`` (both are parameters so that a loaded host can be played). The result's
    ``status`` says whether the calibration was stable; ``origin`` and ``measured_with`` are left to the caller."""
    if busy_meter is None and device == "cpu":
        busy_meter = host_busy_meter
    rounds = max_rounds or MAX_ROUNDS.get(device, 3)
    measured_at = datetime.now(UTC)
    details: dict[str, str] = {}
    if measure_round is not None:
        rates, status, note = settle(measure_round, max_rounds=rounds, busy_meter=busy_meter)
    else:
        workload = _Workload(device)
        details = workload.details()
        try:
            rates, status, note = settle(workload.round, max_rounds=rounds, busy_meter=busy_meter)
        finally:
            del workload  # the operands go before the cache is emptied
            if device == "cuda":
                torch.cuda.empty_cache()
    how = (
        "the best of the calibration rounds, confirmed by another"
        if status == "stable"
        else f"the best of the calibration rounds, {status}: not confirmed, used for this run only"
    )

    def value(key: str) -> PeakValue:
        return PeakValue(value=rates[key], source="measured", detail=f"{details.get(key, key)}; {how}")

    return Peaks(
        dram_gbps=value(DRAM),
        tflops={k: value(k) for k in rates if k != DRAM},
        measured_at=measured_at,
        status=status,
        note=None if status == "stable" else note,
    )


def cache_software(device_name: str) -> dict[str, str | None]:
    """What a cached calibration must have been measured with to be reused: torch, CUDA and the device."""
    versions = software_versions()
    return {"torch": versions["torch"], "cuda": versions["cuda"], "device": device_name}


def cache_path(cache_dir: Path, testbed_key: str) -> Path:
    return cache_dir / f"peaks-{testbed_key}.json"


def _read_cache(path: Path, software: dict[str, str | None]) -> Peaks | None:
    """The cached peaks if they were measured by this software and confirmed stable; None if absent or stale."""
    try:
        peaks = Peaks.model_validate(json.loads(path.read_text()))
    except (ValueError, OSError):
        return None  # absent, corrupt, or a shape this version does not know: measured again
    if peaks.measured_at is None or peaks.measured_with != software or peaks.status != "stable":
        return None  # written by an older attnprof, or by other software
    if peaks.measured_at > datetime.now(UTC) + timedelta(minutes=5):
        return None  # dated ahead of this host's clock: another host's clock, or written by hand; not a calibration
    return peaks.model_copy(update={"origin": "cached"})


def load_or_measure(
    device: str,
    device_name: str,
    testbed_key: str,
    cache_dir: Path | None,
    *,
    measure: Callable[[str], Peaks] = measure_peaks,
) -> Peaks:
    """Peaks from the cache for this testbed key and software, else measured (and cached when stable), else the
    datasheet. ``measure`` is :func:`measure_peaks` unless a test plays another calibration."""
    software = cache_software(device_name)
    path = cache_path(cache_dir, testbed_key) if cache_dir else None
    if path:
        cached = _read_cache(path, software)
        if cached is not None:
            return cached
    try:
        peaks = measure(device)
    except (RuntimeError, torch.OutOfMemoryError):
        fallback = datasheet_peaks(device_name)
        if fallback is None:
            raise
        return fallback.model_copy(update={"origin": "datasheet"})
    peaks = peaks.model_copy(update={"origin": "measured now", "measured_with": software})
    if path and peaks.status == "stable":
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(peaks.model_dump_json(indent=2))
            tmp.replace(path)  # a reader never sees half a file
        except OSError:
            # An unwritable cache (a job's read-only view of it) only costs a re-measurement next time.
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
    return peaks
