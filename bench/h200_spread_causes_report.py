"""What moves a case's level from process to process on the H200: the GPU's state, the GPU itself, and placement.

    python bench/h200_spread_causes_report.py --data bench/reports/data/h200-spread-causes-2026-12-03 \
        --out bench/reports/h200-spread-causes.md

Reads three experiments' raw data (gathered by ``bench/h200_truth.sh settle``, ``workspace`` and ``redraw``) and
writes the report, with a plot beside it (same name, ``.png``):

  settle/<lease>/   bench/h200_settle.py: the validation set profiled hot, settled and cold after a matmul load,
                    NVML every 0.1 s (bench/nvml_log.py)
  workspace/        bench/h200_workspace.py: rounds of one workload against rounds of workloads rebuilt in fresh
                    memory, with the allocations of each
  redraw/           bench/h200_redraw.py: the validation set profiled with each round's memory drawn afresh (as
                    shipped) and with rounds reusing the allocator's cached blocks
"""

from __future__ import annotations

import argparse
import csv
import gzip
import itertools
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEAVY_US = 100.0  # the spread target's cases: 100 µs and more
TARGET = 0.5  # per cent: the spread target
POWER_CAP_BIT = 0x4  # NVML's sw_power_cap clock-event reason
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Process:
    """One profile process: its result document's case medians and what surrounded it."""

    name: str
    condition: str
    gpu: str
    created: str
    medians: dict[str, float]
    times: dict[str, Any]


def spread(values: list[float]) -> float:
    """(max - min) / median, in per cent."""
    return (max(values) - min(values)) / statistics.median(values) * 100.0


def load_processes(folder: Path) -> list[Process]:
    """The result documents of a folder (``<condition>-<pid>.json.gz``), in the order they were made."""
    out = []
    for path in sorted(folder.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        name = path.name.removesuffix(".json.gz")
        times_path = folder / f"{name}.times.json"
        medians = {
            c["id"]: statistics.median(c["latency_us"]["samples"])
            for c in doc["cases"]
            if c.get("latency_us") and c["latency_us"].get("samples")
        }
        out.append(
            Process(
                name=name,
                condition=name.split("-")[0],
                gpu=doc["environment"]["device"]["uuid"],
                created=doc["run"]["created_at"],
                medians=medians,
                times=json.loads(times_path.read_text()) if times_path.exists() else {},
            )
        )
    return sorted(out, key=lambda p: p.created)


def heavy_cases(processes: list[Process]) -> list[str]:
    """Cases every process timed whose median over the processes is at least HEAVY_US, in suite order."""
    first = processes[0].medians
    return [
        c
        for c in first
        if all(c in p.medians for p in processes) and statistics.median(p.medians[c] for p in processes) >= HEAVY_US
    ]


def common_offsets(processes: list[Process], cases: list[str]) -> dict[str, float]:
    """Per process, the median over the cases of (its median / the median over the processes - 1), per cent: the level
    its cases share."""
    centre = {c: statistics.median(p.medians[c] for p in processes) for c in cases}
    return {p.name: statistics.median(p.medians[c] / centre[c] * 100.0 - 100.0 for c in cases) for p in processes}


def case_spreads(processes: list[Process], cases: list[str], offsets: dict[str, float] | None = None) -> list[float]:
    """Each case's spread across the processes; with ``offsets``, after dividing out each process's shared level."""
    out = []
    for c in cases:
        values = [p.medians[c] / (1 + (offsets[p.name] / 100.0 if offsets else 0.0)) for p in processes]
        out.append(spread(values))
    return out


def share_of_fives_within(values: list[float]) -> float:
    """The share of the five-process subsets whose spread is within TARGET (the target's five processes)."""
    subsets = list(itertools.combinations(values, 5)) if len(values) >= 5 else [tuple(values)]
    return sum(1 for s in subsets if spread(list(s)) <= TARGET) / len(subsets)


def read_nvml(folder: Path) -> list[tuple[float, float, float, float, int]]:
    """(time, SM MHz, power W, temperature °C, clock-event reasons) rows of bench/nvml_log.py's CSVs."""
    rows = []
    for path in sorted(folder.glob("nvml-*.csv*")):
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        for r in csv.reader(text.splitlines()):
            if r and r[0][:1].isdigit():
                rows.append((float(r[0]), float(r[1]), float(r[2]), float(r[3]), int(r[5])))
    return rows


def during(rows: list[tuple[float, float, float, float, int]], times: dict[str, Any]) -> dict[str, float] | None:
    """NVML over a process's profiling: mean temperature and power, lowest SM clock, share of readings power-capped."""
    inside = [r for r in rows if times.get("profile_start", 0) <= r[0] <= times.get("profile_end", 0)]
    if not inside:
        return None
    return {
        "temp": statistics.fmean(r[3] for r in inside),
        "temp_max": max(r[3] for r in inside),
        "power": statistics.fmean(r[2] for r in inside),
        "mhz_min": min(r[1] for r in inside),
        "capped": sum(1 for r in inside if r[4] & POWER_CAP_BIT) / len(inside),
    }


def same_address_pairs(rounds: list[dict[str, Any]]) -> tuple[float, float] | None:
    """The widest-apart pair of rebuilt rounds whose step allocated at the very same addresses and sizes."""
    best: tuple[float, float] | None = None
    for a, b in itertools.combinations(rounds, 2):
        if a["step"] and a["step"] == b["step"] and a["built"] == b["built"]:
            pair = (min(a["us"], b["us"]), max(a["us"], b["us"]))
            if best is None or pair[1] - pair[0] > best[1] - best[0]:
                best = pair
    return best


def short(uuid: str) -> str:
    return uuid.split("-")[0]


def settle_section(data: Path) -> tuple[list[str], list[Process]]:
    out = ["## 1. The GPU's state when timing starts", ""]
    leases = sorted(p for p in (data / "settle").iterdir() if p.is_dir())
    everything: list[Process] = []
    table = [
        "| lease | GPU | condition | processes | cases ≥ 100 µs within 0.5% | median case spread | "
        "range of the shared level | mean °C while profiling | lowest NVML SM clock | readings power-capped | wait |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    seen_by: dict[str, dict[str, float]] = {}
    by_condition: dict[str, list[float]] = {}
    for lease in leases:
        processes = load_processes(lease)
        everything += processes
        nvml = read_nvml(lease)
        cases = heavy_cases(processes)
        for p in processes:
            summary = during(nvml, p.times)
            if summary:
                seen_by[p.name] = summary
        for condition in ("hot", "settled", "cold"):
            group = [p for p in processes if p.condition == condition]
            if not group:
                continue
            spreads = case_spreads(group, cases)
            by_condition.setdefault(condition, []).append(statistics.median(spreads))
            offsets = common_offsets(group, cases)
            seen = [seen_by[p.name] for p in group if p.name in seen_by]
            waits = [p.times["settle"]["waited_s"] for p in group if "settle" in p.times]
            table.append(
                f"| {lease.name} | `{short(group[0].gpu)}` | {condition} | {len(group)} "
                f"| {sum(1 for s in spreads if s <= TARGET)}/{len(cases)} | {statistics.median(spreads):.2f}% "
                f"| {max(offsets.values()) - min(offsets.values()):.2f}% "
                f"| {statistics.fmean(s['temp'] for s in seen):.1f} (max {max(s['temp_max'] for s in seen):.0f}) "
                f"| {min(s['mhz_min'] for s in seen):,.0f} MHz | {statistics.fmean(s['capped'] for s in seen):.0%} "
                f"| {', '.join(f'{w:.1f} s' for w in waits) or '—'} |"
            )
    out.append(
        "In the truth report's five-process runs the validation set was profiled right after the example suite's "
        "do_bench pass, its GPU at the power cap (46–53 °C at its start). Here each process first loads the GPU "
        "with bf16 matmuls of 8192 for 10 s, then profiles the validation set: at once (`hot`), after idling until "
        "the temperature has fallen no more than 1 °C in 5 s (`settled`), or after 60 s idle (`cold`); the three "
        "rotate, so time does not favour one. NVML was read every 0.1 s by a process of its own."
    )
    out.append("")
    out += table
    out.append("")
    hot_mhz = min(seen_by[p.name]["mhz_min"] for p in everything if p.condition == "hot" and p.name in seen_by)
    hot_spread = max(by_condition.get("hot", [0.0]))
    others = [v for c, vs in by_condition.items() if c != "hot" for v in vs]
    verdict = (
        "did not spread wider than the settled or cold ones: the state the GPU starts in, hot or cooled, is not "
        "what sets a process's level, and the profiler does not wait before timing."
        if others and hot_spread <= max(others)
        else "spread wider than the settled or cold ones."
    )
    out.append(
        f"The hot processes started their profile power-capped, NVML's SM clock as low as {hot_mhz:,.0f} MHz in "
        f"their first seconds, and their cases {verdict}"
    )
    out.append("")
    return out, everything


def gpu_section(processes: list[Process]) -> list[str]:
    gpus = sorted({p.gpu for p in processes})
    if len(gpus) < 2:
        return []
    a, b = ([p for p in processes if p.gpu == g] for g in gpus[:2])
    cases = [c for c in heavy_cases(processes)]
    ratios = [
        (c, statistics.median(p.medians[c] for p in a) / statistics.median(p.medians[c] for p in b) * 100.0 - 100.0)
        for c in cases
    ]
    out = ["## 2. Two GPUs under one testbed key", ""]
    out.append(
        f"The two leases of section 1 were lent two different H200s (`{short(gpus[0])}`, `{short(gpus[1])}`): the same "
        "model, driver and software, so the same testbed key. Each case's median over its GPU's processes, "
        f"`{short(gpus[0])}` against `{short(gpus[1])}`:"
    )
    out.append("")
    out.append("| case | " + " | ".join(c for c, _ in ratios) + " |")
    out.append("|---|" + "---:|" * len(ratios))
    out.append("| Δ | " + " | ".join(f"{r:+.2f}%" for _, r in ratios) + " |")
    out.append("")
    lo, hi = min(r for _, r in ratios), max(r for _, r in ratios)
    out.append(
        f"The two GPUs read {lo:+.2f}% to {hi:+.2f}% apart, beyond the spread of either one's processes for most "
        "cases: a baseline profiled on one GPU and a candidate on another carry that difference. A comparison "
        "therefore says when its two runs were timed on different GPUs (their NVML UUIDs differ), and a verdict "
        "that must not carry it comes from a paired run, both sides on one GPU."
    )
    out.append("")
    return out


def workspace_section(data: Path) -> tuple[list[str], dict[str, Any]]:
    runs = {p.stem: json.loads(p.read_text()) for p in sorted((data / "workspace").glob("*.json"))}
    out = ["## 3. Where the tensors land", ""]
    out.append(
        "`bench/h200_workspace.py`, one process per file, on the GPU of section 1's second lease: per case, rounds "
        "of one workload back to back (`same`: time alone varies), then as many rounds of the workload built again "
        "after the allocator's cache was emptied and a pad of random size (0–62 MiB, 2 MiB steps) allocated "
        "(`rebuilt`: time and placement). Each round is the median of 100–150 iterations timed as the profiler "
        "times them. Ranges as (max − min) / median of the round medians."
    )
    out.append("")
    out.append(
        "| file | case | µs | rounds | range, same | range, rebuilt | rebuilt rounds at identical addresses, "
        "widest pair |"
    )
    out.append("|---|---|---:|---:|---:|---:|---|")
    merged: dict[str, Any] = {}
    for stem, run in runs.items():
        for key, r in run.items():
            if "error" in r:
                continue
            rebuilt = [x["us"] for x in r["rebuilt"]]
            pair = same_address_pairs(r["rebuilt"])
            out.append(
                f"| {stem} | {key} | {statistics.median(r['same']):,.1f} | {len(r['same'])} "
                f"| {spread(r['same']):.2f}% | {spread(rebuilt):.2f}% "
                f"| {f'{pair[0]:.1f} and {pair[1]:.1f} µs' if pair else '—'} |"
            )
            merged[f"{stem}:{key}"] = r
    out.append("")
    wider = [k for k, r in merged.items() if spread([x["us"] for x in r["rebuilt"]]) > 2 * spread(r["same"])]
    out.append(
        f"In {len(wider)} of {len(merged)} case runs the rebuilt rounds range more than twice as widely as the same "
        "workload's. Rounds rebuilt at the very same virtual addresses (the allocator's history names every "
        "block) read levels apart (last column): what differs is the physical memory behind those addresses, "
        "which the driver chooses. PyTorch's caching allocator hands every round of a case the blocks the last "
        "one freed, so until now a process kept one placement for all its rounds, and that placement was its "
        "level. The profiler now gives the cached blocks back to the driver before it builds each round's "
        "workload (`profiler_core.measure.runner.release_cached_memory`): each round draws a placement of its "
        "own and the pooled median averages over them, as layout randomisation does for CPU benchmarks."
    )
    out.append("")
    return out, merged


def redraw_section(data: Path) -> list[str]:
    processes = load_processes(data / "redraw")
    cases = heavy_cases(processes)
    out = ["## 4. Rounds in fresh memory against rounds in reused memory", ""]
    gpus = sorted({short(p.gpu) for p in processes})
    out.append(
        f"`bench/h200_redraw.py`, {len(processes)} processes alternating on one GPU (`{', '.join(gpus)}`, a third "
        "lease): the profiler as shipped (`redraw`) and with its release left out (`reuse`). Spread over the "
        "variant's processes; beside it, after dividing out each process's shared level (the median offset of "
        "its cases), and the share of five-process subsets within 0.5%."
    )
    out.append("")
    header = "| case | µs |"
    rule = "|---|---:|"
    rows: dict[str, list[str]] = {c: [] for c in cases}
    summary = []
    for variant in ("redraw", "reuse"):
        group = [p for p in processes if p.condition == variant]
        offsets = common_offsets(group, cases)
        raw = case_spreads(group, cases)
        residual = case_spreads(group, cases, offsets)
        header += f" {variant}: spread | after the shared level | fives within 0.5% |"
        rule += "---:|---:|---:|"
        for c, s, r in zip(cases, raw, residual, strict=True):
            rows[c].append(f" {s:.2f}% | {r:.2f}% | {share_of_fives_within([p.medians[c] for p in group]):.0%} |")
        summary.append(
            f"{variant}: {sum(1 for s in raw if s <= TARGET)}/{len(cases)} cases within 0.5% over its "
            f"{len(group)} processes, {sum(1 for s in residual if s <= TARGET)}/{len(cases)} after the shared "
            f"level, whose range was {max(offsets.values()) - min(offsets.values()):.2f}%"
        )
    out.append(header)
    out.append(rule)
    for c in cases:
        centre = statistics.median(p.medians[c] for p in processes)
        out.append(f"| {c} | {centre:,.1f} |" + "".join(rows[c]))
    out.append("")
    out.append("; ".join(summary) + ".")
    out.append("")
    redraw = [p for p in processes if p.condition == "redraw"]
    reuse = [p for p in processes if p.condition == "reuse"]
    pairs = {c: (spread([p.medians[c] for p in redraw]), spread([p.medians[c] for p in reuse])) for c in cases}
    widest = max(cases, key=lambda c: pairs[c][1] - pairs[c][0])
    rest = [c for c in cases if c != widest]
    out.append(
        f"Fresh memory each round narrowed the case whose kernel switches between two levels with its placement, "
        f"{widest}, from {pairs[widest][1]:.2f}% to {pairs[widest][0]:.2f}%. Of the other {len(rest)}, "
        f"{sum(1 for c in rest if pairs[c][0] < pairs[c][1])} spread less with it and "
        f"{sum(1 for c in rest if pairs[c][0] > pairs[c][1])} more, all between "
        f"{min(min(pairs[c]) for c in rest):.2f}% and {max(max(pairs[c]) for c in rest):.2f}%: six processes a "
        "side do not tell the two apart there. The profiler keeps the fresh draw: a placement fixed for a "
        "process is a bias that each process carries whole, where draws averaged over rounds are noise its "
        "rounds share out. What is left is a level each process's cases share, which moves with the time it ran "
        "(section 1: not the GPU's temperature or power state at the start), and some cases' own process-to-"
        "process spread of 0.5–0.8%. The clocks were not locked: the lent GPU's settings stay as found."
    )
    out.append("")
    return out


def plot(workspace: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(workspace, key=lambda k: spread([x["us"] for x in workspace[k]["rebuilt"]]))
    fig, ax = plt.subplots(figsize=(12, 0.32 * len(keys) + 1.6))
    for y, k in enumerate(keys):
        r = workspace[k]
        centre = statistics.median(r["same"])
        ax.scatter([(s / centre - 1) * 100 for s in r["same"]], [y + 0.15] * len(r["same"]), s=10, color="#1f77b4")
        rebuilt = [x["us"] for x in r["rebuilt"]]
        ax.scatter([(s / centre - 1) * 100 for s in rebuilt], [y - 0.15] * len(rebuilt), s=10, color="#d62728")
    ax.scatter([], [], s=10, color="#1f77b4", label="one workload, round after round")
    ax.scatter([], [], s=10, color="#d62728", label="rebuilt in fresh memory each round")
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([k.split(":", 1)[1] for k in keys], fontsize=7)
    ax.axvspan(-TARGET / 2, TARGET / 2, color="#2ca02c", alpha=0.12, label="±0.25%")
    ax.set_xlabel("round median / median of the same workload's rounds − 1 (%)")
    ax.set_title("Round medians on one H200: where the tensors land moves some kernels' levels")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(data: Path, png_name: str) -> tuple[str, dict[str, Any]]:
    provenance = json.loads((data / "provenance.json").read_text())
    versions = (data / "versions.txt").read_text().strip()
    try:
        shown = data.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        shown = data.as_posix()
    lines = [
        "# What moves a case's level between processes on the H200",
        "",
        f"From three leases on {provenance['date']} (raw data in `{shown}`, recomputed by this report's "
        f"script). Software: {versions}; driver {provenance['driver']}; clocks not locked.",
        "",
        "```bash",
        *provenance["commands"],
        "```",
        "",
    ]
    settle, processes = settle_section(data)
    workspace, merged = workspace_section(data)
    lines += settle + gpu_section(processes) + workspace + [f"![round medians]({png_name})", ""] + redraw_section(data)
    return "\n".join(lines), merged


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    png = args.out.with_suffix(".png")
    text, merged = render(args.data, png.name)
    args.out.write_text(text)
    plot(merged, png)
    print(f"wrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
