"""The host canary (``python -m attnprof.core canary``): every figure the service judges, measured on this host's CPU,
in the worker API's own model; and its NVML sampler, driven by a stand-in NVML that plays a GPU whose clock drops
while the matmuls run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from attnprof.contract.worker_api import CANARY_FIGURES, Canary
from attnprof.core.documents.result import GpuHealth
from attnprof.core.measure import canary


def test_the_canary_measures_every_figure_on_a_cpu_as_the_worker_sends_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "attnprof.core", "canary", "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    found = json.loads(done.stdout)
    assert set(found["figures"]) == set(CANARY_FIGURES) and all(v > 0 for v in found["figures"].values())
    assert found["mode"] == "cpu" and 0 < found["seconds"] < 120 and found["clocks"] == {}
    assert found["method"]["attention_us"] == "SDPA b1 h4 s512 d64 fp32 causal"
    body = Canary.model_validate({"worker": "h/pid1", "testbed": "cpu", **found})  # what the service takes
    assert body.figures == found["figures"]


class _Nvml:
    """NVML as the sampler reads it: 1,980 MHz, then 1,600 MHz with a thermal slowdown once the matmuls run."""

    def __init__(self, sampler: list[Any]) -> None:
        self.sampler = sampler

    def health(self) -> GpuHealth:
        hot = bool(self.sampler) and self.sampler[0].phase == "matmul"
        return GpuHealth(
            sm_clock_mhz=1600.0 if hot else 1980.0,
            mem_clock_mhz=2619.0,
            temperature_c=84.0 if hot else 40.0,
            power_w=690.0,
            throttle_reasons=["gpu_idle", "sw_power_cap", *(["hw_thermal_slowdown"] if hot else [])],
        )


def test_the_sampler_reads_the_clocks_while_the_matmuls_run() -> None:
    holder: list[Any] = []
    sampler = canary._Sampler(_Nvml(holder))  # type: ignore[arg-type]
    holder.append(sampler)
    sampler.start()
    time.sleep(0.1)
    sampler.phase = "matmul"
    time.sleep(0.2)
    sampler.phase = "launch"
    time.sleep(0.1)
    sampler.done.set()
    sampler.join(timeout=2)
    clocks = sampler.clocks()
    assert clocks["sm_mhz_median"] == clocks["sm_mhz_min"] == 1600.0  # only the matmuls' readings
    assert clocks["temperature_c_max"] == 84.0 and clocks["mem_mhz"] == 2619.0 and clocks["samples"] >= 5
    assert clocks["throttle_reasons"] == ["hw_thermal_slowdown", "sw_power_cap"]  # idle is no throttle
