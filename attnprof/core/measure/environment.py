"""The environment of a run: device, versions, GPU health (NVML), the testbed key, suspicion.

NVML is read through ``nvidia-ml-py`` without creating a CUDA context, so the same helpers serve a
worker that checks its GPU before it takes a job.
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnprof.core.documents import Case, Device, GpuHealth
from attnprof.core.documents.result import CLOCK_DROP_MARK
from attnprof.core.own_processes import other_processes
from attnprof.core.testbed import cpu_model, testbed_key, testbed_meaning

# NVML throttle-reason bits (nvml.h, nvmlClocksEventReasons). Idle and application-clock settings
# are not signs of trouble; the others mean the clocks were pulled down while we measured.
_THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# sw_power_cap is routine under load (an H200 reports it at the end of every suite run measured here,
# 2026-11-29); what matters is whether the clocks actually fell, which the clock readings say.
BENIGN_THROTTLE = frozenset(
    {"gpu_idle", "applications_clocks_setting", "display_clock_setting", "sync_boost", "sw_power_cap"}
)
CASE_CLOCK_DROP = 0.03  # a clock 3% under the top moves a compute-bound kernel by about as much
# The share of its threads' runnable time that a CPU case spent waiting for a core while it was timed. Measured on
# a 2-core host (2026-12-02, examples/cpu.toml): 1-4% alone, 25-52% with one core kept busy by another process,
# when the samples ran 2-100x slower.
HOST_WAIT_SHARE = 0.15
# Steal time (a virtual machine's CPUs given to other guests) is judged over at least this many of the host's CPU
# ticks (/proc/stat counts in USER_HZ, 100 a second a CPU): shorter stretches read whole ticks or none.
MIN_STEAL_TICKS = 20


def describe_device(device: str) -> Device:
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        return Device(
            name=props.name,
            kind="cuda",
            compute_capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            memory_bytes=props.total_memory,
            l2_bytes=getattr(props, "L2_cache_size", None),
            max_threads_per_sm=getattr(props, "max_threads_per_multi_processor", None),
            registers_per_sm=getattr(props, "regs_per_multiprocessor", None),
            shared_mem_per_sm_bytes=getattr(props, "shared_memory_per_multiprocessor", None),
            uuid=str(getattr(props, "uuid", "")) or None,
        )
    return Device(name=cpu_model(), kind="cpu", cpu_threads=torch.get_num_threads())


@dataclass
class Nvml:
    """A handle on the GPU that CUDA calls device 0, through NVML (``None`` fields if unavailable).

    ``health`` counts the processes on the GPU that are not the job's own (``attnprof.core.own_processes``): the job's
    root is ``job_root`` (a paired run's coordinator, for its sides), else this process."""

    handle: Any
    module: Any
    # In a PID namespace of its own (the worker's jail) the profiler cannot tell which of NVML's host PIDs is itself:
    # it then records them (``gpu_pids``) and counts none; the worker, which sees both sides, judges them.
    own_pid_namespace: bool = False
    job_root: int | None = None

    @classmethod
    def open(cls, *, own_pid_namespace: bool = False, job_root: int | None = None) -> Nvml | None:
        try:
            import pynvml

            pynvml.nvmlInit()
            index = 0
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
            if visible.isdigit():
                index = int(visible)
            return cls(pynvml.nvmlDeviceGetHandleByIndex(index), pynvml, own_pid_namespace, job_root)
        except Exception:  # no driver, no library, no GPU: health is simply unknown
            return None

    def _try(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.module, fn)(self.handle, *args)
        except Exception:
            return None

    def driver(self) -> str | None:
        try:
            value = self.module.nvmlSystemGetDriverVersion()
            return value.decode() if isinstance(value, bytes) else str(value)
        except Exception:
            return None

    def name(self) -> str | None:
        value = self._try("nvmlDeviceGetName")
        return value.decode() if isinstance(value, bytes) else value

    def sm_clock(self) -> float | None:
        value = self._try("nvmlDeviceGetClockInfo", self.module.NVML_CLOCK_SM)
        return float(value) if value is not None else None

    def health(self) -> GpuHealth:
        m = self.module
        sm = self._try("nvmlDeviceGetClockInfo", m.NVML_CLOCK_SM)
        mem = self._try("nvmlDeviceGetClockInfo", m.NVML_CLOCK_MEM)
        max_sm = self._try("nvmlDeviceGetMaxClockInfo", m.NVML_CLOCK_SM)
        power = self._try("nvmlDeviceGetPowerUsage")
        temp = self._try("nvmlDeviceGetTemperature", m.NVML_TEMPERATURE_GPU)
        util = self._try("nvmlDeviceGetUtilizationRates")
        reasons = self._try("nvmlDeviceGetCurrentClocksThrottleReasons")
        procs = self._try("nvmlDeviceGetComputeRunningProcesses")
        others = None
        pids = sorted({int(p.pid) for p in procs if getattr(p, "pid", None) is not None}) if procs is not None else None
        if pids is not None and not self.own_pid_namespace:
            others = len(other_processes(pids, self.job_root or os.getpid()))
        return GpuHealth(
            sm_clock_mhz=sm,
            mem_clock_mhz=mem,
            max_sm_clock_mhz=max_sm,
            power_w=power / 1000.0 if power is not None else None,
            temperature_c=temp,
            utilization_pct=getattr(util, "gpu", None),
            throttle_reasons=[n for bit, n in _THROTTLE_BITS.items() if reasons and reasons & bit],
            other_processes=others,
            gpu_pids=pids,
        )


def suspect_reasons(start: GpuHealth | None, end: GpuHealth | None) -> list[str]:
    """Why a whole run's numbers are doubtful: throttling, other processes on the GPU."""
    reasons: list[str] = []
    for label, h in (("start", start), ("end", end)):
        if h is None:
            continue
        bad = [r for r in h.throttle_reasons if r not in BENIGN_THROTTLE]
        if bad:
            reasons.append(f"throttling at {label}: {', '.join(bad)}")
        if h.other_processes:
            reasons.append(f"{h.other_processes} other process(es) on the GPU at {label}")
    return reasons


def mark_clock_drops(cases: list[Case], reference_mhz: float | None) -> list[str]:
    """Mark each case timed while its SM clock fell under the GPU's top clock; return run-level reasons.

    A case is ``suspect`` when its lowest clock reading while timing is more than ``CASE_CLOCK_DROP``
    under ``reference_mhz`` (the GPU's maximum SM clock): a compute-bound kernel slows with its clock
    (measured on the H200: the ``block`` case read 6% slower at 1,860 MHz under the power cap). The
    run is suspect as a whole only when that happened in most of its cases.
    """
    if not reference_mhz:
        return []
    timed = [c for c in cases if c.latency_us and c.latency_us.sm_clock_mhz_min]
    dropped = 0
    for c in timed:
        low = c.latency_us.sm_clock_mhz_min if c.latency_us else None
        if low is not None and low < reference_mhz * (1 - CASE_CLOCK_DROP):
            dropped += 1
            c.suspect = [
                *(c.suspect or []),
                f"{CLOCK_DROP_MARK} to {low:.0f} MHz (top {reference_mhz:.0f} MHz) while timing: "
                "power or thermal capping",
            ]
    if timed and dropped * 2 > len(timed):
        return [f"{CLOCK_DROP_MARK} more than {CASE_CLOCK_DROP:.0%} in {dropped} of {len(timed)} cases"]
    return []


def cpu_suspect_reasons() -> list[str]:
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        return []
    cores = os.cpu_count() or 1
    if load1 > cores:
        return [f"host load average {load1:.1f} exceeds its {cores} cores: other work shared the CPU"]
    return []


@dataclass(frozen=True)
class ThreadTimes:
    """Time this process's threads have spent so far on a CPU and waiting in the run queue for one, nanoseconds;
    and the host's CPU time so far and the part of it the hypervisor gave to other guests (steal), in ticks, which
    a thread's own counts cannot see: to the guest, a stolen stretch is time its thread ran."""

    running_ns: int
    waiting_ns: int
    steal_ticks: int = 0
    cpu_ticks: int = 0


def thread_times() -> ThreadTimes | None:
    """Summed over the process's threads (the intra-op pool included) from Linux's ``/proc/self/task/*/schedstat``;
    ``None`` where the kernel does not keep it. Waiting time is time runnable but not running: a core taken by
    another process."""
    running = waiting = 0
    found = False
    for path in Path("/proc/self/task").glob("*/schedstat"):
        try:
            fields = path.read_text().split()
            running += int(fields[0])
            waiting += int(fields[1])
        except (OSError, ValueError, IndexError):  # a thread that ended between the listing and the read
            continue
        found = True
    steal, total = _host_ticks()
    return ThreadTimes(running, waiting, steal, total) if found else None


def _host_ticks() -> tuple[int, int]:
    """(steal, all) CPU ticks of the host so far, from the ``cpu`` line of ``/proc/stat`` (user nice system idle
    iowait irq softirq steal ...); (0, 0) where it cannot be read."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        ticks = [int(x) for x in fields[1:9]]
    except (OSError, ValueError):
        return 0, 0
    if fields[:1] != ["cpu"] or len(ticks) < 8:
        return 0, 0
    return ticks[7], sum(ticks)


def host_wait_reason(before: ThreadTimes | None, after: ThreadTimes | None) -> str | None:
    """Why a CPU case's timing is doubtful when its threads waited for a core (``HOST_WAIT_SHARE`` or more of their
    runnable time between ``before`` and ``after``), else ``None``."""
    if before is None or after is None:
        return None
    waiting = after.waiting_ns - before.waiting_ns
    runnable = waiting + after.running_ns - before.running_ns
    if runnable > 0 and waiting >= HOST_WAIT_SHARE * runnable:
        return (
            f"the profiler's threads waited for a core {waiting / runnable:.0%} of their runnable time while timing "
            f"({waiting / 1e6:.0f} ms): the host was busy with other work"
        )
    steal = after.steal_ticks - before.steal_ticks
    ticks = after.cpu_ticks - before.cpu_ticks
    if ticks >= MIN_STEAL_TICKS and steal >= HOST_WAIT_SHARE * ticks:
        return (
            f"the hypervisor gave {steal / ticks:.0%} of the host's CPU time to other guests while timing (steal "
            "time): the virtual machine's cores were taken from it"
        )
    return None


def disturbed_run_reasons(disturbed: int, timed: int) -> list[str]:
    """The run's own reason when most of its ``timed`` cases were ``disturbed`` (a burst, a busy host)."""
    if timed and disturbed * 2 > timed:
        return [f"{disturbed} of {timed} cases were disturbed while timing (bursts of slow samples or a busy host)"]
    return []


def software_versions() -> dict[str, str | None]:
    # torch.backends.cudnn's functions carry no annotations.
    available = torch.backends.cudnn.is_available()  # type: ignore[no-untyped-call]
    cudnn = torch.backends.cudnn.version() if available else None  # type: ignore[no-untyped-call]
    try:
        import triton

        triton_version: str | None = triton.__version__
    except Exception:
        triton_version = None
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(cudnn) if cudnn else None,
        "triton": triton_version,
        "python": platform.python_version(),
    }


def testbed(device: Device, driver: str | None, mode: str) -> tuple[str, dict[str, str]]:
    """The testbed key of this device and what it means (see ``attnprof.core.testbed``)."""
    what = testbed_meaning(device.name, driver, mode, device.cpu_threads)
    return testbed_key(what), what


def host_name() -> str:
    return socket.gethostname()
