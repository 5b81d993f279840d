"""Fold attributed kernel launches into one row per kernel and phase: the per-kernel table.

Launches are grouped by (name as launched, phase): two kernels that share a key but run in
different phases (a copy that is a cast and a copy that is not) stay apart, and so do two
different kernels that share a key. Per group:

- ``launches_per_iter``: all launches over the number of iterations.
- duration: the group's launches summed per iteration, then median, p25 and p75 over all
  iterations (linear interpolation between order statistics). An iteration where the group did
  not launch counts as 0 µs, so the rows of one iteration add up to its kernel time.
- launch configuration (grid, block, registers, shared memory): the most common one, the first
  seen on a tie.
- ``input_dims``/``input_types``: those of the first launch; ``launch_inputs`` lists every launch of
  the first iteration that has the group, in order, for the work model.

Rows are sorted by the position of their first launch within its iteration.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from attnprof.core.attribution.kineto import Dims
from attnprof.core.attribution.phases import AttributedKernel
from attnprof.core.documents.result import DurationStats, Kernel, Phase

LaunchConfig = tuple[tuple[int, ...] | None, tuple[int, ...] | None, int | None, int | None]


@dataclass
class KernelSummary:
    """One row of the per-kernel table. Durations are microseconds per iteration."""

    name: str
    key: str
    phase: Phase
    op: str | None
    launches_per_iter: float
    duration_median_us: float
    duration_p25_us: float
    duration_p75_us: float
    per_iter_us: list[float]
    grid: tuple[int, ...] | None
    block: tuple[int, ...] | None
    registers_per_thread: int | None
    shared_mem_bytes: int | None
    input_dims: Dims
    input_types: tuple[str, ...]
    launch_inputs: list[tuple[Dims, tuple[str, ...]]] = field(default_factory=list)
    first_seen: int = 0
    """Rank of the row's first launch within its iteration (0 = launched first)."""

    def to_document(self) -> Kernel:
        """The row as a result-document ``Kernel``; work, rates and occupancy are left to the caller."""
        return Kernel(
            name=self.name,
            key=self.key,
            phase=self.phase,
            op=self.op,
            launches_per_iter=self.launches_per_iter,
            duration_us=DurationStats(
                median=self.duration_median_us, p25=self.duration_p25_us, p75=self.duration_p75_us
            ),
            grid=list(self.grid) if self.grid is not None else None,
            block=list(self.block) if self.block is not None else None,
            registers_per_thread=self.registers_per_thread,
            shared_mem_bytes=self.shared_mem_bytes,
        )


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (0 ≤ q ≤ 1) by linear interpolation between order statistics."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def aggregate(kernels: list[AttributedKernel], iterations: list[int]) -> list[KernelSummary]:
    """Fold attributed launches into per-kernel rows (see the module docstring).

    Launches whose iteration is not in ``iterations`` are ignored.
    """
    wanted = list(dict.fromkeys(iterations))
    if not wanted:
        return []
    index = {it: n for n, it in enumerate(wanted)}
    by_iter: dict[int, list[AttributedKernel]] = {}
    for ak in kernels:
        it = ak.kernel.iteration
        if it is not None and it in index:
            by_iter.setdefault(it, []).append(ak)

    groups: dict[tuple[str, str], list[tuple[int, int, AttributedKernel]]] = {}
    for it in wanted:
        launches = sorted(by_iter.get(it, []), key=lambda a: a.kernel.ts_us)
        for rank, ak in enumerate(launches):
            groups.setdefault((ak.kernel.name, ak.phase), []).append((it, rank, ak))

    rows: list[tuple[tuple[int, int], KernelSummary]] = []
    for (name, _phase), members in groups.items():
        per_iter = [0.0] * len(wanted)
        for it, _rank, ak in members:
            per_iter[index[it]] += ak.kernel.dur_us
        configs: Counter[LaunchConfig] = Counter()
        for _it, _rank, ak in members:
            k = ak.kernel
            configs[(k.grid, k.block, k.registers_per_thread, k.shared_mem_bytes)] += 1
        # Counter.most_common keeps insertion order on ties, so the first-seen config wins.
        grid, block, regs, smem = configs.most_common(1)[0][0]
        first_it, first_rank, first = members[0]
        rows.append(
            (
                (first_rank, index[first_it]),
                KernelSummary(
                    name=name,
                    key=first.key,
                    phase=first.phase,
                    op=first.kernel.op,
                    launches_per_iter=len(members) / len(wanted),
                    duration_median_us=quantile(per_iter, 0.5),
                    duration_p25_us=quantile(per_iter, 0.25),
                    duration_p75_us=quantile(per_iter, 0.75),
                    per_iter_us=per_iter,
                    grid=grid,
                    block=block,
                    registers_per_thread=regs,
                    shared_mem_bytes=smem,
                    input_dims=first.kernel.input_dims,
                    input_types=first.kernel.input_types,
                    launch_inputs=[
                        (ak.kernel.input_dims, ak.kernel.input_types) for it, _r, ak in members if it == first_it
                    ],
                    first_seen=first_rank,
                ),
            )
        )
    rows.sort(key=lambda r: r[0])
    return [summary for _, summary in rows]
