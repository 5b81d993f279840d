"""Does this host's device belong to the testbed? Checked before a profile worker starts, through NVML only.

NVML reads the GPU's name and the driver without creating a CUDA context (a worker process never starts
CUDA: the profiler does, in its subprocess). The testbed key is the profiler's (``profiler_core.testbed``, a
torch-free module that both use): a hash of the device's name, the driver and the mode.

On a CPU testbed the check compares the mode and the CPU's model; the profiler also hashes the thread count
PyTorch picks, which only torch can tell, so that part is left to the comparison (a mismatch there shows
as a testbed-key mismatch, a warning).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from profiler_core.testbed import cpu_model, testbed_key

T = TypeVar("T")


class DeviceMismatch(Exception):
    """This worker's device does not match its testbed: the worker must not start."""


@dataclass(frozen=True)
class LocalDevice:
    mode: str  # "cuda" or "cpu"
    name: str
    driver: str | None

    def meaning(self) -> dict[str, str]:
        return {"device": self.name, "driver": self.driver or "none", "mode": self.mode}

    def key(self) -> str:
        return testbed_key(self.meaning())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_devices() -> list[str]:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    return [] if raw is None else [d.strip() for d in raw.split(",") if d.strip()]


def _visible_handle(nvml: Any) -> Any:
    """NVML's handle on ``CUDA_VISIBLE_DEVICES``'s first entry (an index in PCI bus order or a ``GPU-``/``MIG-``
    UUID; ``0`` when unset), or ``None`` for an entry NVML cannot name. NVML must be initialised."""
    visible = visible_devices()
    first = visible[0] if visible else "0"
    if first.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(first)
    return nvml.nvmlDeviceGetHandleByIndex(int(first)) if first.isdigit() else None


def _with_visible_handle(read: Callable[[Any, Any], T]) -> T | None:
    """``read(pynvml, handle)`` for the GPU that CUDA will call device 0 in the subprocess
    (``CUDA_VISIBLE_DEVICES``'s first entry, an index in PCI bus order or a ``GPU-`` UUID); ``None`` without a
    driver, a GPU, or an answer."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU
        return None
    try:
        handle = _visible_handle(pynvml)
        return None if handle is None else read(pynvml, handle)
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def probe_gpu() -> LocalDevice | None:
    """The GPU that CUDA will call device 0 in the subprocess, read through NVML; ``None`` without one."""
    return _with_visible_handle(
        lambda nvml, handle: LocalDevice(
            mode="cuda",
            name=_text(nvml.nvmlDeviceGetName(handle)),
            driver=_text(nvml.nvmlSystemGetDriverVersion()),
        )
    )


@functools.lru_cache(maxsize=1)
def probe_minor() -> int | None:
    """The minor number of that GPU (``/dev/nvidia<minor>``: the one GPU node a job's jail is given), or ``None``."""
    return _with_visible_handle(lambda nvml, handle: int(nvml.nvmlDeviceGetMinorNumber(handle)))


class GpuWatch:
    """The processes on this worker's GPU that are not the job's, read through NVML from outside the jail while the
    job runs (``sandbox.run``'s ``watch``): the worker sees host PIDs, the job's tree among them. Inside its PID
    namespace the profiler cannot tell itself from another process (the driver may report PIDs of either
    namespace), so this is where "another process on the GPU" is decided for a jailed job."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.candidates: set[int] = set()
        self._last = 0.0
        self._nvml: Any = None
        self._handle: Any = None
        with contextlib.suppress(Exception):
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = _visible_handle(pynvml)

    def __call__(self, job_pids: set[int]) -> None:
        now = time.monotonic()
        if self._handle is None or now - self._last < self.interval_s:
            return
        self._last = now
        with contextlib.suppress(Exception):
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
            self.candidates |= {int(p.pid) for p in procs} - job_pids - {os.getpid()}

    def foreign(self, job_pids: frozenset[int]) -> list[int]:
        """PIDs seen on the GPU that never turned out to be the job's."""
        return sorted(self.candidates - job_pids)

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()


def _describe(meaning: dict[str, Any] | None) -> str:
    if not meaning:
        return "unknown"
    return ", ".join(f"{k} {v}" for k, v in sorted(meaning.items()))


def check(testbed: dict[str, Any], device: str, gpu: LocalDevice | None) -> tuple[str, str]:
    """The device the worker will profile on (``cuda`` or ``cpu``) and a line saying why it fits the testbed.

    ``testbed`` is the service's answer for the worker token (``name``, ``key``, ``meaning``); ``device`` is
    ``auto``, ``cuda`` or ``cpu``; ``gpu`` is what ``probe_gpu`` found. Raises ``DeviceMismatch``.
    """
    name = testbed.get("name", "?")
    visible = visible_devices()
    if len(visible) > 1:
        raise DeviceMismatch(
            f"CUDA_VISIBLE_DEVICES names {len(visible)} devices ({','.join(visible)}): run one worker per GPU, "
            "each with one device"
        )
    if device == "cuda" and gpu is None:
        raise DeviceMismatch("--device cuda, but NVML finds no GPU (no driver, or CUDA_VISIBLE_DEVICES hides it)")
    mode = "cuda" if device != "cpu" and gpu is not None else "cpu"
    key, meaning = testbed.get("key"), testbed.get("meaning") or {}
    if key is None:
        return mode, f"testbed {name} has no key yet: its first run will set it ({mode})"
    if mode == "cuda":
        assert gpu is not None
        if gpu.key() != key:
            raise DeviceMismatch(
                f"this GPU does not match testbed {name}: the testbed is {_describe(meaning)} (key {key}); "
                f"this worker's GPU is {_describe(gpu.meaning())} (key {gpu.key()})"
            )
        return mode, f"GPU {gpu.name}, driver {gpu.driver}: testbed key {key} matches"
    if meaning.get("mode") != "cpu":
        raise DeviceMismatch(
            f"testbed {name} is {_describe(meaning)}, and this worker would profile on the CPU "
            "(no GPU found, or --device cpu)"
        )
    here = cpu_model()
    if meaning.get("device") != here:
        raise DeviceMismatch(f"testbed {name} is a CPU testbed of {meaning.get('device')!r}; this host is {here!r}")
    return mode, f"CPU {here}: the testbed's CPU model matches"
