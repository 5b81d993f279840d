"""How many alerts a default-branch history with sub-threshold wiggles and one real step makes: every change point
keyed on the run that revealed it (the rule before alerts were keyed on steps), against the steps that pass the
case's minimum effect, one per step (``attnprof.server.comparisons.alerts``).

    .venv/bin/python -m bench.alert_noise
    .venv/bin/python -m bench.alert_noise --quick      # the same history, 30 random histories a rate: a smoke run

The history: the real H200 result document (15 cases, tests/data), 42 default-branch runs analysed one after the
other, as uploads are: every case 0.9% slower from run 10 and 0.4% faster than the start from run 20 (under the 2%
minimum effect on CUDA), with ±0.05% run-to-run noise; ``sdpa[backend=cudnn,pass=fwd]`` 30% slower from run 30.
Detection runs after each run over the last 40, as the service does.

Then the rates: 300 random histories of 40 runs with run-to-run noise of 0.4% and 0.6% (a standard deviation; on
the H200 unchanged code lands within 0.5-1.4% across six processes), with no step (how many histories get an
alert) and with a 3% step at run 30 (how often it is found, at its run or one beside it). It prints; it writes
nothing.
"""

from __future__ import annotations

import argparse

import numpy as np

from attnprof.core.analysis import e_divisive
from attnprof.server.comparisons import alerts
from tests.server import documents as docs

STEP_CASE = "sdpa[backend=cudnn,pass=fwd]"
LEVELS = [0.0] * 10 + [0.009] * 10 + [-0.004] * 10
STEP = len(LEVELS)
RUNS = STEP + 12
WINDOW = 40


def series(case: str, median_us: float) -> list[tuple[str, float]]:
    out = []
    for i in range(RUNS):
        level = LEVELS[i] if i < STEP else LEVELS[-1]
        slower = 1.3 if i >= STEP and case == STEP_CASE else 1.0
        out.append((f"run{i:02d}", median_us * slower * (1 + level + 0.0005 * ((i * 7) % 3 - 1))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--histories", type=int, default=300, help="random histories per noise level and step")
    parser.add_argument("--quick", action="store_true", help="30 random histories a rate (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.histories = 30
    medians = {c["id"]: c["latency_us"]["median"] for c in docs.h200()["cases"]}
    by_run: dict[tuple[str, str], float] = {}
    steps: dict[str, list[tuple[str, str]]] = {}
    for case, median in medians.items():
        points = series(case, median)
        known: list[tuple[str, str]] = []
        for n in range(2 * alerts.MIN_SIZE, RUNS + 1):
            window = points[max(0, n - WINDOW) : n]
            values = np.array([v for _, v in window])
            for cp in e_divisive(values, alpha=alerts.ALPHA, min_size=alerts.MIN_SIZE):
                by_run.setdefault((case, window[cp.index][0]), cp.change or 0.0)
            place = {run: i for i, (run, _) in enumerate(window)}
            for step in alerts.steps_of(case, window, min_effect=0.02):
                if not any(abs(place.get(run, -99) - step.index) <= alerts.SAME_STEP_RUNS for _, run in known):
                    known.append((step.before_run_id, step.run_id))
        if known:
            steps[case] = known
    small = [c for c in by_run.values() if abs(c) < 0.02]
    print(f"{len(medians)} cases, {RUNS} runs, detection after each run over the last {WINDOW}")
    print(
        f"every change point, keyed on its run: {len(by_run)} alerts, {len(small)} of them under 2% "
        f"({min(small):+.2%} to {max(small):+.2%})"
    )
    on_step = sorted(run for case, run in by_run if case == STEP_CASE)
    print(f"  on {STEP_CASE}: {len(on_step)} ({', '.join(on_step)})")
    total = sum(len(v) for v in steps.values())
    print(f"steps of at least the minimum effect, one per step: {total} alert(s): {steps}")
    rates(args.histories)


def rates(trials: int = 300, runs: int = 40, at: int = 30) -> None:
    rng = np.random.default_rng(7)
    for sd in (0.004, 0.006):
        for step in (0.0, 0.03):
            found = wrong = 0
            for t in range(trials):
                values = 100.0 * (1 + rng.normal(0, sd, runs))
                values[at:] *= 1 + step
                points = [(f"{i}", float(v)) for i, v in enumerate(values)]
                for s in alerts.steps_of("case", points, min_effect=0.02, seed=t):
                    if step and abs(int(s.run_id) - at) <= 1:
                        found += 1
                    else:
                        wrong += 1
            what = f"a {step:.0%} step found in {found / trials:.1%}" if step else "no step"
            print(f"noise {sd:.1%}: {what}; alerts anywhere else: {wrong} ({trials} histories)")


if __name__ == "__main__":
    main()
