"""The level a process shares, against the host's CPUs, a stream per round and one non-default stream; a stream per
round over both suites.

    python bench/h200_stream_report.py --data bench/reports/data/h200-stream-2026-12-03 \
        --before bench/reports/data/h200-rounds-2026-12-03 --out bench/reports/h200-stream.md

``bench/reports/h200-rounds.md`` found four cases (SHARED) moving together from process to process, about ±0.5%, and
holding their level through a process's rounds. The raw data (``provenance.json`` lists the commands and GPUs):

  pin/       ``bench/h200_redraw.py`` processes in turn: the profiler as it is, pinned to the host's first two CPUs
             (``pin-lo``), to its last two (``pin-hi``), and not pinned (``reuse``); ``topo.txt``: the host's CPUs
  stream/    the same lease, processes alternating between the profiler as it is (``reuse``: every round on the
             process's current stream) and each round on a new stream from PyTorch's pool (``stream``)
  runs/      ``bench/h200_truth.sh runs`` on another H200 with a stream per round built into the runner (785d8bc):
             both suites, do_bench beside them; compared with the two commands of ``--before`` (the runner as it is)
  one-stream/ a third lease: processes alternating between the profiler as it is (``reuse``) and every round on one
             non-default stream for the whole process (``one-stream``)

Writes the report and a plot beside it (same name, ``.png``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.h200_rounds_report import (  # noqa: E402
    FIVE,
    SHARED,
    TARGET,
    Process,
    _process_levels,
    _rounds,
    _shared_r,
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

PERMUTATIONS = 10_000
NUMBERS = {2: "two", 3: "three", 4: "four"}
SEED = 20261203


def shared_levels(processes: list[Process]) -> list[float]:
    """Each process's shared level: the median offset of its SHARED cases from the processes' own medians."""
    return list(_process_levels(processes).values())


def shared_sd(processes: list[Process]) -> float:
    """The standard deviation of the processes' shared level."""
    return statistics.stdev(shared_levels(processes))


def variance_ratio_p(a: list[float], b: list[float], seed: int = SEED) -> tuple[int, float]:
    """One-sided permutation test that ``b`` varies less than ``a``: the deviations of each group from its own median
    are pooled and shuffled ``PERMUTATIONS`` times, so a difference in level between the groups does not count as
    spread. Returns the shuffles whose ratio sd(first) / sd(second) reached the observed one, and the p-value."""
    da = [x - statistics.median(a) for x in a]
    db = [x - statistics.median(b) for x in b]
    observed = statistics.stdev(da) / statistics.stdev(db)
    pooled = da + db
    rng = random.Random(seed)
    hits = 0
    for _ in range(PERMUTATIONS):
        order = rng.sample(pooled, len(pooled))
        if statistics.stdev(order[: len(da)]) / statistics.stdev(order[len(da) :]) >= observed:
            hits += 1
    return hits, (hits + 1) / (PERMUTATIONS + 1)


def mean_gap_p(a: list[float], b: list[float], seed: int = SEED) -> tuple[float, float]:
    """``mean(b) - mean(a)`` and its two-sided permutation p-value (the labels shuffled ``PERMUTATIONS`` times)."""
    observed = statistics.fmean(b) - statistics.fmean(a)
    pooled = a + b
    rng = random.Random(seed)
    hits = 0
    for _ in range(PERMUTATIONS):
        order = rng.sample(pooled, len(pooled))
        if abs(statistics.fmean(order[len(a) :]) - statistics.fmean(order[: len(a)])) >= abs(observed) - 1e-12:
            hits += 1
    return observed, (hits + 1) / (PERMUTATIONS + 1)


def mean_shared_r(processes: list[Process]) -> float:
    """Mean over the SHARED cases of each one's correlation with the mean of the other three, across ``processes``."""
    return statistics.fmean(_shared_r(processes, i) for i in SHARED)


def round_r(processes: list[Process]) -> tuple[float, int, int]:
    """Within each process, each SHARED case's round medians against the mean of the other three's (each round's
    medians relative to the case's own median in that process): the mean correlation, and how many of the
    case-process pairs are positive, of how many."""
    import numpy as np

    rs = []
    for p in processes:
        rel = {i: np.array(_rounds(p.cases[i])) / median_of(p.cases[i]) - 1.0 for i in SHARED}
        for i in SHARED:
            others = np.mean([rel[j] for j in SHARED if j != i], axis=0)
            rs.append(float(np.corrcoef(rel[i], others)[0, 1]))
    return statistics.fmean(rs), sum(r > 0 for r in rs), len(rs)


def changed(old: dict[str, float], new: dict[str, float], by: float = 0.25) -> tuple[list[str], list[str]]:
    """The cases whose share of fives within the target rose and fell by more than ``by``, largest change first."""
    better = sorted((i for i in new if new[i] > old[i] + by), key=lambda i: old[i] - new[i])
    worse = sorted((i for i in new if new[i] < old[i] - by), key=lambda i: new[i] - old[i])
    return better, worse


def ab_section(variants: dict[str, list[Process]]) -> list[str]:
    reuse, stream = variants["reuse"], variants["stream"]
    own = {v: shared_levels(variants[v]) for v in ("reuse", "stream")}  # each group about its own medians
    sd = {v: statistics.stdev(own[v]) for v in own}
    hits, p = variance_ratio_p(own["reuse"], own["stream"])
    out = [
        "## 1. A stream per round against the process's stream",
        "",
        f"One lease, {len(reuse)} + {len(stream)} processes alternating (`reuse`: the profiler as it is, every round "
        "on the process's current stream; `stream`: each round's build, warm-up and timing on a new stream from "
        "PyTorch's pool). Per case: the process medians' standard deviation and range, the share of five-process "
        "subsets within 0.5%, the median range of a process's ten round medians, and the `stream` processes' median "
        "against the `reuse` ones'.",
        "",
        "| case | µs | sd, reuse | sd, stream | range, reuse | range, stream | fives within 0.5%, reuse | "
        "fives, stream | rounds' range in a process, reuse | same, stream | stream / reuse |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i in sorted(reuse[0].cases):
        cells = []
        centre = statistics.median(median_of(q.cases[i]) for q in reuse + stream)
        m = {v: [median_of(q.cases[i]) for q in variants[v]] for v in ("reuse", "stream")}
        cells += [pct(statistics.stdev(m[v]) / centre) for v in ("reuse", "stream")]
        cells += [pct(spread(m[v])) for v in ("reuse", "stream")]
        cells += [f"{share_within(m[v]):.0%}" for v in ("reuse", "stream")]
        cells += [pct(statistics.median(spread(_rounds(q.cases[i])) for q in variants[v])) for v in ("reuse", "stream")]
        cells.append(pct(statistics.median(m["stream"]) / statistics.median(m["reuse"]) - 1, sign=True))
        out.append(f"| {i} | {centre:,.1f} | " + " | ".join(cells) + " |")
    pooled = shared_levels(reuse + stream)  # about all processes' medians
    low, high = pooled[: len(reuse)], pooled[len(reuse) :]
    below = sum(x < statistics.median(high) for x in low)
    r_round = {v: round_r(variants[v]) for v in ("reuse", "stream")}
    (rs, ns, ts), (ro, no, to) = r_round["stream"], r_round["reuse"]
    out += [
        "",
        f"The shared level (each process's median offset over {', '.join(SHARED)}) has a standard deviation of "
        f"{pct(sd['reuse'])} across the `reuse` processes and {pct(sd['stream'])} across the `stream` "
        f"ones (permutation test of the ratio, each group's deviations from its own median shuffled "
        f"{PERMUTATIONS:,} times: {hits} reached it, p = {p:.3f}). The four cases' mean correlation with the others' "
        f"level falls from {mean_shared_r(reuse):+.2f} to {mean_shared_r(stream):+.2f}.",
        "",
        "A stream per round does not remove a level so much as average it: the `reuse` processes sit on one of two "
        f"levels ({below} of {len(low)} below the median `stream` process, from {pct(min(low), sign=True)} to "
        f"{pct(max(low), sign=True)} about all processes' median), the `stream` ones between them "
        f"({pct(min(high), sign=True)} to {pct(max(high), sign=True)}), nearer the slow one, so every case reads "
        "slower with it (last column). That shift is about the size of the 0.5% target: switching would move the "
        "profiler's numbers.",
        "",
        "The rounds within a process spread wider with a stream each for three of the four (not hd256[cudnn]). "
        "Within a process the four cases still move together from round to round although each ran its round on a "
        f"stream of its own (mean correlation of a case's round medians with the other three's {rs:+.2f}, positive "
        f"in {ns} of {ts} case-processes; one stream {ro:+.2f}, {no} of {to}). So what sets the level is shared "
        "by streams that run at about the same time, not carried by a stream: it is something a stream per round "
        "changes. That variant changes three things at once: a non-default stream, a new one each round, and where "
        "the round's tensors land (PyTorch's allocator keeps freed blocks per stream). Section 4 takes the "
        "first alone. hd256[efficient], whose builds land on levels, and hd256[flash] stay as wide.",
        "",
    ]
    return out


def pin_section(variants: dict[str, list[Process]], topology: str) -> list[str]:
    host = [line.strip() for line in topology.splitlines() if line.startswith(("CPU(s)", "Socket", "NUMA node(s)"))]
    out = [
        "## 2. Where the process runs on the host",
        "",
        f"The host is a virtual machine; what it shows: {'; '.join(' '.join(h.split()) for h in host)}, and the "
        "GPU's CPU affinity is all of them (`nvidia-smi topo -m`). That is the guest's view: which physical cores "
        "or socket its vCPUs run on is not visible. Processes in turn pinned to the first two vCPUs, the last two, "
        "and not pinned:",
        "",
        "| processes | n | shared level: sd | mean correlation of the four |",
        "|---|---:|---:|---:|",
    ]
    for label in ("pin-lo", "pin-hi", "reuse"):
        ps = variants[label]
        out.append(f"| {label} | {len(ps)} | {pct(shared_sd(ps))} | {mean_shared_r(ps):+.2f} |")
    out += [
        "",
        "Pinned to two vCPUs at either end or not, the four cases move together as before: pinning showed no "
        "reduction (nine processes each, no test beyond that).",
        "",
    ]
    return out


def runs_section(runs: list[Process], before: dict[str, list[Process]], before_gpu: str) -> list[str]:
    commands = {"stream per round (785d8bc)": runs, **{f"as it is ({k})": v for k, v in before.items()}}
    cases = heavy(runs)
    out = [
        "## 3. A stream per round in the profiler, both suites",
        "",
        f"The runner with a stream per round (785d8bc) on another H200: {len(runs)} processes of both suites, "
        "do_bench in the same processes; beside it the two commands of `bench/reports/h200-rounds.md` (the runner "
        f"as it is, at dfc4555, which differs from 785d8bc's parent by refactoring only; GPU `{before_gpu}`). Cases "
        "≥ 100 µs within 0.5% over the first five processes and over every five:",
        "",
        "| runner | processes | first five | every five: median (range) | shared level's mean correlation |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, ps in commands.items():
        first = sum(spread([median_of(p.cases[i]) for p in ps[:FIVE]]) <= TARGET for i in cases)
        counts = [
            sum(spread([median_of(p.cases[i]) for p in five]) <= TARGET for i in cases)
            for five in itertools.combinations(ps, FIVE)
        ]
        out.append(
            f"| {name} | {len(ps)} | {first}/{len(cases)} | {statistics.median(counts):g} "
            f"({min(counts)}–{max(counts)}) | {mean_shared_r(ps):+.2f} |"
        )
    shares = {
        name: {i: share_within([median_of(p.cases[i]) for p in ps]) for i in cases} for name, ps in commands.items()
    }
    old = {i: statistics.fmean(shares[n][i] for n in shares if n.startswith("as it is")) for i in cases}
    new = shares["stream per round (785d8bc)"]
    better, worse = changed(old, new)

    def listed(ids: list[str]) -> str:
        return ", ".join(f"{i} ({old[i]:.0%} → {new[i]:.0%})" for i in ids) or "none"

    out += [
        "",
        f"Share of the fives within 0.5%, as it is (mean of the two commands) → with a stream per round. Better: "
        f"{listed(better)}. Worse: {listed(worse)}.",
        "",
    ]
    if worse:
        both = [i for i in worse if all(i in p.dobench for p in runs)]
        ours = {i: statistics.median(median_of(p.cases[i]) for p in runs) for i in worse}
        theirs = {i: statistics.median(p.dobench[i] for p in runs) for i in both}
        rows = [
            (
                p.name,
                statistics.median(median_of(p.cases[i]) / ours[i] - 1 for i in worse),
                statistics.median(p.dobench[i] / theirs[i] - 1 for i in both) if both else float("nan"),
            )
            for p in runs
        ]
        high = [r for r in rows if r[1] > 0.003]
        out += [
            "Each process's median offset over the worse cases, the profiler's and do_bench's in the same process "
            "(its own flush, one stream):",
            "",
            "| process | profiler | do_bench |",
            "|---|---:|---:|",
            *(f"| {n} | {pct(a, sign=True)} | {pct(b, sign=True)} |" for n, a, b in rows),
            "",
            f"{len(high)} of {len(runs)} processes ({', '.join(r[0] for r in high)}) read the worse cases more than "
            "0.3% slow where do_bench, timing the same cases in the same processes right after, did not: that points "
            "at the profiler's path with a stream per round rather than the GPU's state in those processes.",
            "",
        ]
    out += [
        "The runner keeps every round on the process's stream. Each round's build placed anew, over both suites in "
        "one lease, is `bench/reports/h200-placement.md`.",
        "",
    ]
    return out


def one_stream_section(variants: dict[str, list[Process]], stream_levels: list[float]) -> list[str]:
    """Section 4; ``stream_levels``: section 1's stream-per-round processes' shared levels (each about their own
    median)."""
    reuse, one = variants["reuse"], variants["one-stream"]
    own = {v: shared_levels(variants[v]) for v in ("reuse", "one-stream")}  # each group about its own medians
    hits, p = variance_ratio_p(own["reuse"], own["one-stream"])
    _, p_stream = variance_ratio_p(own["one-stream"], stream_levels)  # a stream per round varies less than this?
    pooled = shared_levels(reuse + one)  # about all the processes' medians
    gap, p_gap = mean_gap_p(pooled[: len(reuse)], pooled[len(reuse) :])
    out = [
        "## 4. One non-default stream for the whole process",
        "",
        f"A third lease, {len(reuse)} + {len(one)} processes alternating: `reuse` (the profiler as it is) and "
        "`one-stream` (every round on one stream from PyTorch's pool, the same for the whole process: a non-default "
        "stream, with no new stream per round and the allocator's blocks kept as they are), over the four cases "
        "and two forward ones. The last column compares the groups' means.",
        "",
        "| case | µs | sd, reuse | sd, one-stream | range, reuse | range, one-stream | fives within 0.5%, reuse | "
        "fives, one-stream | one-stream / reuse (means) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    shifts = {}
    for i in sorted(reuse[0].cases):
        m = {v: [median_of(q.cases[i]) for q in variants[v]] for v in ("reuse", "one-stream")}
        centre = statistics.median(m["reuse"] + m["one-stream"])
        shifts[i] = statistics.fmean(m["one-stream"]) / statistics.fmean(m["reuse"]) - 1
        cells = [pct(statistics.stdev(m[v]) / centre) for v in m]
        cells += [pct(spread(m[v])) for v in m]
        cells += [f"{share_within(m[v]):.0%}" for v in m]
        cells.append(pct(shifts[i], sign=True))
        out.append(f"| {i} | {centre:,.1f} | " + " | ".join(cells) + " |")
    sd = {v: statistics.stdev(own[v]) for v in own}
    four = [shifts[i] for i in SHARED]

    def listed(levels: list[float]) -> str:
        return ", ".join(pct(x, sign=True) for x in levels)

    out += [
        "",
        f"The shared level's standard deviation: {pct(sd['reuse'])} over the `reuse` processes, "
        f"{pct(sd['one-stream'])} over the `one-stream` ones (the same one-sided permutation test as section 1: "
        f"{hits:,} of {PERMUTATIONS:,} shuffles reached the ratio, p = {p:.3f}). "
        + (
            "One non-default stream for the whole process narrowed the shared level."
            if p < 0.05
            else "One non-default stream for the whole process was not shown to narrow it; with "
            f"{len(reuse)} processes a side a partial narrowing is not excluded."
        )
        + f" A stream per round's (section 1, {len(stream_levels)} processes, {pct(statistics.stdev(stream_levels))}) "
        + ("is narrower than `one-stream`'s" if p_stream < 0.05 else "is not shown to be narrower than `one-stream`'s")
        + f" (p = {p_stream:.3f}, across leases, GPUs and case lists).",
        "",
        f"Each process's level about all {len(pooled)} processes' medians, `reuse`: {listed(pooled[: len(reuse)])}; "
        f"`one-stream`: {listed(pooled[len(reuse) :])}. The four cases' means differ by {pct(min(four), sign=True)} "
        f"to {pct(max(four), sign=True)}; the shared level's by {pct(gap, sign=True)} (permutation test of the "
        f"difference of means, two-sided: p = {p_gap:.2f})" + (": no shift is shown." if p_gap >= 0.05 else "."),
        "",
    ]
    return out


def plot(variants: dict[str, list[Process]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["reuse", "stream"]
    fig, axes = plt.subplots(1, len(SHARED), figsize=(14, 4.2), sharey=True)
    for ax, i in zip(axes, SHARED, strict=True):
        centre = statistics.median(median_of(p.cases[i]) for v in labels for p in variants[v])
        for x, v in enumerate(labels):
            values = [(median_of(p.cases[i]) / centre - 1) * 100 for p in variants[v]]
            jitter = [x + (k % 5 - 2) * 0.04 for k in range(len(values))]
            ax.scatter(jitter, values, s=16, alpha=0.8, color=("#d62728" if v == "reuse" else "#1f77b4"))
        ax.axhspan(-TARGET * 50, TARGET * 50, color="#2ca02c", alpha=0.12)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(["one stream\n(the profiler)", "a stream\nper round"])
        ax.set_xlim(-0.6, len(labels) - 0.4)
        ax.set_title(i, fontsize=9)
    axes[0].set_ylabel("process median, % from all processes' median")
    fig.suptitle("One H200, processes alternating; green: ±0.25%", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(data: Path, before: Path, png_name: str) -> tuple[str, dict[str, list[Process]]]:
    provenance = json.loads((data / "provenance.json").read_text())
    versions = (data / "versions.txt").read_text().strip()

    variants = load_variants(data / "stream")
    pins = load_variants(data / "pin")
    leases = len(provenance["leases"])
    lines = [
        "# The level a process shares: the host's CPUs, a stream per round, a stream per round over both suites, one "
        "non-default stream",
        "",
        f"From {NUMBERS.get(leases, leases)} leases on {provenance['date']} (raw data in `{shown(data)}`, "
        "recomputed by this report's script; "
        f"the profiler at {provenance['commit']}). GPUs: {lease_gpus(provenance)}. Software: {versions}; driver "
        f"{provenance['driver']}; clocks not locked.",
        "",
        "```bash",
        *provenance["commands"],
        f"python bench/h200_stream_report.py --data {shown(data)} --before {shown(before)} "
        "--out bench/reports/h200-stream.md",
        "```",
        "",
    ]
    lines += ab_section(variants)
    lines += [f"![process medians, one stream against a stream per round]({png_name})", ""]
    lines += pin_section(pins, (data / "pin" / "topo.txt").read_text())
    before_gpu = json.loads((before / "provenance.json").read_text())["leases"]["a"]["gpu"]
    lines += runs_section(load_runs(data / "runs"), {k: load_runs(before / k) for k in ("a", "b")}, before_gpu)
    lines += one_stream_section(load_variants(data / "one-stream"), shared_levels(variants["stream"]))
    return "\n".join(lines), variants


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--before", type=Path, required=True, help="the rounds report's data (one stream)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    png = args.out.with_suffix(".png")
    text, variants = render(args.data, args.before, png.name)
    args.out.write_text(text)
    plot(variants, png)
    print(f"wrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
