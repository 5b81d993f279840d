"""A case's kernel durations pooled over every round's traced iterations.

The kernel table (names, phases, launch configuration, work) is read from the first round's trace; every round, the
first included, traces ``trace_iters`` iterations (``measure.trace``), and each kernel's time per iteration is the
median of all of them, with a 95% interval of that median that resamples the rounds (``analysis.kernel_samples``). A
kernel is joined across rounds by its name as launched and its phase, as the first round's table groups it; a round
in which it did not launch gives it 0 µs in each of that round's iterations, as an iteration without it does within
a round, but a later round in which none of the table's kernels launched is left out: its trace caught no GPU
activity. Rates, utilisations, the bound and the share follow the pooled median. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnprof.core.analysis.kernel_samples import median_interval, rounds_of
from attnprof.core.attribution import ParsedTrace, aggregate, attribute, quantile
from attnprof.core.documents import DurationStats, Environment, Kernel
from attnprof.core.measure.kernels import kernel_rates

Durations = dict[tuple[str, str], list[float]]


def round_durations(parsed: ParsedTrace) -> tuple[Durations, int]:
    """Each kernel's duration in each traced iteration of one round (µs), by (name as launched, phase) in the order of
    the kernel table, and the number of iterations traced."""
    iterations = list(dict.fromkeys(parsed.iterations))
    summaries = aggregate(attribute(parsed), iterations)
    return {(s.name, s.phase): s.per_iter_us for s in summaries}, len(iterations)


def pool_durations(
    kernels: Sequence[Kernel], rounds: Sequence[ParsedTrace], *, dtype: str, environment: Environment
) -> list[Kernel]:
    """``kernels`` (read from ``rounds[0]``, the first round's trace) with their durations pooled over every round's
    traced iterations (``rounds``, in time order), and their rates over the pooled medians. Kernels that cannot be
    joined to the first round's table are returned as they are."""
    per_round = [round_durations(parsed) for parsed in rounds]
    idents = list(per_round[0][0])
    if len(idents) != len(kernels):
        return list(kernels)
    # A later round whose trace holds none of the table's kernels captured no GPU activity (its profiler session
    # recorded the iterations' CPU ranges only, as torch 2.11's second session in a process did on an H100): it says
    # nothing of the kernels, and its zeros would outvote the rounds that did (every kernel read 0 µs).
    per_round = per_round[:1] + [
        (durations, n) for durations, n in per_round[1:] if any(any(durations.get(i, ())) for i in idents)
    ]
    pooled: list[DurationStats] = []
    for name, phase in idents:
        samples: list[float] = []
        sizes: list[int] = []
        for durations, n in per_round:
            if n == 0:
                continue
            samples.extend(round(v, 4) for v in durations.get((name, phase), [0.0] * n))
            sizes.append(n)
        stats = DurationStats(
            median=quantile(samples, 0.5),
            p25=quantile(samples, 0.25),
            p75=quantile(samples, 0.75),
            samples=samples,
            round_samples=sizes,
        )
        by_round = rounds_of(stats)
        interval = median_interval(by_round, f"{name}|{phase}") if by_round else None
        if interval is not None:
            stats = stats.model_copy(update={"ci_low": interval[0], "ci_high": interval[1]})
        pooled.append(stats)
    total_us = sum(s.median for s in pooled) or 1.0
    out = []
    for k, stats in zip(kernels, pooled, strict=True):
        rated = kernel_rates(
            name=k.name,
            dtype=dtype,
            flops=k.flops,
            nbytes=k.bytes,
            median_us=stats.median,
            launches_per_iter=k.launches_per_iter,
            environment=environment,
        )
        out.append(k.model_copy(update={"duration_us": stats, "share": min(1.0, stats.median / total_us), **rated}))
    return out
