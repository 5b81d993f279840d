"""The trace pass: a few iterations under torch.profiler (Kineto/CUPTI), kept as a gzip Chrome trace.

The trace pass is separate from the timing pass because the profiler's own overhead (CUPTI
callbacks, record_shapes) would be inside the timed numbers otherwise. Each iteration is wrapped in
``record_function("attnprof/iter/<i>")`` so the parser can tell iterations apart; flushes and
gradient resets run outside those ranges and are ignored.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from profiler_core.measure.targets import Workload
from profiler_core.measure.timing import Flusher


def trace_iterations(
    workload: Workload, *, device: str, iterations: int, flusher: Flusher, out_path: Path | None
) -> dict[str, Any]:
    """Run ``iterations`` traced iterations; return the Chrome trace (and save it gzip'd at ``out_path``)."""
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True) as prof:
        for i in range(iterations):
            workload.zero_grads()
            flusher()
            with record_function(f"attnprof/iter/{i}"):
                workload.step()
        if device == "cuda":
            torch.cuda.synchronize()
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        with open(tmp, "rb") as f:
            raw = f.read()
        if out_path is not None:
            out_path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "rb") as src, gzip.open(out_path, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst)
        data: dict[str, Any] = json.loads(raw)
        return data
    finally:
        os.unlink(tmp)
