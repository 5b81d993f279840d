"""The level a process shares, tried against the host's CPUs and the CUDA stream; a stream per round over both suites.

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
    load_runs,
    median_of,
    pct,
    share_within,
    spread,
)
from profiler_core.documents import load_result  # noqa: E402

PERMUTATIONS = 10_000
SEED = 20261203


def load_labelled(folder: Path) -> dict[str, list[Process]]:
    """``h200_redraw`` processes by label (``<label>-<pid>.json.gz``; labels may hold dashes), in the order they ran."""
    out: dict[str, list[Process]] = {}
    found = []
    for path in folder.glob("*.json.gz"):
        label, pid = path.name.removesuffix(".json.gz").rsplit("-", 1)
        doc = load_result(path)
        found.append((doc.run.created_at, label, Process(f"{label}-{pid}", {c.id: c for c in doc.cases}, {})))
    for _, label, process in sorted(found, key=lambda f: f[0]):
        out.setdefault(label, []).append(process)
    return out


def shared_sd(processes: list[Process]) -> float:
    """The standard deviation of the processes' shared level (the median offset of the SHARED cases)."""
    return statistics.stdev(_process_levels(processes).values())


def variance_ratio_p(a: list[Process], b: list[Process], seed: int = SEED) -> float:
    """One-sided permutation p-value for the shared level varying less across ``b``'s processes than ``a``'s: the
    labels shuffled over the pooled processes, ``PERMUTATIONS`` times; each side's level centred on its own median.
    """
    observed = shared_sd(a) / shared_sd(b)
    pooled = a + b
    rng = random.Random(seed)
    hits = 0
    for _ in range(PERMUTATIONS):
        order = rng.sample(pooled, len(pooled))
        if shared_sd(order[: len(a)]) / shared_sd(order[len(a) :]) >= observed:
            hits += 1
    return (hits + 1) / (PERMUTATIONS + 1)


def mean_pairwise_r(processes: list[Process]) -> float:
    """Mean over the SHARED cases of each one's correlation with the mean of the others, across ``processes``."""
    return statistics.fmean(_shared_r(processes, i) for i in SHARED)


def ab_section(variants: dict[str, list[Process]]) -> list[str]:
    reuse, stream = variants["reuse"], variants["stream"]
    p = variance_ratio_p(reuse, stream)
    out = [
        "## 1. The level follows the stream",
        "",
        f"One lease, {len(reuse)} + {len(stream)} processes alternating (`reuse`: the profiler as it is, every round "
        "on the process's current stream; `stream`: each round's build, warm-up and timing on a new stream from "
        "PyTorch's pool). Per case: the process medians' standard deviation and range, the share of five-process "
        "subsets within 0.5%, and the median range of a process's ten round medians.",
        "",
        "| case | µs | sd, reuse | sd, stream | range, reuse | range, stream | fives within 0.5%, reuse | "
        "fives, stream | rounds' range in a process, reuse | same, stream |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i in sorted(reuse[0].cases):
        cells = []
        centre = statistics.median(median_of(q.cases[i]) for q in reuse + stream)
        m = {v: [median_of(q.cases[i]) for q in variants[v]] for v in ("reuse", "stream")}
        cells += [pct(statistics.stdev(m[v]) / centre) for v in ("reuse", "stream")]
        cells += [pct(spread(m[v])) for v in ("reuse", "stream")]
        cells += [f"{share_within(m[v]):.0%}" for v in ("reuse", "stream")]
        cells += [pct(statistics.median(spread(_rounds(q.cases[i])) for q in variants[v])) for v in ("reuse", "stream")]
        out.append(f"| {i} | {centre:,.1f} | " + " | ".join(cells) + " |")
    out += [
        "",
        f"The shared level (each process's median offset over {', '.join(SHARED)}) has a standard deviation of "
        f"{pct(shared_sd(reuse))} across the `reuse` processes and {pct(shared_sd(stream))} across the `stream` "
        f"ones (permutation test of the ratio, {PERMUTATIONS:,} shuffles: p = {p:.4f}). The four cases' mean "
        f"correlation with each other's level falls from {mean_pairwise_r(reuse):+.2f} to "
        f"{mean_pairwise_r(stream):+.2f}. The rounds within a process spread wider with a stream each: the level "
        "moved from the process into the round, where the pooled median averages it over ten rounds. What a stream "
        "carries that sets the level (the hardware queue it is mapped to, or something the driver keeps per stream) "
        "is not measured here. hd256[efficient], whose builds land on levels, and hd256[flash] stay as wide.",
        "",
    ]
    return out


def pin_section(variants: dict[str, list[Process]], topology: str) -> list[str]:
    host = [line.strip() for line in topology.splitlines() if line.startswith(("CPU(s)", "Socket", "NUMA node(s)"))]
    out = [
        "## 2. Where the process runs on the host",
        "",
        f"The host: {'; '.join(' '.join(h.split()) for h in host)}; the GPU's CPU affinity is all of them "
        "(`nvidia-smi topo -m`), so there is no socket to choose. Processes in turn pinned to the first two CPUs, "
        "the last two, and not pinned:",
        "",
        "| processes | n | shared level: sd | mean correlation of the four |",
        "|---|---:|---:|---:|",
    ]
    for label in ("pin-lo", "pin-hi", "reuse"):
        ps = variants[label]
        out.append(f"| {label} | {len(ps)} | {pct(shared_sd(ps))} | {mean_pairwise_r(ps):+.2f} |")
    out += [
        "",
        "Pinned or not, the four cases move together as before: the CPUs a process runs on do not set the level.",
        "",
    ]
    return out


def runs_section(runs: list[Process], before: dict[str, list[Process]]) -> list[str]:
    commands = {"stream per round (785d8bc)": runs, **{f"as it is ({k})": v for k, v in before.items()}}
    cases = heavy(runs)
    out = [
        "## 3. A stream per round in the profiler, both suites",
        "",
        f"The runner with a stream per round (785d8bc) on another H200: {len(runs)} processes of both suites, "
        "do_bench in the same processes; beside it the two commands of `bench/reports/h200-rounds.md` (one stream, "
        "a third GPU). Cases ≥ 100 µs within 0.5% over the first five processes and over every five:",
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
            f"({min(counts)}–{max(counts)}) | {mean_pairwise_r(ps):+.2f} |"
        )
    shares = {
        name: {i: share_within([median_of(p.cases[i]) for p in ps]) for i in cases} for name, ps in commands.items()
    }
    old = {i: statistics.fmean(shares[n][i] for n in shares if n.startswith("as it is")) for i in cases}
    new = shares["stream per round (785d8bc)"]
    worse = sorted((i for i in cases if new[i] < old[i] - 0.25), key=lambda i: new[i] - old[i])
    better = sorted((i for i in cases if new[i] > old[i] + 0.25), key=lambda i: old[i] - new[i])

    def listed(ids: list[str]) -> str:
        return ", ".join(f"{i} ({old[i]:.0%} → {new[i]:.0%})" for i in ids) or "none"

    dobench = {
        name: statistics.median(
            spread([p.dobench[i] for p in ps[:8]]) for i in worse if all(i in p.dobench for p in ps)
        )
        for name, ps in commands.items()
    }
    tied = {i: _shared_r(runs, i) for i in SHARED}
    out += [
        "",
        f"Share of the fives within 0.5%, as it is (mean of the two commands) → with a stream per round. Better: "
        f"{listed(better)}. Worse: {listed(worse)}.",
        "",
        "do_bench (its own flush and one stream, in the same processes) spread the worse cases "
        f"{', '.join(f'{pct(v)} ({k})' for k, v in dobench.items())} over eight processes (median over those "
        "cases): no wider on this GPU than on the earlier one, so the GPU does not account for the change by that "
        "measure. The shared cases' correlation with the others' level in these processes: "
        f"{', '.join(f'{i} {r:+.2f}' for i, r in tied.items())}; in section 1 a stream per round took it to about "
        "zero. A stream per round narrowed naive-bwd here as there, but over both suites it did not bring more "
        "cases within 0.5%: fewer. Each runner ran in one lease on one GPU, and the two suites were never timed "
        "both ways in one lease, so the runner keeps every round on the process's stream until that is done.",
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

    def shown(p: Path) -> str:
        try:
            return p.resolve().relative_to(ROOT).as_posix()
        except ValueError:
            return p.as_posix()

    variants = load_labelled(data / "stream")
    pins = load_labelled(data / "pin")
    gpus = ", ".join(
        f"{k}: `{v['gpu']}` ({v['from'][11:16]}–{v['to'][11:16]} UTC)" for k, v in provenance["leases"].items()
    )
    lines = [
        "# The level a process shares: the host's CPUs, the CUDA stream, and a stream per round",
        "",
        f"From two leases on {provenance['date']} (raw data in `{shown(data)}`, recomputed by this report's script; "
        f"the profiler at {provenance['commit']}). GPUs: {gpus}. Software: {versions}; driver "
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
    lines += runs_section(load_runs(data / "runs"), {k: load_runs(before / k) for k in ("a", "b")})
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
