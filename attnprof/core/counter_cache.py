"""Counter truth at the cost of a guess: Nsight Compute's counters for a kernel, kept by the kernel's identity.

A kernel replayed under ncu once keeps its counters and its speed-of-light class in a file per testbed
(``<cache-dir>/counters/<testbed key>.json``); a later run of the same kernel reads them instead of replaying it.
The identity is everything that decides what the counters read: the kernel's name as launched, its grid and block,
its registers and shared memory, the case's parameters (shapes, dtype, causal, pass, backend), and the software that
built it (driver, CUDA, cuDNN, PyTorch, Triton); the testbed (GPU model, driver, mode) names the file. A change to any
of them is a new kernel, replayed in the same run where ncu is there (``--counters cached``).

Each kernel says where its counters came from (``counters_from``: ``ncu`` in this run, ``cache``) and when they were
measured (``counters_measured_at``), so a report tells counter truth from the model's guess.

The file is data a job may have written (a worker hands each project its own copy: ``attnprof.worker.profile``), so
it is read as untrusted: bounded in size, validated entry by entry, an entry that does not validate ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from attnprof.core.documents import Case, Environment, Kernel
from attnprof.core.documents.result import Bound

CACHE_VERSION = 1
MAX_CACHE_BYTES = 8 * 1024 * 1024
MAX_ENTRIES = 20_000
MAX_METRICS = 64
# the software whose change makes the same kernel name another kernel
_SOFTWARE = ("torch", "triton", "cuda", "cudnn")


class CachedCounters(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    counters: dict[str, float] = Field(max_length=MAX_METRICS)
    counter_bound: Bound | None = None
    measured_at: datetime
    kernel: str = Field(max_length=4000, description="the kernel's name, for a person reading the file")


def kernel_identity(kernel: Kernel, case: Case, environment: Environment) -> str:
    """A hash of everything that decides what a kernel's counters read (see the module's docstring)."""
    software = {name: environment.software.get(name) for name in _SOFTWARE}
    identity = {
        "v": CACHE_VERSION,
        "name": kernel.name,
        "grid": kernel.grid,
        "block": kernel.block,
        "registers": kernel.registers_per_thread,
        "shared_mem": kernel.shared_mem_bytes,
        "params": case.params,
        "target": case.target,
        "backend": case.backend_requested,
        "testbed": environment.testbed_key,
        "driver": environment.driver,
        "software": software,
    }
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def counters_path(folder: Path, testbed_key: str) -> Path:
    """The testbed's file in ``folder`` (``<cache-dir>/counters`` unless a run names another)."""
    return folder / (re.sub(r"[^A-Za-z0-9._-]+", "_", testbed_key)[:120] + ".json")


class CounterCache:
    """The counters of one testbed's kernels by identity, loaded from and saved to one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, CachedCounters] = {}
        self.ignored = 0  # entries that did not validate
        self.changed = False

    @classmethod
    def load(cls, path: Path) -> CounterCache:
        cache = cls(path)
        try:
            with path.open("rb") as fh:
                raw = fh.read(MAX_CACHE_BYTES + 1)
        except OSError:
            return cache
        if len(raw) > MAX_CACHE_BYTES:
            cache.ignored = -1  # too large to read: started afresh, and saving replaces it
            return cache
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, ValueError):
            return cache
        entries = data.get("entries") if isinstance(data, dict) and data.get("version") == CACHE_VERSION else None
        if not isinstance(entries, dict):
            return cache
        for key, value in list(entries.items())[:MAX_ENTRIES]:
            if not isinstance(key, str) or not re.fullmatch(r"[0-9a-f]{64}", key):
                cache.ignored += 1
                continue
            try:
                cache.entries[key] = CachedCounters.model_validate(value)
            except ValidationError:
                cache.ignored += 1
        return cache

    def get(self, key: str) -> CachedCounters | None:
        return self.entries.get(key)

    def put(self, key: str, kernel: Kernel, measured_at: datetime) -> None:
        if kernel.counters is None:
            return
        counters = dict(list(kernel.counters.items())[:MAX_METRICS])
        self.entries[key] = CachedCounters(
            counters=counters, counter_bound=kernel.counter_bound, measured_at=measured_at, kernel=kernel.name[:4000]
        )
        if len(self.entries) > MAX_ENTRIES:  # the oldest measurements go first
            oldest = sorted(self.entries, key=lambda k: self.entries[k].measured_at)[: len(self.entries) - MAX_ENTRIES]
            for k in oldest:
                del self.entries[k]
        self.changed = True

    def save(self) -> None:
        """Write the file whole and atomically (a reader never sees half of it)."""
        if not self.changed:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "version": CACHE_VERSION,
            "entries": {k: v.model_dump(mode="json") for k, v in self.entries.items()},
        }
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".counters-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(body, fh, separators=(",", ":"))
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.changed = False


def heavy(case: Case, min_share: float) -> list[Kernel]:
    """The kernels of an ok case that take at least ``min_share`` of its kernel time: the ones given counters."""
    if case.status != "ok":
        return []
    return [k for k in case.kernels if (k.share or 0.0) >= min_share]


def apply_cached(cases: list[Case], cache: CounterCache, environment: Environment, min_share: float) -> list[Case]:
    """Give each heavy kernel found in ``cache`` its cached counters; return the cases with a heavy kernel not in it
    (the ones to replay under ncu)."""
    todo = []
    for case in cases:
        missing = False
        for kernel in heavy(case, min_share):
            hit = cache.get(kernel_identity(kernel, case, environment))
            if hit is None:
                missing = True
                continue
            kernel.counters = dict(hit.counters)
            kernel.counter_bound = hit.counter_bound
            kernel.counters_from = "cache"
            kernel.counters_measured_at = hit.measured_at
        if missing:
            todo.append(case)
    return todo


def store_measured(cases: list[Case], cache: CounterCache, environment: Environment) -> int:
    """Put every kernel whose counters ncu read in this run into ``cache``; how many."""
    stored = 0
    for case in cases:
        for kernel in case.kernels:
            if kernel.counters_from == "ncu" and kernel.counters is not None:
                cache.put(
                    kernel_identity(kernel, case, environment), kernel, kernel.counters_measured_at or datetime.now(UTC)
                )
                stored += 1
    return stored


def coverage(cases: list[Case], min_share: float) -> tuple[int, int]:
    """(heavy kernels with counters, heavy kernels): the share the report and the history publish."""
    kernels = [k for c in cases for k in heavy(c, min_share)]
    return sum(1 for k in kernels if k.counters is not None), len(kernels)
