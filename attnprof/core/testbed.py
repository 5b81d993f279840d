"""The testbed key: what must match for two runs to be compared at all. Torch-free.

A hash of the device model, the driver and the mode (and, on CPU, the thread count PyTorch uses).
The profiler computes it from the device it measured; a worker computes it from NVML before it starts,
without torch, to check that its GPU belongs to the testbed it serves. Both use this module.
"""

from __future__ import annotations

import hashlib
import platform


def testbed_meaning(device: str, driver: str | None, mode: str, cpu_threads: int | None = None) -> dict[str, str]:
    """What the key hashes, in words: device, driver, mode (and threads on CPU)."""
    what = {"device": device, "driver": driver or "none", "mode": mode}
    if mode == "cpu":
        what["threads"] = str(cpu_threads)
    return what


def testbed_key(meaning: dict[str, str]) -> str:
    """The key of ``meaning``: the first 16 hex digits of a SHA-256 over its sorted items."""
    blob = "|".join(f"{k}={v}" for k, v in sorted(meaning.items()))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo says it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
