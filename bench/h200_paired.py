"""Paired A/B on the H200: raw data for bench/reports/h200-paired.md (gathered by bench/h200_paired.sh).

python3 -m bench.h200_paired plant --out DIR [--effects 0.005,0.01,0.02]
    Times each case of bench/paired/suite.toml with the base tree's code (CUDA events around each iteration, the
    profiler's clean flush before it, 200 iterations) and reads the SM clock, then writes the trees a paired run
    compares: DIR/base and DIR/aa (zero cycles of spin: the A/A head, a copy of the base in a folder of its own) and
    DIR/p<effect> (a spin of effect x the case's time, in cycles at the clock read). DIR/plant.json records the
    times, the clock and the cycles.

The analysis (resampling the recorded pairs, the other methods, the cost) is bench/h200_paired_report.py, on the
CPU machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLANT = REPO / "bench" / "paired" / "plant.py"


def _write_tree(root: Path, cycles: dict[str, int]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(PLANT, root / "plant.py")
    (root / "plant_config.py").write_text(f"CYCLES = {json.dumps(cycles)}\n")


def plant(out: Path, effects: list[float], suite_path: Path) -> None:
    import torch

    from attnprof.core.measure import environment as env
    from attnprof.core.measure.timing import Flusher
    from attnprof.core.suite import load_suite

    base = out / "base"
    _write_tree(base, {})
    _write_tree(out / "aa", {})
    # On purpose: the times are taken with the base tree's own plant module (a written tree, not a package here).
    sys.path.insert(0, str(base))
    import plant as planted  # type: ignore[import-not-found]  # the base tree's module: zero cycles

    suite = load_suite(suite_path)
    nvml = env.Nvml.open()
    flusher = Flusher("cuda")
    times: dict[str, float] = {}
    clocks: list[float] = []
    for spec in suite.cases:
        factory = getattr(planted, spec.target.partition(":")[2])
        built = factory(dict(spec.params), "cuda")
        fn, args = built["fn"], built["args"]
        for _ in range(20):
            fn(*args)
        samples = []
        for _ in range(200):
            flusher()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn(*args)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0)
        times[spec.name] = statistics.median(samples)
        clocks.append((nvml.sm_clock() if nvml is not None else None) or 1980.0)
        del built, fn, args
        torch.cuda.empty_cache()
    mhz = statistics.median(clocks)
    variants: dict[str, dict[str, int]] = {}
    for effect in effects:
        name = f"p{effect * 100:g}"
        cycles = {case: round(effect * us * mhz) for case, us in times.items()}
        _write_tree(out / name, cycles)
        variants[name] = cycles
    record = {"times_us": times, "sm_mhz": mhz, "effects": effects, "cycles": variants}
    (out / "plant.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("plant")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--effects", default="0.005,0.01,0.02")
    p.add_argument("--suite", type=Path, default=REPO / "bench" / "paired" / "suite.toml")
    args = parser.parse_args()
    plant(args.out, [float(x) for x in args.effects.split(",")], args.suite)


if __name__ == "__main__":
    main()
