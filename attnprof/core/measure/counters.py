"""Deep mode: hardware counters from Nsight Compute over the kernels that matter.

ncu replays each selected kernel once per metric group (seconds per kernel), so the pass is
restricted to the kernels that take at least ``MIN_SHARE`` of a case's time, one launch each, with
``--clock-control none`` (the clocks are measured as found, never locked). The counter-based bound
follows NVIDIA's speed-of-light rule with the tensor pipe's activity counted as compute.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from attnprof.core.documents import Case
from attnprof.core.errors import CountersUnavailable
from attnprof.core.model import counter_bound
from attnprof.core.suite import Suite

MIN_SHARE = 0.05
METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
)
DEFAULT_LOCATIONS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu")
PER_CASE_TIMEOUT_S = 600


def find_ncu(device: str, explicit: str | None = None) -> str:
    """The ncu executable, or :class:`CountersUnavailable` naming what is missing."""
    if device != "cuda":
        raise CountersUnavailable("--counters ncu needs a CUDA device; this run is on the CPU")
    candidates = [explicit] if explicit else [shutil.which("ncu"), *DEFAULT_LOCATIONS]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    if explicit:
        raise CountersUnavailable(
            f"--counters ncu: {explicit} is not an executable Nsight Compute `ncu` "
            "(give the path of ncu, or run with --counters none)"
        )
    raise CountersUnavailable(
        "--counters ncu needs Nsight Compute: no `ncu` on PATH nor at "
        + ", ".join(DEFAULT_LOCATIONS)
        + " (install Nsight Compute, or run with --counters none)"
    )


_ANONYMOUS_NAMESPACES = ("(anonymous namespace)::", "<unnamed>::", "`anonymous namespace'::")


def base_name(name: str) -> str:
    """The function's own name: no return type, namespaces, template or parameter lists.

    ncu and Kineto demangle differently (ncu drops namespaces: ``vectorized_elementwise_kernel<...>``
    where Kineto says ``at::native::vectorized_elementwise_kernel<...>``), so kernels are matched on
    this base name plus their launch configuration. An anonymous namespace, written
    ``(anonymous namespace)::`` by both (``<unnamed>::`` by some demanglers), is dropped first: its
    parenthesis and angle bracket would otherwise end the name before it starts
    (``void (anonymous namespace)::softmax_warp_forward<...>`` is ``softmax_warp_forward``).
    """
    stem = name.strip().removeprefix("void ")
    for anonymous in _ANONYMOUS_NAMESPACES:
        stem = stem.replace(anonymous, "")
    depth, cut = 0, len(stem)
    for i, ch in enumerate(stem):
        if ch == "<":
            if depth == 0:
                cut = min(cut, i)
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = min(cut, i)
            break
    stem = stem[:cut]
    return stem.rsplit("::", 1)[-1].strip()


def kernel_regex(names: list[str]) -> str:
    """An ncu ``regex:`` over demangled names: the base name of each kernel.

    A name with no base name is left out: an empty alternative would match every kernel.
    """
    return "|".join(dict.fromkeys(re.escape(b) for b in map(base_name, names) if b))


def _dims(text: str | None) -> tuple[int, ...] | None:
    nums = re.findall(r"\d+", text or "")
    return tuple(int(n) for n in nums) if nums else None


NcuKernel = tuple[str, tuple[int, ...] | None, tuple[int, ...] | None, dict[str, float]]


def parse_ncu_csv(text: str) -> list[NcuKernel]:
    """Rows of ``ncu --csv``: [(kernel name, grid, block, {metric: value})] in launch order.

    Values keep ncu's base units (``gpu__time_duration.sum`` in ns, bytes, percentages 0-100);
    thousands separators are removed.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    kernels: dict[str, NcuKernel] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        kid = row.get("ID")
        name = row.get("Kernel Name") or ""
        metric = row.get("Metric Name")
        raw = (row.get("Metric Value") or "").replace(",", "")
        if kid is None or not metric:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        grid, block = _dims(row.get("Grid Size")), _dims(row.get("Block Size"))
        kernels.setdefault(kid, (name, grid, block, {}))[3][metric] = value
    return [kernels[k] for k in sorted(kernels, key=lambda k: int(k) if k.isdigit() else 0)]


def merge_counters(case: Case, rows: list[NcuKernel]) -> int:
    """Attach counters to the case's kernels (base name and launch configuration), first launch each.

    ncu reports every launch in the profiled iteration, in launch order. Each row goes to the first
    kernel (in order of first appearance) of the same base name and launch configuration that still has
    launches left in the iteration (``launches_per_iter``); only a kernel's first launch sets its
    counters, so a kernel launched three times does not hand its later launches to another kernel of
    the same shape. Returns how many kernels received counters.
    """
    matched = 0
    left = [round(k.launches_per_iter) for k in case.kernels]
    for name, grid, block, values in rows:
        base = base_name(name)
        for i, k in enumerate(case.kernels):
            if left[i] <= 0 or base_name(k.name) != base:
                continue
            if (grid and k.grid and tuple(k.grid) != grid) or (block and k.block and tuple(k.block) != block):
                continue
            first = left[i] == round(k.launches_per_iter)
            left[i] -= 1
            if first:
                k.counters = values
                k.counters_from = "ncu"
                k.counters_measured_at = datetime.now(UTC)
                memory = values.get("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
                sm = values.get("sm__throughput.avg.pct_of_peak_sustained_elapsed")
                tensor = values.get("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
                if memory is not None and sm is not None:
                    k.counter_bound = counter_bound(sm, memory, tensor or 0.0)
                matched += 1
            break
    return matched


def run_counter_pass(
    ncu: str, suite: Suite, cases: list[Case], *, progress: Callable[[str, int, int, str], None] | None = None
) -> None:
    """Replay each ok case's heavy kernels under ncu and merge the counters into ``kernels[].counters``."""
    todo = [c for c in cases if c.status == "ok" and c.kernels]
    for i, case in enumerate(todo):
        if progress:
            progress("counters", i, len(todo), case.id)
        heavy = [k.name for k in case.kernels if (k.share or 0) >= MIN_SHARE]
        if not heavy:
            continue
        cmd = [
            ncu,
            "--profile-from-start",
            "off",
            "--clock-control",
            "none",
            "--target-processes",
            "all",
            "--kernel-name-base",
            "demangled",
            "--kernel-name",
            f"regex:{kernel_regex(heavy)}",
            "--metrics",
            ",".join(METRICS),
            "--csv",
            "--print-units",
            "base",
            sys.executable,
            "-m",
            "attnprof.core.measure.single",
            suite.source,
            "--case",
            case.id,
        ]
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PER_CASE_TIMEOUT_S, check=False)
        case.counters_wall_s = round(time.perf_counter() - started, 3)
        rows = parse_ncu_csv(proc.stdout)
        if proc.returncode != 0 or not rows:
            tail = (proc.stderr or proc.stdout)[-600:]
            raise CountersUnavailable(f"ncu failed on {case.id} (exit {proc.returncode}): {tail}")
        merge_counters(case, rows)
