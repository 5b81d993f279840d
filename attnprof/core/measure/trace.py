"""The trace pass: a few iterations under torch.profiler (Kineto/CUPTI), kept as a gzip Chrome trace.

The trace pass is separate from the timing pass because the profiler's own overhead (CUPTI
callbacks, record_shapes) would be inside the timed numbers otherwise. Each iteration is wrapped in
``record_function("attnprof/iter/<i>")`` so the parser can tell iterations apart; flushes and
gradient resets run outside those ranges and are ignored. On CUDA the work that Triton kernels declare
through ``launch_metadata`` is collected meanwhile and kept under the trace's ``"attnprof.declared"`` key.

The first round of a case is traced in full (``trace_iterations``: the saved trace, the declared work). Every later
round traces its iterations again (``trace_round``), for the kernels' durations alone: no file, no declared work, and
the trace exported only when the run's rounds are pooled, so that a paired run's other side starts timing as soon
as the profiler has stopped.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from attnprof.core.attribution import DECLARED_KEY
from attnprof.core.measure.targets import Workload
from attnprof.core.measure.timing import Flusher
from attnprof.core.measure.triton_hooks import declared_launches

_KINETO_CHATTER = re.compile(rb"^(USDT|STAGE):\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] ")


@contextlib.contextmanager
def _filtered_stderr() -> Iterator[None]:
    """Drop Kineto's start/stop chatter (written by C++ to fd 2, not silenced by KINETO_LOG_LEVEL).

    Everything else written to stderr meanwhile is passed on afterwards.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = [line for line in sink.read().splitlines(keepends=True) if not _KINETO_CHATTER.match(line)]
            if kept:
                sys.stderr.buffer.write(b"".join(kept))
                sys.stderr.flush()


def start_profiler_once(device: str, flusher: Flusher) -> None:
    """Start and stop the profiler once over a flush, before any case: its first start in a process loads and
    initialises CUPTI and Kineto, which would otherwise fall inside the first case's trace pass (and, in a paired
    run, happen on one side while the other waits; both sides start at once)."""
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with _filtered_stderr(), profile(activities=activities):
        flusher()
        if device == "cuda":
            torch.cuda.synchronize()


def _traced(workload: Workload, device: str, iterations: int, flusher: Flusher) -> None:
    """The traced iterations themselves, each in its own ``attnprof/iter/<i>`` range, the flush outside it."""
    for i in range(iterations):
        workload.zero_grads()
        flusher()
        with record_function(f"attnprof/iter/{i}"):
            workload.step()
    if device == "cuda":
        torch.cuda.synchronize()


def _activities(device: str) -> list[ProfilerActivity]:
    return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if device == "cuda" else [ProfilerActivity.CPU]


def _export(prof: profile, tmp: str) -> dict[str, Any]:
    prof.export_chrome_trace(tmp)
    with open(tmp, "rb") as f:
        data: dict[str, Any] = json.loads(f.read())
    return data


class RoundTrace:
    """One later round's traced iterations, exported as the round ends: a profiler's results kept past the next
    session lose their GPU activity (torch 2.11 on an H100 kept every later round's CPU ranges and no kernel), so
    nothing is left in the profiler for later. :meth:`chrome` hands the trace over once."""

    def __init__(self, trace: dict[str, Any], iterations: int) -> None:
        self._trace: dict[str, Any] | None = trace
        self.iterations = iterations

    def chrome(self) -> dict[str, Any]:
        """The Chrome trace of the round's iterations. Read once: dropped after it, so a run holds no more of them
        than the rounds not yet pooled."""
        trace, self._trace = self._trace, None
        if trace is None:
            raise RuntimeError("a round's trace is read once")
        return trace


def trace_round(workload: Workload, *, device: str, iterations: int, flusher: Flusher) -> RoundTrace:
    """Trace ``iterations`` more iterations of a round for the kernels' durations (see the module docstring).

    Shapes are recorded as in the first round's trace, since the phases of matrix products are read from them and a
    kernel is joined to the first round's table by its name and phase."""
    with _filtered_stderr(), profile(activities=_activities(device), record_shapes=True) as prof:
        _traced(workload, device, iterations, flusher)
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        return RoundTrace(_export(prof, tmp), iterations)
    finally:
        os.unlink(tmp)


def trace_iterations(
    workload: Workload, *, device: str, iterations: int, flusher: Flusher, out_path: Path | None
) -> dict[str, Any]:
    """Run ``iterations`` traced iterations; return the Chrome trace (and save it gzip'd at ``out_path``)."""
    declared_cm: contextlib.AbstractContextManager[list[dict[str, Any]]] = (
        declared_launches() if device == "cuda" else contextlib.nullcontext([])
    )
    with (
        _filtered_stderr(),
        declared_cm as declared,
        profile(activities=_activities(device), record_shapes=True) as prof,
    ):
        _traced(workload, device, iterations, flusher)
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        data = _export(prof, tmp)
        if declared:
            # Kept in the trace file too, so the kernel records can be rebuilt from it alone.
            data[DECLARED_KEY] = {"iterations": iterations, "launches": declared}
        if out_path is not None:
            out_path.parent.mkdir(parents=True, exist_ok=True)
            if declared:
                with gzip.open(out_path, "wt", compresslevel=6) as dst:
                    json.dump(data, dst)
            else:
                with open(tmp, "rb") as src, gzip.open(out_path, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst)
        return data
    finally:
        os.unlink(tmp)
