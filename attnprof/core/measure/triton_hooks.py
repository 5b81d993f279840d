"""What Triton kernels declare about their own work, read through Triton's ``launch_metadata`` hook.

A Triton kernel may be defined as ``@triton.jit(launch_metadata=fn)``: at each launch, when a launch-enter
hook is installed, Triton calls ``fn(grid, metadata, args)`` and hands the dict it returns (with the
kernel's ``name``) to the hook. Triton's own profiler, proton, reads ``flops`` (or ``flops8`` ...
``flops64`` by operand width) and ``bytes`` from it; so does the trace pass here, for each launch, and
the kernel records prefer these figures to any model (``work_source = "launch_metadata"``).

The hook is installed only around the trace pass: with it, Triton builds the metadata on every launch,
which would cost host time inside the timed iterations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

FLOPS_KEYS = ("flops", "flops8", "flops16", "flops32", "flops64")
BYTES_KEY = "bytes"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number >= 0 and number == number and number != float("inf") else None


def record_of(name: str | None, metadata: dict[str, Any]) -> dict[str, Any] | None:
    """One launch's declared work: ``{"name", "flops", "bytes"}`` (either may be None), or None when the
    kernel declares neither. FLOPs of several operand widths add up."""
    flops_parts = [_number(metadata.get(k)) for k in FLOPS_KEYS if k in metadata]
    flops_known = [f for f in flops_parts if f is not None]
    nbytes = _number(metadata.get(BYTES_KEY))
    if not flops_known and nbytes is None:
        return None
    kernel = name or metadata.get("name")
    if not isinstance(kernel, str) or not kernel:
        return None
    return {"name": kernel, "flops": sum(flops_known) if flops_known else None, "bytes": nbytes}


@contextlib.contextmanager
def launch_enter_hook(hook: Any) -> Iterator[bool]:
    """Install ``hook`` as a Triton launch-enter hook while the block runs, beside any already installed (a hook
    chain where Triton has one, else chained by hand); yields whether Triton was there to take it."""
    try:
        from triton import knobs
    except Exception:  # no Triton, or one without knobs: nothing launches through it
        yield False
        return

    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add") and hasattr(chain, "remove"):
        chain.add(hook)
        try:
            yield True
        finally:
            chain.remove(hook)
        return
    previous = chain

    def chained(lazy: Any) -> None:
        hook(lazy)
        if previous is not None:
            previous(lazy)

    knobs.runtime.launch_enter_hook = chained
    try:
        yield True
    finally:
        knobs.runtime.launch_enter_hook = previous


@contextlib.contextmanager
def declared_launches() -> Iterator[list[dict[str, Any]]]:
    """Collect the work each Triton launch declares while the block runs (an empty list without Triton)."""
    records: list[dict[str, Any]] = []

    def hook(lazy: Any) -> None:
        try:
            # The kernel's own name, before the declared dict (which may carry a display name) is merged in.
            data = getattr(lazy, "data", None)
            name = data.get("name") if isinstance(data, dict) else None
            metadata = lazy.get() if hasattr(lazy, "get") else lazy
        except Exception:  # a user's launch_metadata that raises must not break the trace pass
            return
        if isinstance(metadata, dict):
            record = record_of(name, metadata)
            if record is not None:
                records.append(record)

    with launch_enter_hook(hook):
        yield records
