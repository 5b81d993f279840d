"""A host's canary: a few seconds of fixed work whose figures say whether this host measures like its siblings.

A profile worker runs it when it starts and every so many jobs or minutes, outside the jail and with no user code
(``python -m attnprof.core canary``), and sends the figures to the service, which judges them against the band its
testbed's own history sets (docs/service.md, "Host health"). Each figure is one a sick host gets wrong:

- ``copy_gbps``: a device copy, bytes read + written (the peaks' copy): non-uniform or degraded memory bandwidth,
  the 15% spread between nodes that large fleets report;
- ``matmul_tflops_<dtype>``: a square matmul at each dtype (the peaks' matmuls): clocks capped by power or heat,
  a throttled or misconfigured GPU;
- ``launch_us``: launching an empty kernel (on CUDA ``torch.cuda._sleep(0)``; on a CPU one one-element add), per
  launch, host-side: a slow or contended host CPU, a driver in trouble;
- ``attention_us``: one fixed SDPA case (causal, bf16 on CUDA): the workload itself, end to end.

Each figure is the best of :data:`ROUNDS` rounds (interference only ever slows a measurement, as for the peaks).
On CUDA a thread samples NVML while the canary runs: the SM clock while the matmuls run (its median and lowest),
the memory clock, the hottest temperature, the highest power and every throttle reason seen. ``seconds`` is the
canary's wall time, CUDA's start included: what the canary cost the GPU.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from attnprof.core.measure.environment import Nvml, describe_device
from attnprof.core.measure.peaks import _time_us, _Workload

ROUNDS = 2
LAUNCHES = 2000
SAMPLE_S = 0.02
# One fixed attention case per mode: (batch, heads, sequence, head dim), causal.
CUDA_ATTENTION = (4, 16, 4096, 128)
CPU_ATTENTION = (1, 4, 512, 64)


@dataclass(eq=False)  # a thread is hashed by identity (threading keeps its threads in weak sets)
class _Sampler(threading.Thread):
    """NVML readings every ``SAMPLE_S`` while the canary runs, each tagged with the phase running then."""

    nvml: Nvml
    phase: str = "start"
    sm_mhz: dict[str, list[float]] = field(default_factory=dict)
    mem_mhz: list[float] = field(default_factory=list)
    temperature_c: list[float] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    reasons: set[str] = field(default_factory=set)
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(name="canary-nvml", daemon=True)

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            health = self.nvml.health()
            if health.sm_clock_mhz is not None:
                self.sm_mhz.setdefault(self.phase, []).append(float(health.sm_clock_mhz))
            if health.mem_clock_mhz is not None:
                self.mem_mhz.append(float(health.mem_clock_mhz))
            if health.temperature_c is not None:
                self.temperature_c.append(float(health.temperature_c))
            if health.power_w is not None:
                self.power_w.append(float(health.power_w))
            self.reasons.update(r for r in health.throttle_reasons if r != "gpu_idle")

    def clocks(self) -> dict[str, Any]:
        busy = self.sm_mhz.get("matmul", [])
        return {
            "sm_mhz_median": statistics.median(busy) if busy else None,
            "sm_mhz_min": min(busy) if busy else None,
            "mem_mhz": statistics.median(self.mem_mhz) if self.mem_mhz else None,
            "temperature_c_max": max(self.temperature_c) if self.temperature_c else None,
            "power_w_max": max(self.power_w) if self.power_w else None,
            "throttle_reasons": sorted(self.reasons),
            "samples": sum(len(v) for v in self.sm_mhz.values()),
        }


def _launch_us(device: str) -> float:
    """Microseconds per launch of an empty kernel (a one-element add on a CPU), host-side, over ``LAUNCHES``."""
    if device == "cuda":
        launch: Any = functools.partial(torch.cuda._sleep, 0)
    else:
        x = torch.zeros(1)
        launch = functools.partial(x.add_, 1)
    for _ in range(100):
        launch()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(LAUNCHES):
        launch()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / LAUNCHES * 1e6


def _attention(device: str) -> tuple[Any, str]:
    """The fixed attention case's step and its description."""
    b, h, s, d = CUDA_ATTENTION if device == "cuda" else CPU_ATTENTION
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device=device, generator=gen).to(dtype) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    name = "bf16" if device == "cuda" else "fp32"
    return functools.partial(sdpa, q, k, v, is_causal=True), f"SDPA b{b} h{h} s{s} d{d} {name} causal"


def run(device: str) -> dict[str, Any]:
    """The canary on ``device`` (``cuda`` or ``cpu``): its figures, clocks, how it was measured and its cost."""
    started = time.perf_counter()
    if device == "cpu":
        # One thread: a CPU's figures per core. Several workers' canaries on one host at once oversubscribe its cores,
        # and a multi-threaded matmul's threads then wait on each other: fp16 read 30 to 60 times slower (three CPU
        # workers on two cores), where one thread a core slows only by its share of the core.
        torch.set_num_threads(1)
    nvml = Nvml.open() if device == "cuda" else None
    sampler = _Sampler(nvml) if nvml is not None else None
    if sampler is not None:
        sampler.start()
    try:
        work = _Workload(device)
        step, attention = _attention(device)
        rounds: list[dict[str, float]] = []
        cuda = device == "cuda"
        reps, warmup = (10, 3) if cuda else (5, 1)
        for _ in range(ROUNDS):
            if sampler is not None:
                sampler.phase = "copy"
            figures = {
                "copy_gbps": 2
                * work.copy_bytes
                / (_time_us(lambda: work.dst.copy_(work.src), device, reps, warmup) * 1e-6)
                / 1e9
            }
            if sampler is not None:
                sampler.phase = "matmul"
            for name, (a, b) in work.operands.items():
                us = _time_us(functools.partial(torch.matmul, a, b), device, reps=reps, warmup=warmup)
                figures[f"matmul_tflops_{name}"] = 2 * work.sizes[name] ** 3 / (us * 1e-6) / 1e12
            if sampler is not None:
                sampler.phase = "launch"
            figures["launch_us"] = _launch_us(device)
            if sampler is not None:
                sampler.phase = "attention"
            figures["attention_us"] = _time_us(step, device, reps=reps, warmup=warmup)
            rounds.append(figures)
    finally:
        if sampler is not None:
            sampler.done.set()
            sampler.join(timeout=1.0)
    lower_better = {"launch_us", "attention_us"}
    best = {k: (min if k in lower_better else max)(r[k] for r in rounds) for k in rounds[0]}
    return {
        "device": describe_device(device).name,
        "mode": device,
        "figures": best,
        "clocks": sampler.clocks() if sampler is not None else {},
        "method": {
            **{f"matmul_tflops_{n}": d for n, d in work.details().items() if n != "dram_gbps"},
            "copy_gbps": work.details()["dram_gbps"],
            "launch_us": f"{LAUNCHES} launches of an empty kernel, host-side time per launch",
            "attention_us": attention,
            "rounds": f"best of {ROUNDS} rounds",
        },
        "seconds": time.perf_counter() - started,
    }
