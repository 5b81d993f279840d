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
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnprof.core.rounds import round_slices  # noqa: E402
from bench.h200_rounds_report import (  # noqa: E402
    FIVE,
    HEAVY_US,
    TARGET,
    Process,
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
from bench.h200_stream_report import PERMUTATIONS, SEED  # noqa: E402

SUITES = ("llama7b", "validation")
TRIALS = 2000  # simulated five-process runs per case and number of rounds
DRAWN_ROUNDS = (10, 20)
POOLED = (1, 2)  # processes whose rounds one run pools (16 processes make 5 runs of 3: one five)
RESAMPLES = 2000


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
    shared out), and the run's value is the median of all their samples, as the profiler takes a case's median."""
    share = max(1, rounds // len(group))
    samples = []
    for p in group:
        latency = p.cases[case_id].latency_us
        assert latency is not None
        slices = round_slices(latency)
        assert slices is not None, f"{case_id}: no round counts"
        samples += [x for r in slices[:share] for x in r]
    return statistics.median(samples)


def pooled_runs(commands: list[list[Process]], k: int) -> list[list[Process]]:
    """Runs of ``k`` processes next to each other in time, never across commands (a command's leftover dropped)."""
    return [ps[j * k : (j + 1) * k] for ps in commands for j in range(len(ps) // k)]


def pooled_shares(commands: list[list[Process]], ids: list[str], k: int) -> dict[str, float]:
    """Per case of ``ids``: the share of every five of the ``k``-process runs within the target."""
    runs = pooled_runs(commands, k)
    fives = list(itertools.combinations(range(len(runs)), FIVE))
    out = {}
    for i in ids:
        values = [pooled_value(g, i) for g in runs]
        out[i] = sum(spread([values[j] for j in s]) <= TARGET for s in fives) / len(fives)
    return out


def workspace_draws(workspace: Path) -> dict[str, tuple[list[str], list[float]]]:
    """Each case's rebuilt rounds over the workspace's files (one process each, one lease), pooled: the files and
    the round medians."""
    found: dict[str, tuple[list[str], list[float]]] = {}
    for path in sorted(workspace.glob("*.json")):
        for case_id, rounds in json.loads(path.read_text()).items():
            draws = [r["us"] for r in rounds.get("rebuilt", [])]
            if draws:
                files, values = found.setdefault(case_id, ([], []))
                files.append(path.stem)
                values += draws
    return found


def prediction_section(workspace: Path) -> tuple[list[str], dict[str, float]]:
    rng = random.Random(SEED)
    rows = []
    predicted: dict[str, float] = {}
    for case_id, (files, draws) in workspace_draws(workspace).items():
        if statistics.median(draws) < HEAVY_US:
            continue
        shares = [drawn_share(draws, r, rng) for r in DRAWN_ROUNDS]
        predicted[case_id] = shares[-1]
        sd = statistics.stdev(draws) / statistics.median(draws)
        rows.append(
            f"| {case_id} | {', '.join(files)} | {statistics.median(draws):,.1f} | {len(draws)} | {pct(sd)} | "
            + " | ".join(f"{s:.0%}" for s in shares)
            + " |"
        )
    head = " | ".join(f"fives within 0.5%, {r} rounds" for r in DRAWN_ROUNDS)
    out = [
        "## 1. What drawing a placement per round would give, from the placements measured",
        "",
        f"`{shown(workspace)}`: rounds of a case each built after the allocator's cache was emptied and a pad of "
        "random size allocated (`bench/h200_workspace.py`, one process per file, both on another lease's H200; a case "
        "in both files has their rounds pooled). Taking those rounds as the placements a case can land on, a process "
        f"that draws one per round has for its median the median of as many draws; {TRIALS:,} simulated "
        "five-process runs per case (with replacement) give the share within 0.5%. Cases ≥ 100 µs:",
        "",
        f"| case | files | µs | placements | their sd | {head} |",
        "|---|---|---:|---:|---:|" + "---:|" * len(DRAWN_ROUNDS),
        *rows,
        "",
        f"With {DRAWN_ROUNDS[-1]} rounds the prediction puts {sum(s >= 0.9 for s in predicted.values())} of "
        f"{len(predicted)} cases at 90% or more. It assumes the placements are independent draws and the only thing "
        "that differs between processes, and it takes a process's median as the median of its rounds' medians where "
        "the profiler takes the median of all its samples.",
        "",
    ]
    return out, predicted


def sd_ratio_ci(
    first: list[Process], second: list[Process], ids: list[str], resamples: int = RESAMPLES
) -> tuple[float, float]:
    """A 95% percentile bootstrap interval of :func:`sd_ratio_p`'s ratio: the processes of each group resampled with
    replacement (the same draw for every case)."""
    import numpy as np

    a, b = _centred(first, ids), _centred(second, ids)
    rng = np.random.default_rng(SEED)
    ratios = []
    for _ in range(resamples):
        ra = a[:, rng.integers(0, a.shape[1], a.shape[1])]
        rb = b[:, rng.integers(0, b.shape[1], b.shape[1])]
        sa, sb = ra.std(axis=1, ddof=1), rb.std(axis=1, ddof=1)
        if (sa == 0).any() or (sb == 0).any():
            continue
        ratios.append(float(np.exp(np.mean(np.log(sb / sa)))))
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


def _centred(group: list[Process], ids: list[str]) -> Any:
    """Cases x processes: each process's median of a case relative to the group's median of it."""
    import numpy as np

    rows = []
    for i in ids:
        values = [median_of(p.cases[i]) for p in group]
        centre = statistics.median(values)
        rows.append([v / centre - 1 for v in values])
    return np.array(rows)


def first_variants(data: Path) -> list[str]:
    """The variant each command started with (the first line of each ``walls-K.txt``)."""
    return [path.read_text().split()[2] for path in sorted(data.glob("walls-*.txt"))]


def samples_per_case(processes: list[Process], ids: list[str]) -> float:
    return statistics.median(len(p.cases[i].latency_us.samples) for p in processes for i in ids)  # type: ignore[union-attr]


def trial_section(data: Path, variants: dict[str, list[Process]], predicted: dict[str, float]) -> list[str]:
    reuse, drawn = variants["reuse"], variants["shuffle20"]
    ids = heavy(reuse)
    rows = []
    totals = {"reuse": [0, 0.0], "shuffle20": [0, 0.0]}
    shares: dict[str, dict[str, float]] = {"reuse": {}, "shuffle20": {}}
    for i in ids:
        cells = []
        for name, ps in (("reuse", reuse), ("shuffle20", drawn)):
            medians = [median_of(p.cases[i]) for p in ps]
            first = spread(medians[:FIVE]) <= TARGET
            share = share_within(medians)
            shares[name][i] = share
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
    low, high = sd_ratio_ci(reuse, drawn, ids)
    expected = {name: share for name, (_, share) in totals.items()}
    foreseen = [i for i in ids if predicted.get(i, 0.0) >= 0.9]
    missed = [i for i in foreseen if shares["shuffle20"][i] < 0.5]
    gained = [i for i in ids if shares["shuffle20"][i] >= shares["reuse"][i] + 0.2]
    lost = [i for i in ids if shares["shuffle20"][i] <= shares["reuse"][i] - 0.2]
    starts = first_variants(data)
    if high < 1:
        verdict = "narrower"
    elif low > 1:
        verdict = "wider"
    else:
        verdict = "not shown to differ from the `reuse` ones'"
    out = [
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
        "| processes | n | expected within 0.5% over every five | within 0.5% over the first five |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | {len(variants[name])} | {share:.1f}/{len(ids)} | {first}/{len(ids)} |"
            for name, (first, share) in totals.items()
        ),
        "",
        f"Over the {len(ids)} cases the `shuffle20` processes' standard deviation is {ratio:.2f} times the `reuse` "
        "ones' (geometric mean of the per-case ratios, each group's medians taken about its own median; 95% "
        f"bootstrap interval {low:.2f}–{high:.2f}, the processes resampled {RESAMPLES:,} times; the labels shuffled "
        f"between the {len(reuse) + len(drawn)} processes {PERMUTATIONS:,} times, the same shuffle for every case: "
        f"{hits:,} reached a ratio as far from 1, p = {p:.3f}): {verdict}. Fives within 0.5% rose by 20 points or "
        f"more for {', '.join(gained) or 'none'}, and fell as much for {', '.join(lost) or 'none'}.",
        "",
        f"Of the {len(foreseen)} cases the prediction put at 90% or more, {len(missed)} came out under 50%"
        + (f" ({', '.join(missed)})" if missed else "")
        + (
            ": for those, this pad and emptying the cache did not average the spread between processes out, so "
            "something other than the placements it draws differs between processes. It does not rule placement out "
            "as a cause: a pad may not reproduce the placements that matter."
            if missed
            else "."
        ),
        "",
        f"Two things besides the placement differ: `shuffle20` took 20 rounds and more samples (median "
        f"{samples_per_case(drawn, ids):.0f} per case against {samples_per_case(reuse, ids):.0f}), which favours it; "
        f"twenty rounds alone did not narrow the spread (`bench/reports/h200-truth.md`, section 4). The commands "
        + (
            f"all started with a `{starts[0]}` process, so the processes that ran right after a gap between commands "
            f"were all `{starts[0]}` ones."
            if len(set(starts)) == 1
            else f"started with {', '.join(f'`{v}`' for v in starts)}."
        ),
        "",
    ]
    if expected["shuffle20"] <= expected["reuse"]:
        out += ["The profiler keeps taking its rounds' tensors from the allocator.", ""]
    return out


def sd_ratio_p(
    first: list[Process], second: list[Process], ids: list[str], permutations: int = PERMUTATIONS
) -> tuple[float, int, float]:
    """How much wider ``second``'s process medians spread than ``first``'s over ``ids``: the geometric mean of the
    per-case ratios of standard deviations, and a permutation test of it (two-sided, on log scale). Each group's
    medians are taken about the group's own median, so a shift in level between the groups is not read as spread;
    one shuffle of the labels serves every case, so cases that move together are not counted as independent."""
    import numpy as np

    centred = np.concatenate([_centred(first, ids), _centred(second, ids)], axis=1)
    n = len(first)

    def log_ratio(order: Any) -> float:
        taken = centred[:, order]
        return float(np.mean(np.log(taken[:, n:].std(axis=1, ddof=1) / taken[:, :n].std(axis=1, ddof=1))))

    order = np.arange(len(first) + len(second))
    observed = log_ratio(order)
    rng = np.random.default_rng(SEED)
    hits = int(sum(abs(log_ratio(rng.permutation(order))) >= abs(observed) - 1e-12 for _ in range(permutations)))
    return math.exp(observed), hits, (hits + 1) / (permutations + 1)


def process_start_s(data: Path) -> float:
    """The median time a process spent outside profiling (start, imports, CUDA context, the compile cache read):
    the time between two processes' ends in a command (``walls-K.txt``) less what the second's log says it
    profiled, each command's first process left out (it also calibrates and compiles)."""
    gaps = []
    for walls in sorted(data.glob("walls-*.txt")):
        ends = [datetime.fromisoformat(line.split(" at ")[1].strip()) for line in walls.read_text().splitlines()]
        profiled: dict[str, float] = {}
        order: list[str] = []
        for line in (data / walls.name.replace("walls", "log")).read_text().splitlines():
            if " profiled in " in line:
                stem = line.split(":")[0]
                if stem not in profiled:
                    order.append(stem)
                profiled[stem] = profiled.get(stem, 0.0) + float(line.split(" profiled in ")[1].split()[0])
        assert len(order) == len(ends), walls
        for k in range(1, len(ends)):
            gaps.append((ends[k] - ends[k - 1]).total_seconds() - profiled[order[k]])
    return statistics.median(gaps)


def pooled_section(runs: Path, data: Path) -> list[str]:
    commands = [load_runs(runs / "a"), load_runs(runs / "b")]
    ids = heavy([p for ps in commands for p in ps])
    shares = {k: pooled_shares(commands, ids, k) for k in POOLED}
    expected = {k: sum(v.values()) for k, v in shares.items()}
    one, most = POOLED[0], POOLED[-1]
    moved = [i for i in ids if shares[most][i] >= shares[one][i] + 0.2]
    under = [i for i in ids if shares[most][i] < 0.5]
    n_runs = {k: len(pooled_runs(commands, k)) for k in POOLED}
    start = process_start_s(data)
    return [
        "## 3. A run pooling the rounds of several processes",
        "",
        f"A level a process carries averages over processes, not rounds. Simulated from the committed runs of the "
        f"profiler as it is (`{shown(runs)}`, two commands of {len(commands[0])} and {len(commands[1])} processes of "
        "both suites, in the order they ran): a run of k processes next to each other in one command, each giving "
        "its first 10/k rounds, its value the median of those rounds' samples (as the profiler takes a case's "
        "median; k = 1 is the profiler's own reading). Cases ≥ 100 µs, expected within 0.5% over every five runs:",
        "",
        "| processes per run | runs | fives | expected within 0.5% |",
        "|---:|---:|---:|---:|",
        *(f"| {k} | {n_runs[k]} | {math.comb(n_runs[k], FIVE)} | {expected[k]:.1f}/{len(ids)} |" for k in POOLED),
        "",
        f"Runs pooling {most} processes read {expected[most]:.1f} of {len(ids)} cases within 0.5%, against "
        f"{expected[one]:.1f} for one process per run: fives within 0.5% rose by 20 points or more for "
        f"{', '.join(moved) or 'none'}; "
        f"{', '.join(under) or 'none'} stay under half. "
        + (
            f"It leaves the target unmet while each run would start {most} processes, about {start:.0f} s each on the "
            "H200 outside profiling (the median in section 2's commands, from their logs): not taken up."
            if under
            else "It would meet the target."
        ),
        "",
    ]


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
    pooled_lines = pooled_section(runs, data)
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
        *trial_section(data, variants, predicted),
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
