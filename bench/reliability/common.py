"""What every scenario shares: the paths, the scenarios' names, the testbeds, the shortened leases, and waiting."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "out" / "reliability"
REPORT = ROOT / "bench" / "reports" / "reliability.md"
SCENARIOS = (
    "profile-kill",
    "analysis-kill",
    "redis",
    "postgres",
    "schemathesis",
    "bad-inputs",
    "isolation",
    "hostile-jobs",
)
TESTBED = "rel-cpu"
PARKED = "rel-parked"  # a testbed with no worker: its jobs stay queued
# Leases and sweep, shortened (production: interval 10 s, heartbeat 10 s, running lease 60 s, analyzing lease 120 s).
SWEEP = {
    "ATTNPROF_SWEEP__INTERVAL_S": "2",
    "ATTNPROF_SWEEP__QUEUED_STALE_S": "6",
    "ATTNPROF_SWEEP__HEARTBEAT_STALE_S": "8",
    "ATTNPROF_SWEEP__ANALYZING_STALE_S": "10",
    "ATTNPROF_WORKER__HEARTBEAT_S": "1",
}
ROLES = ("admin", "submit", "read")


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def now_s() -> float:
    return time.time()


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.25) -> Any:
    """``check()`` until it is true (returned), or a ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)


def filled(value: Any, names: Mapping[str, str]) -> Any:
    """A JSON body with ``{name}`` in its strings filled in from ``names``."""
    if isinstance(value, dict):
        return {k: filled(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [filled(v, names) for v in value]
    return value.format_map(names) if isinstance(value, str) and "{" in value else value
