"""What tracing every round costs: the later rounds' traces and their pooling, against the whole profile.

    .venv/bin/python -m bench.kernel_trace_cost --runs 6                 # examples/cpu.toml on the CPU
    .venv/bin/python -m bench.kernel_trace_cost --quick                  # one run of one case: does it work
    .venv/bin/python -m bench.kernel_trace_cost --device cuda --suite examples/llama7b.toml --runs 3

Each run profiles ``--suite`` in this process (``profile_suite``, peaks from ``--cache-dir``), with the runner's
later-round trace (``measure.trace.trace_round``) and the pooling of every round's kernel durations
(``measure.kernel_rounds.pool_durations``) wrapped by timers: wall time and this process's CPU time inside each, and
over the whole profile. The first round's trace is the profile's own and is not counted. Prints one line per run and
the ranges; docs/method.md ("Trace pass") quotes them.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from attnprof.core.measure import case as case_module
from attnprof.core.measure import runner
from attnprof.core.measure.runner import ProfileOptions, profile_suite
from attnprof.core.suite import load_suite, select_cases

ROOT = Path(__file__).resolve().parents[1]
QUICK_CASE = "cross"


@dataclass
class Spent:
    traces: int = 0
    trace_wall_s: float = 0.0
    trace_cpu_s: float = 0.0
    pool_wall_s: float = 0.0
    pool_cpu_s: float = 0.0
    run_wall_s: float = 0.0
    run_cpu_s: float = 0.0


def _timed(fn: Callable[..., Any], spent: Spent, what: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kw: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kw)
        finally:
            setattr(spent, f"{what}_wall_s", getattr(spent, f"{what}_wall_s") + time.perf_counter() - wall)
            setattr(spent, f"{what}_cpu_s", getattr(spent, f"{what}_cpu_s") + time.process_time() - cpu)
            if what == "trace":
                spent.traces += 1

    return wrapper


# What is timed: (module, function, what the timer counts it as).
TIMED = ((runner, "trace_round", "trace"), (case_module, "pool_durations", "pool"))


def one_run(suite_path: Path, device: str, cache_dir: Path, cases: list[str] | None) -> Spent:
    suite = load_suite(suite_path)
    spent = Spent()
    real = [getattr(module, name) for module, name, _ in TIMED]
    for (module, name, what), fn in zip(TIMED, real, strict=True):
        setattr(module, name, _timed(fn, spent, what))
    try:
        options = ProfileOptions(
            device=device, cache_dir=cache_dir, cases=select_cases(suite, cases) if cases else None
        )
        wall, cpu = time.perf_counter(), time.process_time()
        profile_suite(suite, options)
        spent.run_wall_s, spent.run_cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        for (module, name, _), fn in zip(TIMED, real, strict=True):
            setattr(module, name, fn)
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", type=Path, default=ROOT / "examples" / "cpu.toml")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/attnprof-trace-cost-peaks"))
    parser.add_argument("--quick", action="store_true", help=f"one run of the case {QUICK_CASE!r} only")
    parser.add_argument("--out", type=Path, help="write the runs as JSON lines here")
    args = parser.parse_args(argv)
    cases = [QUICK_CASE] if args.quick else None
    runs = [one_run(args.suite, args.device, args.cache_dir, cases) for _ in range(1 if args.quick else args.runs)]
    for spent in runs:
        print(json.dumps(asdict(spent)))
    if args.out is not None:
        args.out.write_text("".join(json.dumps(asdict(s)) + "\n" for s in runs))

    def span(values: list[float], digits: int = 2) -> str:
        return f"{min(values):.{digits}f}-{max(values):.{digits}f}"

    print(
        f"{len(runs)} run(s) of {args.suite.name} on {args.device} (load average {os.getloadavg()[0]:.1f}): "
        f"later rounds' traces {span([s.trace_cpu_s for s in runs])} s CPU of "
        f"{span([s.run_cpu_s for s in runs], 1)} s for the run "
        f"({span([100 * s.trace_cpu_s / s.run_cpu_s for s in runs if s.run_cpu_s], 0)}%), "
        f"{span([s.trace_wall_s for s in runs])} s wall of {span([s.run_wall_s for s in runs], 1)} s; "
        f"pooling {span([s.pool_cpu_s for s in runs])} s CPU; {runs[0].traces} traces a run"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
