"""The band a testbed's hosts must measure inside, set from the fleet's own history, and the judgement of a canary
against it (docs/service.md, "Host health"). Pure: no database.

The rule, per figure of the canary (``attnprof.contract.worker_api.CANARY_FIGURES``):

- each host's **median** over its passing canaries of the last ``window_days`` (a host's typical reading: one
  disturbed canary moves it little);
- the **reference** is the best of those host medians: the highest rate, the shortest time. A testbed is a pool of
  identical GPUs, so what one of them does steadily is what each should do;
- the **bound** is the reference less ``tolerance`` for a rate (``copy_gbps >= 0.88 x best`` at the default 12%), and
  for a time the same loss of rate (``attention_us <= best / 0.88``); an empty kernel's launch, whose host-side time
  jitters, may take ``1 + launch_tolerance`` times the best (``launch_us <= 2.00 x best``). A CPU testbed's
  tolerance is ``cpu_tolerance``: its figures move with the host's load.

The SM clock while the matmuls ran is judged the same way (a host capped by power or heat runs its clock low), and
a throttle reason other than the routine ones (``sw_power_cap`` under load, idle) fails the canary outright: a
thermal or hardware slowdown while measuring. A band needs ``min_canaries`` passing canaries on the testbed; until
then a canary is ``learning``: taken as healthy and added to the history.

A 15% spread in memory bandwidth between nodes (the case large fleets report) fails ``copy_gbps`` (and the
attention case, where bandwidth bounds it) at the default 12% tolerance; a host whose clocks are capped fails the
matmuls and the SM clock. 12%, not 10%: one healthy H100's five canaries in a row spread 10.2% in ``attention_us``
(bench/reports/canary.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from attnprof.contract.worker_api import CANARY_FIGURES

SM_CLOCK = "sm_mhz_median"
HIGHER_BETTER: dict[str, bool] = {**CANARY_FIGURES, SM_CLOCK: True}
UNITS = {
    "copy_gbps": "GB/s",
    "matmul_tflops_fp32": "TFLOP/s",
    "matmul_tflops_fp16": "TFLOP/s",
    "matmul_tflops_bf16": "TFLOP/s",
    "launch_us": "us",
    "attention_us": "us",
    SM_CLOCK: "MHz",
}
# Throttle reasons that fail a canary: the clocks were pulled down by heat or by the board while it measured.
FAILING_THROTTLE = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})


@dataclass(frozen=True)
class Tolerances:
    figure: float
    launch: float

    def factor(self, name: str) -> float:
        """What the reference is multiplied by to give the bound of figure ``name``."""
        if name == "launch_us":
            return 1 + self.launch
        return 1 - self.figure if HIGHER_BETTER[name] else 1 / (1 - self.figure)


@dataclass(frozen=True)
class Bound:
    """One figure's band: the reference (the best host's median), which host set it, and the bound a canary's
    figure must not be worse than."""

    figure: str
    reference: float
    reference_host: str
    hosts: int
    canaries: int
    factor: float

    @property
    def higher_better(self) -> bool:
        return HIGHER_BETTER[self.figure]

    @property
    def bound(self) -> float:
        return self.reference * self.factor

    def passes(self, value: float) -> bool:
        return value >= self.bound if self.higher_better else value <= self.bound

    def rule(self) -> str:
        """The rule in words, with its numbers: ``copy_gbps >= 3,020 GB/s (0.90 x 3,356, the median of host h1,
        the best of 3 hosts over 12 canaries)``."""
        op = ">=" if self.higher_better else "<="
        how = f"{self.factor:.2f} x {_num(self.reference)}"
        if self.factor > 0 and not self.higher_better and self.figure != "launch_us":
            how = f"{_num(self.reference)} / {1 / self.factor:.2f}"
        unit = UNITS.get(self.figure, "")
        return (
            f"{self.figure} {op} {_num(self.bound)} {unit} ({how}, the median of "
            f"host {self.reference_host}, the best of {self.hosts} host(s) over {self.canaries} canaries)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "reference_host": self.reference_host,
            "bound": self.bound,
            "higher_better": self.higher_better,
            "factor": self.factor,
            "hosts": self.hosts,
            "canaries": self.canaries,
            "rule": self.rule(),
        }


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"


def readings(figures: Mapping[str, Any], clocks: Mapping[str, Any]) -> dict[str, float]:
    """The figures a band judges, from a canary's figures and clocks: the canary's own, and the SM clock."""
    found = {k: float(v) for k, v in figures.items() if k in HIGHER_BETTER and isinstance(v, int | float) and v > 0}
    clock = clocks.get(SM_CLOCK)
    if isinstance(clock, int | float) and clock > 0:
        found[SM_CLOCK] = float(clock)
    return found


def bands(history: Iterable[tuple[str, Mapping[str, float]]], tolerances: Tolerances) -> dict[str, Bound]:
    """Each figure's bound from ``history``: (host, readings) of the testbed's passing canaries in the window."""
    per_host: dict[str, dict[str, list[float]]] = {}
    counts: dict[str, int] = {}
    for host, found in history:
        for name, value in found.items():
            per_host.setdefault(name, {}).setdefault(host, []).append(value)
            counts[name] = counts.get(name, 0) + 1
    result: dict[str, Bound] = {}
    for name, hosts in per_host.items():
        medians = {h: statistics.median(v) for h, v in hosts.items()}
        pick = max if HIGHER_BETTER[name] else min
        best = pick(sorted(medians), key=lambda h: medians[h])
        result[name] = Bound(name, medians[best], best, len(medians), counts[name], tolerances.factor(name))
    return result


def judge(found: Mapping[str, float], throttle: Iterable[str], band: Mapping[str, Bound]) -> list[str]:
    """Why a canary's ``found`` readings and ``throttle`` reasons fail the band: one line per figure outside it
    (``copy_gbps 2,810 GB/s is 16% under the best host's 3,356: copy_gbps >= 3,020 GB/s (...)``) and one per failing
    throttle reason; empty when it passes."""
    reasons = [f"throttled while measuring: {r}" for r in sorted(set(throttle)) if r in FAILING_THROTTLE]
    for name, bound in sorted(band.items()):
        value = found.get(name)
        if value is None or bound.passes(value):
            continue
        off = value / bound.reference - 1
        way = f"{abs(off):.0%} {'under' if off < 0 else 'over'}"
        unit = UNITS.get(name, "")
        reasons.append(
            f"{name} {_num(value)} {unit} is {way} the best host's {_num(bound.reference)}: outside {bound.rule()}"
        )
    return reasons
