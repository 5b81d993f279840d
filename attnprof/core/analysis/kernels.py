"""Which kernels moved between the baseline runs and the candidate, joined by stable key and phase.

A kernel's time is named as moved only where its own samples support it: where both sides hold every round's traced
iterations (``DurationStats.samples``), the 95% interval of its change (``analysis.kernel_samples``) must exclude no
change, and the change must be large enough to matter (``MOVED_RELATIVE`` of itself, ``MOVED_SHARE_OF_CASE`` of the
case). A side without them (a document written when only the first round was traced, or a side of one round) has one
round's reading, which may be a disturbed round's: there the change must also reach ``SPREAD_FACTOR`` times the case's
own spread over its rounds (``case_spread``). A change of launch configuration, and a kernel that appeared or
vanished, is a fact of what ran, named whatever the times did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnprof.core.analysis.kernel_samples import LEVEL, MIN_ROUNDS, change_interval, pooled_median, rounds_of
from attnprof.core.documents.comparison import FieldChange, Interval, KernelMove
from attnprof.core.documents.result import Case, Kernel
from attnprof.core.rounds import round_medians

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
# case in five processes of unchanged code lay up to 3.3% apart (docs/findings.md#clock-handling; again in the ten
# processes of bench/reports/data/h200-truth-2026-12-04 and -b, tests/core/test_measure_clock.py), so a smaller move
# may be the pass's own spread.
CLOCK_MOVE = 0.04
DRAM_COUNTERS = ("dram__bytes_read.sum", "dram__bytes_write.sum")

# A kernel "moved" when its time changed by at least this fraction of its own time and by this fraction of the
# case's time (and, with samples, beyond its interval): smaller moves are not worth a reader's look, whatever their
# interval says.
MOVED_RELATIVE = 0.02
MOVED_SHARE_OF_CASE = 0.005
# Without every round's samples on both sides, a kernel's time change must reach this many times the case's own
# spread over its rounds. A disturbance that slows a whole round can slow one kernel of several by more than the
# case (the case also holds launch gaps and host time it does not touch); twice the case's range leaves room for that.
SPREAD_FACTOR = 2.0


@dataclass
class _Side:
    kernel: Kernel  # the representative (latest run's) record, for launch configuration and name
    duration_us: float
    dram_bytes: float | None
    rounds: list[np.ndarray] | None  # per-iteration durations by round (every round's traced iterations)


def dram_bytes(kernel: Kernel) -> float | None:
    """DRAM bytes read plus written per iteration, from ncu counters, or ``None`` without them.

    ncu reports one launch; a kernel launched several times per iteration moves that many times the bytes.
    """
    counters = kernel.counters
    if not counters or any(name not in counters for name in DRAM_COUNTERS):
        return None
    per_launch = sum(float(counters[name]) for name in DRAM_COUNTERS)
    return per_launch * max(float(kernel.launches_per_iter), 1.0)


def _sum_rounds(a: list[np.ndarray] | None, b: list[np.ndarray] | None) -> list[np.ndarray] | None:
    """Two kernels' samples of one run added iteration by iteration (both traced the same iterations), or None."""
    if a is None or b is None or [len(r) for r in a] != [len(r) for r in b]:
        return None
    return [x + y for x, y in zip(a, b, strict=True)]


def _by_key(kernels: Sequence[Kernel]) -> dict[tuple[str, str], _Side]:
    """One entry per (key, phase); repeated keys (e.g. several elementwise adds) are summed."""
    out: dict[tuple[str, str], _Side] = {}
    for k in kernels:
        ident = (k.key, k.phase)
        nbytes = dram_bytes(k)
        rounds = rounds_of(k.duration_us)
        if ident in out:
            side = out[ident]
            side.duration_us += k.duration_us.median
            side.rounds = _sum_rounds(side.rounds, rounds)
            if side.dram_bytes is not None and nbytes is not None:
                side.dram_bytes += nbytes
        else:
            out[ident] = _Side(k, k.duration_us.median, nbytes, rounds)
    return out


def case_spread(cases: Sequence[Case]) -> float:
    """The largest spread of the case's own time among ``cases`` (fraction): the range of its round medians
    (slowest over fastest, less one) where a document records its rounds, else its samples' interquartile range over
    their median. What a whole round's disturbance can move a kernel's one-round reading by."""
    spread = 0.0
    for case in cases:
        lat = case.latency_us
        if lat is None or not lat.samples or lat.median <= 0:
            continue
        medians = round_medians(lat)
        if medians is not None and len(medians) >= 2 and min(medians) > 0:
            spread = max(spread, max(medians) / min(medians) - 1.0)
        else:
            spread = max(spread, (lat.p75 - lat.p25) / lat.median)
    return spread


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
    baseline_runs: Sequence[Sequence[Kernel]],
    candidate: Sequence[Kernel],
    *,
    case_us: float,
    case_spread: float = 0.0,
) -> list[KernelMove]:
    """Kernels that moved, appeared or vanished, largest absolute time change first (the module docstring says
    when a time change counts).

    ``baseline_runs`` holds each baseline run's kernels in run order; the baseline duration of a kernel is the
    median of every baseline round's samples where each run holds them, else the median over the runs that launched
    it; its launch configuration is the latest such run's. ``case_us`` (the case's baseline median, microseconds)
    scales what counts as a move; ``case_spread`` (:func:`case_spread` of the case on both sides, a fraction) is what a
    side without samples must exceed.
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
            if not _never_ran(after):
                moves.append(_appeared(after))
            continue
        before = present[-1]
        base_us = float(np.median([s.duration_us for s in present]))
        if after is None:
            if all(_never_ran(s) for s in present):
                continue
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
        if _significant(move, case_us, case_spread):
            moves.append(move)
    moves.sort(key=lambda m: abs(m.delta_us or 0.0), reverse=True)
    return moves


def _never_ran(side: _Side) -> bool:
    """Whether the kernel's samples say it launched in under half the traced iterations (its pooled median is 0):
    a kernel of one round, not of the case."""
    return side.rounds is not None and pooled_median(side.rounds) <= 0


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


def _sampled_change(
    ident: tuple[str, str], after: _Side, present: list[_Side]
) -> tuple[float, float, float, float, Interval] | None:
    """(baseline µs, candidate µs, change, delta µs, interval of the change) from every round's samples on both sides
    (the baseline's pooled over its runs); None where a side lacks them or has too few rounds."""
    if after.rounds is None or any(s.rounds is None for s in present):
        return None
    base_rounds = [r for s in present for r in s.rounds or []]
    if len(base_rounds) < MIN_ROUNDS or len(after.rounds) < MIN_ROUNDS:
        return None
    found = change_interval(base_rounds, after.rounds, f"{ident[0]}|{ident[1]}")
    if found is None:
        return None
    change, low, high = found
    base_us, cand_us = pooled_median(base_rounds), pooled_median(after.rounds)
    return base_us, cand_us, change, cand_us - base_us, Interval(low=low, high=high, level=LEVEL)


def _moved(ident: tuple[str, str], before: _Side, after: _Side, base_us: float, present: list[_Side]) -> KernelMove:
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
    sampled = _sampled_change(ident, after, present)
    if sampled is not None:
        base_us, cand_us, change, delta, ci = sampled
        return KernelMove(
            key=ident[0],
            phase=ident[1],
            name=after.kernel.name,
            baseline_us=base_us,
            candidate_us=cand_us,
            delta_us=delta,
            change=change,
            ci=ci,
            launch=launch,
            rates=rates,
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


def _significant(move: KernelMove, case_us: float, case_spread: float) -> bool:
    if move.launch:
        return True
    delta = abs(move.delta_us or 0.0)
    relative = abs(move.change or 0.0)
    if relative < MOVED_RELATIVE or delta < MOVED_SHARE_OF_CASE * case_us:
        return False
    if move.ci is not None:
        return move.ci.low > 0 or move.ci.high < 0
    # one round's reading on a side: only a change that no disturbance of a whole round explains
    return relative >= SPREAD_FACTOR * case_spread


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
