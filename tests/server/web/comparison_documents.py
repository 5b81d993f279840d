"""Result documents of the comparison page's tests, from the committed H200 run: a candidate whose softmax kernel
of the math backend's forward case is 61% slower (the case is memory-bound: its finding is a bandwidth drop), and
one in which a case also failed with a long stored error and another switched backend."""

from __future__ import annotations

import copy
from typing import Any

SOFTMAX_CASE = "sdpa[backend=math,pass=fwd]"
SOFTMAX_KERNEL = "softmax_warp_forward"
SOFTMAX_SLOWER = 1.61
FAILED_CASE = "flex[pass=fwd]"
SWITCHED_CASE = "sdpa[backend=cudnn,pass=fwd_bwd]"
_RATES = ("tflops", "gbps", "compute_util", "bandwidth_util")
# A CUDA out-of-memory error as PyTorch words it, with the traceback a worker stores: longer than the page shows.
_FRAME = '  File "/opt/attnprof/attnprof/core/measure/runner.py", line 212, in _timed\n    out = fn(*args)\n'
ERROR_MESSAGE = (
    "CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which 2.19 GiB is "
    "free. Of the allocated memory 131.02 GiB is allocated by PyTorch, and 4.95 GiB is reserved by PyTorch but "
    "unallocated.\nTraceback (most recent call last):\n" + _FRAME * 40
)


def slower_kernel(doc: dict[str, Any], case_id: str, key: str, factor: float) -> dict[str, Any]:
    """``doc`` with kernel ``key`` of case ``case_id`` ``factor`` times slower (its rates divided); the case's samples
    and statistics grow by the microseconds the kernel added, its achieved rates fall by the same ratio."""
    out = copy.deepcopy(doc)
    case = next(c for c in out["cases"] if c["id"] == case_id)
    added_us = 0.0
    for kernel in case["kernels"]:
        if kernel["key"] != key:
            continue
        added_us += kernel["duration_us"]["median"] * (factor - 1.0)
        for q in ("median", "p25", "p75"):
            kernel["duration_us"][q] *= factor
        for q in _RATES:
            if kernel.get(q) is not None:
                kernel[q] /= factor
    assert added_us > 0, f"no kernel {key} in {case_id}"
    lat = case["latency_us"]
    scale = (lat["median"] + added_us) / lat["median"]
    lat["samples"] = [v + added_us for v in lat["samples"]]
    for q in ("median", "p25", "p75", "min", "max"):
        lat[q] += added_us
    for q in _RATES:
        if (case.get("achieved") or {}).get(q) is not None:
            case["achieved"][q] /= scale
    return out


def broken(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` in which ``FAILED_CASE`` failed (its stored error ``ERROR_MESSAGE``) and ``SWITCHED_CASE`` ran on
    another backend than it did in the baseline."""
    out = copy.deepcopy(doc)
    for case in out["cases"]:
        if case["id"] == FAILED_CASE:
            case.update(
                status="failed",
                error={"type": "torch.OutOfMemoryError", "message": ERROR_MESSAGE},
                latency_us=None,
                achieved=None,
                kernels=[],
                trace=None,
                reconciliation=None,
            )
        elif case["id"] == SWITCHED_CASE:
            case["backend_used"] = "math"
    return out
