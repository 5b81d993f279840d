"""Work that kernels declare themselves, as the trace pass recorded it (torch-free).

Two sources, each per kernel name and per iteration: what Triton kernels declared through their
``launch_metadata`` at each launch of the trace pass (kept in the trace under :data:`DECLARED_KEY`),
and what a custom factory declares for the kernels it launches (``work`` in its answer: a mapping from a
kernel-name fragment to ``{"flops": ..., "bytes": ...}`` per iteration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DECLARED_KEY = "attnprof.declared"


@dataclass(frozen=True)
class DeclaredWork:
    """FLOPs and bytes one kernel does per launch (either may be unknown)."""

    flops_per_launch: float | None
    bytes_per_launch: float | None


def launch_metadata_work(trace: Mapping[str, Any]) -> dict[str, DeclaredWork]:
    """Per kernel name: the mean FLOPs and bytes per launch its launches declared in the trace pass.

    A figure counts only when every launch of that kernel declared it."""
    section = trace.get(DECLARED_KEY)
    if not isinstance(section, Mapping):
        return {}
    launches = section.get("launches")
    if not isinstance(launches, list):
        return {}
    sums: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    for launch in launches:
        if not isinstance(launch, Mapping) or not isinstance(launch.get("name"), str):
            continue
        name = launch["name"]
        total = sums.setdefault(name, [0.0, 0.0])
        seen = counts.setdefault(name, [0, 0, 0])  # launches, with flops, with bytes
        seen[0] += 1
        for i, key in ((0, "flops"), (1, "bytes")):
            value = launch.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                total[i] += float(value)
                seen[i + 1] += 1
    out = {}
    for name, (flops, nbytes) in sums.items():
        n, with_flops, with_bytes = counts[name]
        out[name] = DeclaredWork(
            flops / n if with_flops == n else None,
            nbytes / n if with_bytes == n else None,
        )
    return out


def factory_work_for(
    kernel_name: str, declared: Mapping[str, Mapping[str, float | None]]
) -> tuple[float | None, float | None] | None:
    """FLOPs and bytes per iteration a factory declared for the kernel whose name contains one of its
    keys (the longest key that matches wins), or None when no key matches."""
    matches = [k for k in declared if k and k in kernel_name]
    if not matches:
        return None
    entry = declared[max(matches, key=len)]
    flops, nbytes = entry.get("flops"), entry.get("bytes")
    return (None if flops is None else float(flops), None if nbytes is None else float(nbytes))
