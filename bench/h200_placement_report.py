"""Each round's build placed anew, against the profiler as it is, over both suites; and rounds pooled over processes.

    python bench/h200_placement_report.py --data bench/reports/data/h200-placement-2026-12-03 \
        --workspace bench/reports/data/h200-spread-causes-2026-12-03/workspace \
        --runs bench/reports/data/h200-rounds-2026-12-03 --out bench/reports/h200-placement.md

``bench/reports/h200-spread-causes.md`` found some kernels' levels following where their tensors land, and
``bench/reports/h200-stream.md`` that a stream per round, which gives each round's tensors other blocks, averages a
level four cases share per process. If a build's placement were what sets a case's level, drawing it anew in every
round would make a process's median an average over as many placements as it has rounds, and the processes' medians
would close in. Here that is predicted from the placements measured before, then tested, and a second remedy, a run
pooling the rounds of several processes, is checked against committed runs. The raw data:

  DATA/{llama7b,validation}/   ``bench/h200_redraw.py`` processes over both suites on one H200, alternating: the
                               profiler as it is (``reuse``, 10 rounds) and each round's build placed anew
                               (``shuffle``: the allocator's cache emptied and a pad of random size, 0-62 MiB, held
                               before it) with 20 rounds (``shuffle20``); one document per suite and process
  WORKSPACE/*.json             ``bench/h200_workspace.py``'s rebuilt rounds: one process, each round built after the
                               cache was emptied and a pad of random size allocated (the placements drawn)
  RUNS/{a,b}/raw/run*/         two commands of ``bench/h200_truth.sh runs`` (the profiler as it is, 8 processes each)

Writes the report and a plot beside it (same name, ``.png``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.h200_rounds_report import (  # noqa: E402
    FIVE,
    HEAVY_US,
    TARGET,
    Process,
    _rounds,
    heavy,
    lease_gpus,
    load_runs,
    load_variants,
    median_of,
    pct,
    share_within,
    shown,
    spread,
)

SUITES = ("llama7b", "validation")
SEED = 20261203
TRIALS = 2000  # simulated five-process runs per case and number of rounds
DRAWN_ROUNDS = (10, 20)
POOLED = (1, 2, 3)  # processes whose rounds one run pools
PERMUTATIONS = 10_000


def load_both(data: Path) -> dict[str, list[Process]]:
    """Each ``h200_redraw`` process of ``data`` with both suites' cases (ids prefixed by the suite), by label, in the
    order they ran."""
    merged: dict[str, dict[str, Process]] = {}
    for suite in SUITES:
        for label, processes in load_variants(data / suite).items():
            for p in processes:
                into = merged.setdefault(label, {}).setdefault(p.name, Process(p.name, {}, {}))
                into.cases.update({f"{suite}/{i}": c for i, c in p.cases.items()})
    return {label: list(by_name.values()) for label, by_name in merged.items()}


def drawn_share(draws: list[float], rounds: int, rng: random.Random, trials: int = TRIALS) -> float:
    """The share of simulated five-process runs within the target, each process the median of ``rounds`` placements
    drawn (with replacement) from ``draws``: what drawing a placement per round would give if placements were all
    that differed between processes."""
    hits = 0
    for _ in range(trials):
        medians = [statistics.median(rng.choices(draws, k=rounds)) for _ in range(FIVE)]
        hits += spread(medians) <= TARGET
    return hits / trials


def pooled_value(group: list[Process], case_id: str, rounds: int = 10) -> float:
    """A run pooling ``group``'s processes: each gives its first ``rounds // len(group)`` rounds (the run's rounds
    shared out), the run's value is the median of the pooled round medians."""
    share = max(1, rounds // len(group))
    return statistics.median(m for p in group for m in _rounds(p.cases[case_id])[:share])


def pooled_expected(processes: list[Process], ids: list[str], k: int) -> float:
    """Runs of ``k`` processes next to each other in time: the expected number of ``ids`` within the target over
    every five of them."""
    runs = [processes[j * k : (j + 1) * k] for j in range(len(processes) // k)]
    fives = list(itertools.combinations(range(len(runs)), FIVE))
    total = 0.0
    for i in ids:
        values = [pooled_value(g, i) for g in runs]
        total += sum(spread([values[j] for j in s]) <= TARGET for s in fives) / len(fives)
    return total


def prediction_section(workspace: Path) -> tuple[list[str], dict[str, float]]:
    rng = random.Random(SEED)
    rows = []
    predicted: dict[str, float] = {}
    for path in sorted(workspace.glob("*.json")):
        for case_id, found in json.loads(path.read_text()).items():
            draws = [r["us"] for r in found.get("rebuilt", [])]
            if not draws or statistics.median(draws) < HEAVY_US:
                continue
            shares = [drawn_share(draws, r, rng) for r in DRAWN_ROUNDS]
            predicted.setdefault(case_id, shares[-1])
            sd = statistics.stdev(draws) / statistics.median(draws)
            rows.append(
                f"| {path.stem} | {case_id} | {statistics.median(draws):,.1f} | {len(draws)} | {pct(sd)} | "
                + " | ".join(f"{s:.0%}" for s in shares)
                + " |"
            )
    head = " | ".join(f"fives within 0.5%, {r} rounds" for r in DRAWN_ROUNDS)
    out = [
        "## 1. What drawing a placement per round would give, from the placements measured",
        "",
        f"`{shown(workspace)}`: one process per file, rounds of a case each built after the allocator's cache was "
        "emptied and a pad of random size allocated (`bench/h200_workspace.py`, on another H200). Taking those rounds "
        "as the placements a case can land on, a process that draws one per round has for its median the median of "
        f"as many draws; {TRIALS:,} simulated five-process runs per case (with replacement) give the share within "
        "0.5%. Cases ≥ 100 µs:",
        "",
        f"| file | case | µs | placements | their sd | {head} |",
        "|---|---|---:|---:|---:|" + "---:|" * len(DRAWN_ROUNDS),
        *rows,
        "",
        f"With {DRAWN_ROUNDS[-1]} rounds the prediction puts {sum(s >= 0.9 for s in predicted.values())} of "
        f"{len(predicted)} cases at 90% or more. It assumes the placements are independent draws and the only thing "
        "that differs between processes; they come from one process on another H200.",
        "",
    ]
    return out, predicted


def test_section(variants: dict[str, list[Process]], predicted: dict[str, float]) -> list[str]:
    reuse, drawn = variants["reuse"], variants["shuffle20"]
    ids = heavy(reuse)
    rows = []
    totals = {"reuse": [0, 0.0], "shuffle20": [0, 0.0]}
    for i in ids:
        cells = []
        for name, ps in (("reuse", reuse), ("shuffle20", drawn)):
            medians = [median_of(p.cases[i]) for p in ps]
            first = spread(medians[:FIVE]) <= TARGET
            share = share_within(medians)
            totals[name][0] += first
            totals[name][1] += share
            cells.append((statistics.stdev(medians) / statistics.median(medians), spread(medians), share))
        level = statistics.median(median_of(p.cases[i]) for p in drawn) / statistics.median(
            median_of(p.cases[i]) for p in reuse
        )
        guess = f"{predicted[i]:.0%}" if i in predicted else "—"
        rows.append(
            f"| {i} | {statistics.median(median_of(p.cases[i]) for p in reuse):,.1f} | "
            f"{pct(cells[0][0])} | {pct(cells[1][0])} | {pct(cells[0][1])} | {pct(cells[1][1])} | "
            f"{cells[0][2]:.0%} | {cells[1][2]:.0%} | {guess} | {pct(level - 1, sign=True)} |"
        )
    ratio, hits, p = sd_ratio_p(reuse, drawn, ids)
    missed = [
        i for i in ids if predicted.get(i, 0.0) >= 0.9 and share_within([median_of(q.cases[i]) for q in drawn]) < 0.5
    ]
    return [
        "## 2. The test: both suites, each round placed anew, against the profiler as it is",
        "",
        f"One lease, {len(reuse)} + {len(drawn)} processes alternating, both suites in each: `reuse` (the profiler as "
        "it is, 10 rounds) and `shuffle20` (before each round's build the allocator's cache emptied and a pad of "
        "0-62 MiB held, as the placements above were drawn; 20 rounds, the most a suite allows). Per case ≥ 100 µs: "
        "the process medians' standard deviation and range, the share of five-process subsets within 0.5%, the "
        "share section 1 predicted for 20 drawn rounds, and the `shuffle20` median against the `reuse` one.",
        "",
        "| case | µs | sd, reuse | sd, shuffle20 | range, reuse | range, shuffle20 | fives within 0.5%, reuse | "
        "fives, shuffle20 | predicted | shuffle20 / reuse |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "| processes | n | cases within 0.5% over the first five | expected over every five |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | {len(variants[name])} | {first}/{len(ids)} | {share:.1f}/{len(ids)} |"
            for name, (first, share) in totals.items()
        ),
        "",
        f"Over the {len(ids)} cases the `shuffle20` processes' standard deviation is {ratio:.2f} times the `reuse` "
        f"ones' (geometric mean of the per-case ratios, each group's medians taken about its own median; the labels "
        f"shuffled between the {len(reuse) + len(drawn)} processes {PERMUTATIONS:,} times, the same shuffle for every "
        f"case: {hits:,} reached a ratio as far from 1, p = {p:.3f}). "
        f"The prediction does not hold: of the cases it put at 90% or more with 20 rounds, {len(missed)} came out "
        f"under 50% ({', '.join(missed) or 'none'}). So what differs between processes is not only where a round's "
        "tensors land, and drawing the placement anew per round does not average it out. (Twenty rounds alone, "
        "without the placement drawn, did not narrow the spread either: `bench/reports/h200-truth.md`, section 4.) "
        "The profiler keeps taking its rounds' tensors from the allocator.",
        "",
    ]


def sd_ratio_p(
    first: list[Process], second: list[Process], ids: list[str], permutations: int = PERMUTATIONS
) -> tuple[float, int, float]:
    """How much wider ``second``'s process medians spread than ``first``'s over ``ids``: the geometric mean of the
    per-case ratios of standard deviations, and a permutation test of it (two-sided, on log scale). Each group's
    medians are taken about the group's own median, so a shift in level between the groups is not read as spread;
    one shuffle of the labels serves every case, so cases that move together are not counted as independent."""
    import numpy as np

    rows = []
    for i in ids:
        row = []
        for group in (first, second):
            values = [median_of(p.cases[i]) for p in group]
            centre = statistics.median(values)
            row += [v / centre - 1 for v in values]
        rows.append(row)
    centred = np.array(rows)
    n = len(first)

    def log_ratio(order: Any) -> float:
        taken = centred[:, order]
        return float(np.mean(np.log(taken[:, n:].std(axis=1, ddof=1) / taken[:, :n].std(axis=1, ddof=1))))

    order = np.arange(len(first) + len(second))
    observed = log_ratio(order)
    rng = np.random.default_rng(SEED)
    hits = int(sum(abs(log_ratio(rng.permutation(order))) >= abs(observed) - 1e-12 for _ in range(permutations)))
    return math.exp(observed), hits, (hits + 1) / (permutations + 1)


def spread_sd(processes: list[Process], case_id: str) -> float:
    medians = [median_of(p.cases[case_id]) for p in processes]
    return statistics.stdev(medians) / statistics.median(medians)


def pooled_section(runs: Path) -> tuple[list[str], dict[int, float]]:
    processes = load_runs(runs / "a") + load_runs(runs / "b")
    ids = heavy(processes)
    expected = {k: pooled_expected(processes, ids, k) for k in POOLED}
    outside = [i for i in ids if all(pooled_expected(processes, [i], k) < 0.5 for k in POOLED)]
    return [
        "## 3. A run pooling the rounds of several processes",
        "",
        f"A process-level component averages over processes, not rounds. From the committed runs of the profiler as "
        f"it is (`{shown(runs)}`, {len(processes)} processes of both suites, in the order they ran): a run of k "
        "processes next to each other in time, each giving 10/k of its rounds, its value the median of the pooled "
        "round medians; the cases ≥ 100 µs expected within 0.5% over every five such runs:",
        "",
        "| processes per run | runs | expected within 0.5% |",
        "|---:|---:|---:|",
        *(f"| {k} | {len(processes) // k} | {expected[k]:.1f}/{len(ids)} |" for k in POOLED),
        "",
        f"Pooling {POOLED[1]} or {POOLED[2]} processes per run does not bring the cases over: "
        f"{', '.join(outside) or 'none'} stay under half their fives within 0.5% however many processes a run "
        "pools, so the level they carry is not averaged out by neighbouring processes either. A run would cost a "
        "process start per process more; the profiler keeps one process per run.",
        "",
    ], expected


def plot(variants: dict[str, list[Process]], predicted: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ids = heavy(variants["reuse"])
    shares = {name: [share_within([median_of(p.cases[i]) for p in variants[name]]) for i in ids] for name in variants}
    fig, ax = plt.subplots(figsize=(14, 5))
    x = range(len(ids))
    ax.bar([k - 0.2 for k in x], shares["reuse"], width=0.4, color="#d62728", label="reuse (the profiler, 10 rounds)")
    ax.bar([k + 0.2 for k in x], shares["shuffle20"], width=0.4, color="#1f77b4", label="placed anew, 20 rounds")
    guessed = [(k, predicted[i]) for k, i in enumerate(ids) if i in predicted]
    ax.scatter(
        [k + 0.2 for k, _ in guessed],
        [v for _, v in guessed],
        marker="_",
        s=200,
        color="k",
        zorder=3,
        label="predicted for 20 drawn rounds (section 1)",
    )
    ax.set_xticks(list(x))
    ax.set_xticklabels([i.split("/", 1)[1] for i in ids], rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("five-process subsets within 0.5%")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.01), ncol=3, fontsize=8, frameon=False)
    fig.suptitle("One H200, processes alternating, cases ≥ 100 µs", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(
    data: Path, workspace: Path, runs: Path, png_name: str
) -> tuple[str, dict[str, list[Process]], dict[str, float]]:
    provenance = json.loads((data / "provenance.json").read_text())
    versions = (data / "versions.txt").read_text().strip()
    variants = load_both(data)
    predicted_lines, predicted = prediction_section(workspace)
    pooled_lines, _ = pooled_section(runs)
    out = [
        "# Where a round's tensors land, and a run over several processes: two remedies for the spread tested",
        "",
        f"From one lease on {provenance['date']} (raw data in `{shown(data)}`, recomputed by this report's script; "
        f"the profiler at {provenance['commit']}). GPU: {lease_gpus(provenance)}. Software: {versions}; driver "
        f"{provenance['driver']}; clocks not locked.",
        "",
        "```bash",
        *provenance["commands"],
        f"python bench/h200_placement_report.py --data {shown(data)} --workspace {shown(workspace)} "
        f"--runs {shown(runs)} --out bench/reports/h200-placement.md",
        "```",
        "",
        *predicted_lines,
        *test_section(variants, predicted),
        f"![five-process subsets within 0.5%, per case]({png_name})",
        "",
        *pooled_lines,
    ]
    return "\n".join(out), variants, predicted


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    png = args.out.with_suffix(".png")
    text, variants, predicted = render(args.data, args.workspace, args.runs, png.name)
    args.out.write_text(text)
    plot(variants, predicted, png)
    print(f"wrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
