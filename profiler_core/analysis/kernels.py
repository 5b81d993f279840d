"""Which kernels moved between the baseline runs and the candidate, joined by stable key and phase."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from profiler_core.documents.comparison import FieldChange, KernelMove
from profiler_core.documents.result import Kernel

LAUNCH_FIELDS = (
    "launches_per_iter",
    "grid",
    "block",
    "registers_per_thread",
    "shared_mem_bytes",
    "theoretical_occupancy",
    "occupancy_limiter",
)
RATE_FIELDS = ("tflops", "gbps", "compute_util", "bandwidth_util", "bound")
# A change in the SM clock under load worth naming, a kernel's among its changes and a case's beside its timing
# finding. The clock pass reads a few iterations of its own: on an H200 with clocks unlocked, its readings of one
# case in five processes of unchanged code lay up to 3.3% apart (bench/reports/h200-truth.md, section 4), so a
# smaller move may be the pass's own spread.
CLOCK_MOVE = 0.04
DRAM_COUNTERS = ("dram__bytes_read.sum", "dram__bytes_write.sum")

# A kernel "moved" when its time changed by at least this fraction of its own time, or by this fraction of
# the case's time: smaller moves are trace-pass noise (one traced iteration, no repeats).
MOVED_RELATIVE = 0.02
MOVED_SHARE_OF_CASE = 0.005


@dataclass
class _Side:
    kernel: Kernel  # the representative (latest run's) record, for launch configuration and name
    duration_us: float
    dram_bytes: float | None


def dram_bytes(kernel: Kernel) -> float | None:
    """DRAM bytes read plus written per iteration, from ncu counters, or ``None`` without them.

    ncu reports one launch; a kernel launched several times per iteration moves that many times the bytes.
    """
    counters = kernel.counters
    if not counters or any(name not in counters for name in DRAM_COUNTERS):
        return None
    per_launch = sum(float(counters[name]) for name in DRAM_COUNTERS)
    return per_launch * max(float(kernel.launches_per_iter), 1.0)


def _by_key(kernels: Sequence[Kernel]) -> dict[tuple[str, str], _Side]:
    """One entry per (key, phase); repeated keys (e.g. several elementwise adds) are summed."""
    out: dict[tuple[str, str], _Side] = {}
    for k in kernels:
        ident = (k.key, k.phase)
        nbytes = dram_bytes(k)
        if ident in out:
            side = out[ident]
            side.duration_us += k.duration_us.median
            if side.dram_bytes is not None and nbytes is not None:
                side.dram_bytes += nbytes
        else:
            out[ident] = _Side(k, k.duration_us.median, nbytes)
    return out


def _rel(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or before == 0:
        return None
    return (after - before) / before


def _diffs(before: Kernel, after: Kernel, fields: tuple[str, ...]) -> list[FieldChange]:
    changes = []
    for field in fields:
        a, b = getattr(before, field), getattr(after, field)
        if a == b or (a is None and b is None):
            continue
        numeric = isinstance(a, int | float) and isinstance(b, int | float)
        changes.append(FieldChange(field=field, baseline=a, candidate=b, change=_rel(a, b) if numeric else None))
    return changes


def kernel_moves(
    baseline_runs: Sequence[Sequence[Kernel]], candidate: Sequence[Kernel], *, case_us: float
) -> list[KernelMove]:
    """Kernels that moved, appeared or vanished, largest absolute time change first.

    ``baseline_runs`` holds each baseline run's kernels in run order; the baseline duration of a kernel is
    the median over the runs that launched it, its launch configuration the latest such run's. ``case_us``
    (the case's baseline median, microseconds) scales what counts as a move.
    """
    base_sides = [_by_key(run) for run in baseline_runs]
    cand = _by_key(candidate)
    keys: list[tuple[str, str]] = []
    for sides in [*base_sides, cand]:
        keys.extend(k for k in sides if k not in keys)
    moves = []
    for ident in keys:
        present = [sides[ident] for sides in base_sides if ident in sides]
        after = cand.get(ident)
        if not present and after is None:
            continue
        if not present:
            assert after is not None
            moves.append(_appeared(after))
            continue
        before = present[-1]
        base_us = float(np.median([s.duration_us for s in present]))
        if after is None:
            moves.append(
                KernelMove(
                    key=ident[0],
                    phase=ident[1],
                    name=before.kernel.name,
                    baseline_us=base_us,
                    delta_us=-base_us,
                    change=-1.0,
                    vanished=True,
                )
            )
            continue
        move = _moved(ident, before, after, base_us, present)
        if move is not None and _significant(move, case_us):
            moves.append(move)
    moves.sort(key=lambda m: abs(m.delta_us or 0.0), reverse=True)
    return moves


def _appeared(after: _Side) -> KernelMove:
    k = after.kernel
    return KernelMove(
        key=k.key,
        phase=k.phase,
        name=k.name,
        candidate_us=after.duration_us,
        delta_us=after.duration_us,
        appeared=True,
    )


def _moved(
    ident: tuple[str, str], before: _Side, after: _Side, base_us: float, present: list[_Side]
) -> KernelMove | None:
    launch = _diffs(before.kernel, after.kernel, LAUNCH_FIELDS)
    rates = _diffs(before.kernel, after.kernel, RATE_FIELDS)
    base_bytes = [s.dram_bytes for s in present if s.dram_bytes is not None]
    if base_bytes and after.dram_bytes is not None:
        b = float(np.median(base_bytes))
        if b != after.dram_bytes:
            change = _rel(b, after.dram_bytes)
            rates.append(FieldChange(field="dram_bytes", baseline=b, candidate=after.dram_bytes, change=change))
    clock = _rel(before.kernel.sm_clock_mhz, after.kernel.sm_clock_mhz)
    if clock is not None and abs(clock) >= CLOCK_MOVE:
        rates.append(
            FieldChange(
                field="sm_clock_mhz",
                baseline=before.kernel.sm_clock_mhz,
                candidate=after.kernel.sm_clock_mhz,
                change=clock,
            )
        )
    return KernelMove(
        key=ident[0],
        phase=ident[1],
        name=after.kernel.name,
        baseline_us=base_us,
        candidate_us=after.duration_us,
        delta_us=after.duration_us - base_us,
        change=_rel(base_us, after.duration_us),
        launch=launch,
        rates=rates,
    )


def _significant(move: KernelMove, case_us: float) -> bool:
    if move.launch:
        return True
    delta = abs(move.delta_us or 0.0)
    relative = abs(move.change or 0.0)
    return relative >= MOVED_RELATIVE and delta >= MOVED_SHARE_OF_CASE * case_us


# Kernels under 1% of a case's time do not make a "kernel set changed" finding: a 1 µs fill that comes
# and goes, or (on CPU, where aten ops play the kernels) a wrapper op whose own time sits at the edge of
# being counted, is not a change a performance engineer acts on.
KERNEL_SET_MIN_SHARE = 0.01


def kernel_set(kernels: Sequence[Kernel], *, min_share: float = KERNEL_SET_MIN_SHARE) -> frozenset[str]:
    """The keys of the kernels that hold at least ``min_share`` of the case's kernel time."""
    return frozenset(k.key for k in kernels if k.share is None or k.share >= min_share)


def dram_pair(
    baseline_runs: Sequence[Sequence[Kernel]], candidate: Sequence[Kernel]
) -> tuple[float, float, int] | None:
    """DRAM bytes per iteration (baseline, candidate, kernels counted) over the kernels counted on both sides.

    ncu is usually restricted to the kernels that matter, so only (key, phase) pairs with counters in both
    the latest baseline run that has any and the candidate are summed. ``None`` when there are none.
    """
    cand = {k: s.dram_bytes for k, s in _by_key(candidate).items() if s.dram_bytes is not None}
    if not cand:
        return None
    for run in reversed(baseline_runs):
        base = {k: s.dram_bytes for k, s in _by_key(run).items() if s.dram_bytes is not None}
        common = [k for k in base if k in cand]
        if common:
            return (
                float(sum(base[k] or 0.0 for k in common)),
                float(sum(cand[k] or 0.0 for k in common)),
                len(common),
            )
    return None
