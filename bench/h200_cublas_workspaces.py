"""What the profiler leaves allocated on the GPU after a run: cuBLAS's workspaces, one per (handle, stream).

    PYTHONPATH=. python3 bench/h200_cublas_workspaces.py SUITE... --variant release|keep --out FILE

The runner times each case-round on a stream of PyTorch's pool (``round_stream``), and PyTorch keeps a cuBLAS
workspace for every stream a matrix product ran on, for the life of the process. ``release`` is the runner as it
is (``release_stream_workspaces`` after each round); ``keep`` turns that call off. One process per variant profiles
the suites (no traces), then, with the session gone and the garbage collected, reads what is still allocated and
reserved, and the peak; each case's median is kept beside them. Writes one JSON document.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

import profiler_core.measure.runner as runner
from profiler_core.measure.runner import ProfileOptions, profile_suite
from profiler_core.suite import load_suite

MIB = 2**20


def measure(suites: list[str], variant: str) -> dict[str, Any]:
    if variant == "keep":
        runner.release_stream_workspaces = lambda device: None  # type: ignore[attr-defined]
    torch.cuda.init()  # type: ignore[no-untyped-call]
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out: dict[str, Any] = {"variant": variant, "torch": torch.__version__, "suites": {}, "medians": {}}
    started = time.perf_counter()
    for path in suites:
        suite = load_suite(path)
        options = ProfileOptions(device="cuda", cache_dir=Path("/tmp/attnprof-cache"), command="h200_cublas_workspaces")
        doc = profile_suite(suite, options)
        out["suites"][suite.name] = suite.timing.effective_rounds
        for case in doc.cases:
            if case.latency_us is not None:
                out["medians"][f"{suite.name}/{case.id}"] = case.latency_us.median
        del doc
        gc.collect()
        torch.cuda.synchronize()
        left = (torch.cuda.memory_allocated() - before) / MIB
        out[f"allocated_after_{suite.name}_mib"] = left
        print(f"{variant}: {suite.name} done, {left:.1f} MiB still allocated", flush=True)
    out["wall_s"] = time.perf_counter() - started
    out["allocated_after_mib"] = (torch.cuda.memory_allocated() - before) / MIB
    out["reserved_after_mib"] = torch.cuda.memory_reserved() / MIB
    out["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / MIB
    torch.cuda.empty_cache()
    out["reserved_after_empty_cache_mib"] = torch.cuda.memory_reserved() / MIB
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--variant", choices=("release", "keep"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = measure(args.suites, args.variant)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"{args.variant}: {result['allocated_after_mib']:.1f} MiB allocated after the run, "
        f"{result['reserved_after_empty_cache_mib']:.1f} MiB reserved after empty_cache, "
        f"peak {result['peak_allocated_mib']:.0f} MiB, {result['wall_s']:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
