"""Does this host's device belong to the testbed? Checked before a profile worker starts, outside the jail and
before any user code: the device found here is also what the worker keys its testbed with (``POST
/internal/testbed/key``), so it must be the key the profiler writes into each job's document.

NVML reads the GPU's name and the driver without creating a CUDA context (a worker process never starts
CUDA: the profiler does, in its subprocess). The testbed key is the profiler's (``attnprof.core.testbed``, a
torch-free module that both use): a hash of the device's name, the driver and the mode.

On a CPU the profiler also hashes the thread count PyTorch picks, which only torch can tell: ``probe_cpu`` asks the
profiler's own code for it in a subprocess of the worker's code (no user code), with the environment jobs get.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from attnprof.contract.worker_api import WorkerTestbed
from attnprof.core.own_processes import strangers
from attnprof.core.testbed import testbed_key, testbed_meaning

T = TypeVar("T")


class DeviceMismatch(Exception):
    """This worker's device does not match its testbed: the worker must not start."""


class DeviceUnknown(Exception):
    """This worker's device could not be read (the CPU probe failed): the worker must not start."""


@dataclass(frozen=True)
class LocalDevice:
    mode: str  # "cuda" or "cpu"
    name: str
    driver: str | None
    threads: int | None = None  # on a CPU: the thread count PyTorch uses, which the key hashes

    def meaning(self) -> dict[str, str]:
        return testbed_meaning(self.name, self.driver, self.mode, self.threads)

    def key(self) -> str:
        return testbed_key(self.meaning())


# Run by ``probe_cpu`` with the worker's own code: the device as the profiler describes it, so the key agrees.
_CPU_PROBE = (
    "import json\n"
    "from attnprof.core.measure.environment import describe_device\n"
    "d = describe_device('cpu')\n"
    "print(json.dumps({'name': d.name, 'threads': d.cpu_threads}))\n"
)
CPU_PROBE_TIMEOUT_S = 300.0


def probe_cpu(env: dict[str, str], *, timeout_s: float = CPU_PROBE_TIMEOUT_S) -> LocalDevice:
    """This host's CPU as the profiler sees it (its model and PyTorch's thread count), read by the profiler's code
    in a subprocess with ``env`` (a job's environment, without its user code). Raises ``DeviceUnknown``."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CPU_PROBE], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DeviceUnknown(f"probing the CPU failed: {exc}") from None
    failed = DeviceUnknown(
        f"probing the CPU failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}"
    )
    if done.returncode != 0:
        raise failed
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
        return LocalDevice(mode="cpu", name=str(found["name"]), driver=None, threads=int(found["threads"]))
    except (ValueError, IndexError, KeyError, TypeError):
        raise failed from None


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
    namespace), so this is where "another process on the GPU" is decided for a jailed job. The job's own processes
    are ``sandbox.tree``'s, which is ``attnprof.core.own_processes``: the definition the profiler judges by outside
    a jail, so a paired job's two sides are never strangers to each other on either path."""

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
            self.candidates.update(strangers((int(p.pid) for p in procs), job_pids | {os.getpid()}))

    def foreign(self, job_pids: frozenset[int]) -> list[int]:
        """PIDs seen on the GPU that never turned out to be the job's (``job_pids``: every pid of the job's tree seen
        while it ran)."""
        return strangers(self.candidates, job_pids)

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()


def _describe(meaning: dict[str, Any] | None) -> str:
    if not meaning:
        return "unknown"
    return ", ".join(f"{k} {v}" for k, v in sorted(meaning.items()))


def profile_mode(device: str, gpu: LocalDevice | None) -> str:
    """The device the worker will profile on, ``cuda`` or ``cpu``: ``device`` is ``auto``, ``cuda`` or ``cpu``;
    ``gpu`` is what ``probe_gpu`` found. Raises ``DeviceMismatch`` where no one GPU can be served."""
    visible = visible_devices()
    if len(visible) > 1:
        raise DeviceMismatch(
            f"CUDA_VISIBLE_DEVICES names {len(visible)} devices ({','.join(visible)}): run one worker per GPU, "
            "each with one device"
        )
    if device == "cuda" and gpu is None:
        raise DeviceMismatch("--device cuda, but NVML finds no GPU (no driver, or CUDA_VISIBLE_DEVICES hides it)")
    return "cuda" if device != "cpu" and gpu is not None else "cpu"


def check(testbed: WorkerTestbed, here: LocalDevice) -> str:
    """A line saying why the device found ``here`` (``probe_gpu``'s, or ``probe_cpu``'s) fits the testbed.

    ``testbed`` is the service's answer for the worker token (``name``, ``key``, ``meaning``). A testbed with no key
    fits any device: this worker keys it when it starts. Raises ``DeviceMismatch``.
    """
    name, key, meaning = testbed.name, testbed.key, testbed.meaning or {}
    if key is None:
        return (
            f"testbed {name} has no key yet: this worker keys it as it starts, with its {here.mode.upper()} "
            f"({_describe(here.meaning())}; key {here.key()})"
        )
    if here.mode == "cuda":
        if here.key() != key:
            raise DeviceMismatch(
                f"this GPU does not match testbed {name}: the testbed is {_describe(meaning)} (key {key}); "
                f"this worker's GPU is {_describe(here.meaning())} (key {here.key()})"
            )
        return f"GPU {here.name}, driver {here.driver}: testbed key {key} matches"
    if meaning.get("mode") != "cpu":
        raise DeviceMismatch(
            f"testbed {name} is {_describe(meaning)}, and this worker would profile on the CPU "
            "(no GPU found, or --device cpu)"
        )
    if meaning.get("device") != here.name:
        raise DeviceMismatch(
            f"testbed {name} is a CPU testbed of {meaning.get('device')!r}; this host is {here.name!r}"
        )
    if here.key() != key:
        raise DeviceMismatch(
            f"this CPU does not match testbed {name}: the testbed is {_describe(meaning)} (key {key}); the profiler "
            f"here would use {here.threads} threads ({_describe(here.meaning())}, key {here.key()}): "
            "OMP_NUM_THREADS sets the count"
        )
    return f"CPU {here.name}, {here.threads} threads: testbed key {key} matches"
