"""Device peaks measured on the host: copy bandwidth and matmul rate per dtype, cached per testbed.

Measured ceilings beat datasheet ones: an H200 copies at ~4.3 TB/s (read + write) against 4.8 on
paper, and multiplies bf16 at ~790 TFLOP/s on random data against ~989. Utilisations against the
datasheet would read 10-20% low. The datasheet table is the fallback, marked as such.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from profiler_core.documents import Peaks, PeakValue
from profiler_core.model import datasheet_peaks

CUDA_COPY_BYTES = 2 * 1024**3
CUDA_MATMUL_N = 8192
CPU_COPY_BYTES = 256 * 1024**2
CPU_MATMUL_N = 1024
# CPUs without native half-precision matmul run fp16/bf16 100x slower than fp32: a smaller product
# keeps the calibration under a second while still timing the same code path.
CPU_HALF_MATMUL_N = 256
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _time_us(fn: Callable[[], object], device: str, reps: int, warmup: int = 3) -> float:
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
    return statistics.median(times)


def measure_peaks(device: str) -> Peaks:
    """Measure the copy bandwidth (GB/s, bytes read + written) and the matmul rate per dtype (TFLOP/s)."""
    nbytes = CUDA_COPY_BYTES if device == "cuda" else CPU_COPY_BYTES
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_us = _time_us(lambda: dst.copy_(src), device, reps=10 if device == "cuda" else 5)
    gbps = 2 * nbytes / (copy_us * 1e-6) / 1e9
    tflops = {}
    for name, dt in DTYPES.items():
        n = CUDA_MATMUL_N if device == "cuda" else CPU_MATMUL_N if name == "fp32" else CPU_HALF_MATMUL_N
        gen = torch.Generator(device=device).manual_seed(0)
        a = torch.randn(n, n, device=device, generator=gen).to(dt)
        b = torch.randn(n, n, device=device, generator=gen).to(dt)
        us = _time_us(functools.partial(torch.matmul, a, b), device, reps=10 if device == "cuda" else 3)
        tflops[name] = PeakValue(
            value=2 * n**3 / (us * 1e-6) / 1e12,
            source="measured",
            detail=f"{n}x{n}x{n} {name} matmul on random data, median of timed reps",
        )
        del a, b
    if device == "cuda":
        torch.cuda.empty_cache()
    return Peaks(
        dram_gbps=PeakValue(
            value=gbps, source="measured", detail=f"device copy of {nbytes / 2**20:.0f} MiB, bytes read + written"
        ),
        tflops=tflops,
    )


def load_or_measure(device: str, device_name: str, testbed_key: str, cache_dir: Path | None) -> Peaks:
    """Peaks from the cache for this testbed key, else measured (and cached), else the datasheet."""
    path = cache_dir / f"peaks-{testbed_key}.json" if cache_dir else None
    if path and path.exists():
        try:
            return Peaks.model_validate(json.loads(path.read_text()))
        except (ValueError, OSError):
            pass  # a corrupt cache is re-measured
    try:
        peaks = measure_peaks(device)
    except (RuntimeError, torch.OutOfMemoryError):
        fallback = datasheet_peaks(device_name)
        if fallback is None:
            raise
        return fallback
    if path:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(peaks.model_dump_json(indent=2))
        except OSError:
            pass  # an unwritable cache only costs a re-measurement next time
    return peaks
