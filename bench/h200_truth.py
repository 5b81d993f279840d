"""Raw data for bench/reports/h200-truth.md, gathered on the GPU host (see bench/h200_truth.sh).

python3 -m bench.h200_truth run examples/llama7b.toml bench/validation/suite.toml --out DIR
    One process: `attnprof profile` of each suite (result document and traces), then, in the same process,
    each case timed by triton.testing.do_bench (median mode) twice: with its own flush (a zero_() of 256
    MiB, which leaves the L2 dirty) and with the profiler's clean flush (a read sweep of the same size)
    patched in. Writes DIR/<suite>.json, DIR/<suite>-dobench.json and DIR/traces-<suite>/.

python3 -m bench.h200_truth ncu-driver SUITE... --map FILE
    What Nsight Compute replays: for each case, warm-up, the flush, then between cudaProfilerStart and
    Stop a marker kernel launched with grid (case index + 1, 1, 1), then one iteration of the case. The
    marker's grid tells whose kernels follow in ncu's launch-ordered output; FILE maps index to case.

python3 -m bench.h200_truth driver-kineto SUITE... --out FILE [--repeats 5]
    The same iterations as ncu-driver, without ncu: each (flush, synchronise, one iteration) traced by Kineto,
    repeated; FILE holds {case: [[kernel name, grid, median µs], ...]} in launch order. It tells whether a kernel
    that ncu reads apart from the trace pass reads so because of how the driver runs it or because of ncu.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from attnprof.core.measure.clock import kernel_events
from attnprof.core.measure.runner import ProfileOptions, profile_suite
from attnprof.core.measure.targets import SkipCase, WorkloadError, build_workload
from attnprof.core.measure.timing import Flusher
from attnprof.core.suite import load_suite

Launch = tuple[str, tuple[int, ...], tuple[int, ...], float]  # name, grid, block, µs


def _kernels(prof: Any) -> list[Launch]:
    """The trace's kernels in start order: name, grid, block, duration µs."""
    return [
        (
            e["name"],
            tuple(e.get("args", {}).get("grid", ())),
            tuple(e.get("args", {}).get("block", ())),
            float(e["dur"]),
        )
        for e in kernel_events(prof)
    ]


def _do_bench_both(workload: Any) -> dict[str, float | None]:
    import triton
    from triton.testing import do_bench

    def step() -> None:
        workload.zero_grads()
        workload.step()

    out: dict[str, float | None] = {}
    out["zero"] = do_bench(step, return_mode="median") * 1000.0
    driver = triton.runtime.driver.active
    clean = Flusher("cuda")
    calls = [0]

    def clean_flush(cache: Any) -> None:
        calls[0] += 1
        clean()

    original = driver.clear_cache
    driver.clear_cache = clean_flush
    try:
        out["clean"] = do_bench(step, return_mode="median") * 1000.0
    finally:
        driver.clear_cache = original
    if calls[0] == 0:
        raise RuntimeError("do_bench did not call driver.clear_cache: the clean flush was not used")
    return out


def run(suites: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for path in suites:
        suite = load_suite(path)
        started = time.perf_counter()
        doc = profile_suite(
            suite,
            ProfileOptions(
                device="cuda",
                trace_dir=out / f"traces-{suite.name}",
                cache_dir=Path("/tmp/attnprof-cache"),
                command="h200_truth run",
            ),
        )
        (out / f"{suite.name}.json").write_text(doc.to_json())
        print(f"profiled {suite.name} in {time.perf_counter() - started:.1f} s", flush=True)
        medians: dict[str, Any] = {}
        for spec in suite.cases:
            try:
                workload = build_workload(spec, "cuda")
                with workload.context():
                    medians[spec.id] = _do_bench_both(workload)
            except (SkipCase, WorkloadError, RuntimeError) as exc:
                medians[spec.id] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            torch.cuda.empty_cache()
            print(f"  do_bench {spec.id}: {medians[spec.id]}", flush=True)
        (out / f"{suite.name}-dobench.json").write_text(json.dumps(medians, indent=1))


def ncu_driver(suites: list[str], map_path: Path, kineto_out: Path | None = None, repeats: int = 1) -> None:
    import statistics

    import triton

    @triton.jit
    def attnprof_case_marker(ptr):  # type: ignore[no-untyped-def]
        pass

    marker_buf = torch.zeros(1, device="cuda")
    flush = Flusher("cuda")
    index: dict[int, str] = {}
    traced: dict[str, list[list[Any]]] = {}
    i = 0
    for path in suites:
        suite = load_suite(path)
        for spec in suite.cases:
            i += 1
            try:
                workload = build_workload(spec, "cuda")
                with workload.context():
                    for _ in range(3):
                        workload.zero_grads()
                        workload.step()
                    if kineto_out is None:
                        workload.zero_grads()
                        flush()
                        torch.cuda.synchronize()
                        torch.cuda.cudart().cudaProfilerStart()  # type: ignore[no-untyped-call]
                        attnprof_case_marker[(i, 1, 1)](marker_buf)
                        workload.step()
                        torch.cuda.synchronize()
                        torch.cuda.cudart().cudaProfilerStop()  # type: ignore[no-untyped-call]
                    else:
                        runs = []
                        for _ in range(repeats):
                            workload.zero_grads()
                            flush()
                            torch.cuda.synchronize()
                            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                                attnprof_case_marker[(i, 1, 1)](marker_buf)
                                workload.step()
                                torch.cuda.synchronize()
                            launches = _kernels(prof)
                            at = next(j for j, k in enumerate(launches) if "attnprof_case_marker" in k[0])
                            runs.append(launches[at + 1 :])
                        if any([k[:2] for k in r] != [k[:2] for k in runs[0]] for r in runs):
                            raise RuntimeError("the iterations launched different kernels")
                        traced[f"{suite.name}/{spec.id}"] = [
                            [name, list(grid), statistics.median(r[j][3] for r in runs)]
                            for j, (name, grid, _b, _us) in enumerate(runs[0])
                        ]
                index[i] = f"{suite.name}/{spec.id}"
            except Exception as exc:
                print(f"ncu-driver: {spec.id}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
            torch.cuda.empty_cache()
            if kineto_out is None:
                map_path.write_text(json.dumps(index, indent=1))
            else:
                kineto_out.write_text(json.dumps(traced, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("suites", nargs="+")
    r.add_argument("--out", type=Path, required=True)
    n = sub.add_parser("ncu-driver")
    n.add_argument("suites", nargs="+")
    n.add_argument("--map", type=Path, required=True)
    k = sub.add_parser("driver-kineto")
    k.add_argument("suites", nargs="+")
    k.add_argument("--out", type=Path, required=True)
    k.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.cmd == "run":
        run(args.suites, args.out)
    elif args.cmd == "ncu-driver":
        ncu_driver(args.suites, args.map)
    else:
        ncu_driver(args.suites, Path("/dev/null"), args.out, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
