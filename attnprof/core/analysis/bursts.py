"""Bursts: a stretch of a case's samples far slower than the rest, the mark of a transient disturbance.

Another process taking the cores, a page-cache flush or a GPU shared for a moment adds time to the
iterations it overlaps and to no others, so its samples stand apart from the case's usual time by a factor,
not by a few percent. Ordinary noise, even a heavy tail, puts only the odd sample that far out.

The usual time is the lower quartile of the samples, not the median: disturbances only ever add time, and on
a busy 2-core host a burst can cover half a case's samples or more (measured 2026-12-02: 9 of 20 samples at
22-44x, 7 of 10 at 100x), where the median is itself inside the burst. Where the burst covers more than three
quarters of the samples, the lower quartile is inside it too; then the fastest ``MIN_RUN`` samples in a row, when
the lower quartile is ``FAR_FACTOR`` times their slowest or more, are the usual time: a level the case held for a
stretch before or after the disturbance. A sample is *far* when it is at least
``FAR_FACTOR`` times the usual time; the case has a burst when at least ``MIN_FAR`` samples are far and they
either follow one another (``MIN_RUN`` in a row) or make up ``MIN_SHARE`` of the samples. On the committed H200
documents (bench/reports/data/h200-2026-11-29 and pipeline-h200-2026-11-30: 480 timed cases in 32 runs) the 99th
percentile of every case sits under 2.4x its median, single samples reach 3.7x, and the rule marks one case: a
FlexAttention forward with 6 samples at 3.4-8.9x among samples 10-16 of 90, a real stall.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attnprof.core.units import fmt_duration_us

FAR_FACTOR = 3.0  # a far sample takes at least this many times the case's usual time
MIN_FAR = 3  # fewer far samples than this are the odd outlier, whatever their order
MIN_RUN = 3  # this many far samples in a row are a burst
MIN_SHARE = 0.05  # far samples making up this fraction of the case are a burst, scattered or not


@dataclass(frozen=True)
class Burst:
    """Far samples of one case; positions are 0-based indices in time order."""

    far: int  # how many samples are far
    samples: int  # how many samples the case has
    usual_us: float  # the case's usual time (lower quartile, or the fastest stretch), microseconds
    median_factor: float  # median of the far samples over the usual time
    max_factor: float  # slowest sample over the usual time
    first: int  # position of the first far sample
    last: int  # position of the last far sample
    longest_run: int  # most far samples in a row
    usual_from: str = "its lower quartile"  # what the usual time is

    def describe(self) -> str:
        """The burst in words, for a case's ``suspect`` list (positions 1-based)."""
        return (
            f"a burst of {self.far} of {self.samples} samples at {self.median_factor:.0f}x the case's usual time "
            f"(up to {self.max_factor:.0f}x {self.usual_from}, {fmt_duration_us(self.usual_us, ascii=True)}) "
            f"between samples {self.first + 1} and {self.last + 1}: something else took the machine while timing"
        )


def find_burst(samples_us: Sequence[float]) -> Burst | None:
    """The burst in ``samples_us`` (one case's latency samples in time order, microseconds), or ``None``."""
    n = len(samples_us)
    if n < MIN_FAR:
        return None
    ordered = sorted(samples_us)
    usual = ordered[(n - 1) // 4]
    usual_from = "its lower quartile"
    stretch = min((max(samples_us[i : i + MIN_RUN]) for i in range(n - MIN_RUN + 1)), default=0.0)
    if stretch > 0.0 and FAR_FACTOR * stretch <= usual:
        # the lower quartile is inside the burst: the case ran at its usual time only for a stretch
        usual, usual_from = stretch, f"its fastest {MIN_RUN} samples in a row"
    if usual <= 0.0:
        return None
    limit = FAR_FACTOR * usual
    positions = [i for i, s in enumerate(samples_us) if s >= limit]
    far = len(positions)
    if far < MIN_FAR:
        return None
    longest = run = 0
    previous = -2
    for i in positions:
        run = run + 1 if i == previous + 1 else 1
        longest = max(longest, run)
        previous = i
    if longest < MIN_RUN and far < MIN_SHARE * n:
        return None
    factors = sorted(samples_us[i] / usual for i in positions)
    middle = far // 2
    median_factor = factors[middle] if far % 2 else (factors[middle - 1] + factors[middle]) / 2.0
    return Burst(
        far=far,
        samples=n,
        usual_us=usual,
        median_factor=median_factor,
        max_factor=factors[-1],
        first=positions[0],
        last=positions[-1],
        longest_run=longest,
        usual_from=usual_from,
    )
