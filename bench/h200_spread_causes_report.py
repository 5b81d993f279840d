"""What moves a case's level from process to process on the H200: the GPU's state, the GPU itself, and placement.

    python bench/h200_spread_causes_report.py --data bench/reports/data/h200-spread-causes-2026-12-03 \
        --out bench/reports/h200-spread-causes.md

Reads three experiments' raw data (gathered by ``bench/h200_truth.sh settle``, ``workspace`` and ``redraw``) and
writes the report, with a plot beside it (same name, ``.png``):

  settle/<lease>/   bench/h200_settle.py: the validation set profiled hot, settled and cold after a matmul load,
                    NVML every 0.1 s (bench/nvml_log.py)
  workspace/        bench/h200_workspace.py: rounds of one workload against rounds of workloads rebuilt in fresh
                    memory, with the allocations of each
  redraw/           bench/h200_redraw.py: the validation set profiled with each round's tensors fresh from the
                    driver and with them taken from the blocks the allocator holds (the profiler as it is)
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

from attnprof.core.analysis.compare import short_gpu_id
from attnprof.core.documents import load_result

HEAVY_US = 100.0  # the spread target's cases: 100 µs and more
TARGET_PCT = 0.5  # the spread target
POWER_CAP_BIT = 0x4  # NVML's sw_power_cap clock-event reason
TWO_LEVEL_CASE = "hd256[backend=efficient]"  # its kernel switches between two levels with its placement
TWO_LEVEL_SPLIT_US = 212.0  # between its levels on these GPUs (about 207 and 216 µs: section 3)
ROOT = Path(__file__).resolve().parents[1]
TRUTH_RUNS = ROOT / "bench" / "reports" / "data" / "h200-truth-2026-12-02-lead"  # the truth runs of 2026-12-02


@dataclass
class Process:
    """One profile process: its result document's case medians and what surrounded it."""

    name: str
    condition: str
    gpu: str
    created: str
    medians: dict[str, float]
    times: dict[str, Any]
    samples: dict[str, list[float]]


def spread(values: list[float]) -> float:
    """(max - min) / median, in per cent."""
    return (max(values) - min(values)) / statistics.median(values) * 100.0


def load_processes(folder: Path) -> list[Process]:
    """The result documents of a folder (``<condition>-<pid>.json.gz``), in the order they were made."""
    out = []
    for path in sorted(folder.glob("*.json.gz")):
        doc = load_result(path)
        name = path.name.removesuffix(".json.gz")
        times_path = folder / f"{name}.times.json"
        samples = {c.id: list(c.latency_us.samples) for c in doc.cases if c.latency_us and c.latency_us.samples}
        out.append(
            Process(
                name=name,
                condition=name.split("-")[0],
                gpu=doc.environment.device.uuid or "?",
                created=doc.run.created_at.isoformat(),
                medians={c: statistics.median(v) for c, v in samples.items()},
                times=json.loads(times_path.read_text()) if times_path.exists() else {},
                samples=samples,
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
    return sum(1 for s in subsets if spread(list(s)) <= TARGET_PCT) / len(subsets)


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
    """NVML over a process's profiling: mean and top temperature, mean power, lowest SM clock, and how long into the
    profile the GPU was still power-capped (the last capped reading, seconds after the profile's start; 0 if none)."""
    t0, t1 = times.get("profile_start", 0.0), times.get("profile_end", 0.0)
    inside = [r for r in rows if t0 <= r[0] <= t1]
    if not inside:
        return None
    capped = [r[0] - t0 for r in inside if r[4] & POWER_CAP_BIT]
    return {
        "temp_c": statistics.fmean(r[3] for r in inside),
        "temp_max_c": max(r[3] for r in inside),
        "power_w": statistics.fmean(r[2] for r in inside),
        "sm_mhz_min": min(r[1] for r in inside),
        "capped_until_s": max(capped, default=0.0),
        "profile_s": t1 - t0,
    }


def same_address_pairs(rounds: list[dict[str, Any]]) -> tuple[float, float] | None:
    """The widest-apart pair of rebuilt rounds whose build and step allocated at the very same addresses and sizes."""
    pairs = same_address_diffs(rounds)
    return max(pairs, key=lambda p: p[1] - p[0]) if pairs else None


def same_address_diffs(rounds: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Every pair of rebuilt rounds whose build and step allocated at the very same addresses and sizes."""
    return [
        (min(a["us"], b["us"]), max(a["us"], b["us"]))
        for a, b in itertools.combinations(rounds, 2)
        if a["step"] and a["step"] == b["step"] and a["built"] == b["built"]
    ]


def permutation_p(a: list[float], b: list[float]) -> float:
    """Exact one-sided permutation test: the share of the splits of ``a + b`` into groups of their sizes whose
    second group spreads wider than the first by at least as much as ``b`` does over ``a``."""
    pooled = a + b
    observed = spread(b) - spread(a)
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        first = [pooled[i] for i in chosen]
        second = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        hits += spread(second) - spread(first) >= observed - 1e-12
    return hits / total


def low_level_share(samples: list[float]) -> float:
    """The share of a process's samples of the two-level case at its lower level."""
    return sum(1 for x in samples if x < TWO_LEVEL_SPLIT_US) / len(samples)


def truth_run_starts() -> tuple[list[float], int, int]:
    """The validation set's start in the truth report's five runs: GPU temperatures, and how many runs began
    power-capped, of how many."""
    temps, capped, runs = [], 0, 0
    for path in sorted(TRUTH_RUNS.glob("run*/validation.json.gz")):
        start = load_result(path).environment.health_start
        if start is None or start.temperature_c is None:
            continue
        runs += 1
        temps.append(start.temperature_c)
        capped += "sw_power_cap" in start.throttle_reasons
    return temps, capped, runs


def stratified_p(offsets: dict[str, dict[str, float]], hot: dict[str, set[str]]) -> float:
    """Exact permutation test, conditions shuffled within each lease: the share of relabellings whose hot processes'
    mean shared level is at least as low as the observed one."""
    leases = list(offsets)
    observed = statistics.fmean(offsets[lease][n] for lease in leases for n in hot[lease])
    choices = [list(itertools.combinations(list(offsets[lease]), len(hot[lease]))) for lease in leases]
    hits = total = 0
    for picked in itertools.product(*choices):
        values = [offsets[lease][n] for lease, names in zip(leases, picked, strict=True) for n in names]
        total += 1
        hits += statistics.fmean(values) <= observed + 1e-12
    return hits / total


def settle_section(data: Path) -> tuple[list[str], dict[str, list[Process]]]:
    out = ["## 1. The GPU's state when timing starts", ""]
    temps, capped_runs, runs = truth_run_starts()
    out.append(
        "In the truth report's five-process runs the validation set was profiled right after the example suite's "
        f"do_bench pass ({min(temps):.0f}–{max(temps):.0f} °C at its start, power-capped in {capped_runs} of "
        f"{runs} runs). Here each process first loads the GPU "
        "with bf16 matmuls of 8192 for 10 s, then profiles the validation set: at once (`hot`), after idling until "
        "the temperature has fallen no more than 1 °C in 5 s (`settled`), or after 60 s idle (`cold`); the three "
        "rotate, so time does not favour one. NVML was read every 0.1 s by a process of its own. A process's "
        "*shared level* is the median over the cases ≥ 100 µs of its median against the median of all the "
        "lease's processes: what its cases have in common."
    )
    out.append("")
    out.append(
        "| lease | GPU | condition | processes | their shared levels | power-capped into the profile | "
        "profile | mean °C while profiling | lowest NVML SM clock | wait |"
    )
    out.append("|---|---|---|---:|---|---:|---:|---:|---:|---:|")
    by_lease: dict[str, list[Process]] = {}
    verdicts = []
    capped_max = 0.0
    all_offsets: dict[str, dict[str, float]] = {}
    hot_names: dict[str, set[str]] = {}
    hot_mhz: list[float] = []
    profile_s: list[float] = []
    for lease in sorted(p for p in (data / "settle").iterdir() if p.is_dir()):
        processes = load_processes(lease)
        by_lease[lease.name] = processes
        nvml = read_nvml(lease)
        cases = heavy_cases(processes)
        offsets = common_offsets(processes, cases)
        all_offsets[lease.name] = offsets
        hot_names[lease.name] = {p.name for p in processes if p.condition == "hot"}
        seen = {p.name: s for p in processes if (s := during(nvml, p.times))}
        profile_s += [s["profile_s"] for s in seen.values()]
        for condition in ("hot", "settled", "cold"):
            group = [p for p in processes if p.condition == condition]
            if not group:
                continue
            stats = [seen[p.name] for p in group if p.name in seen]
            capped = max(s["capped_until_s"] for s in stats)
            if condition == "hot":
                capped_max = max(capped_max, capped)
                hot_mhz += [s["sm_mhz_min"] for s in stats]
            waits = [p.times["settle"]["waited_s"] for p in group if "settle" in p.times]
            out.append(
                f"| {lease.name} | `{short_gpu_id(group[0].gpu)}` | {condition} | {len(group)} "
                f"| {', '.join(f'{offsets[p.name]:+.2f}%' for p in group)} "
                f"| {f'{capped:.1f} s' if capped else '—'} "
                f"| {min(s['profile_s'] for s in stats):.1f}–{max(s['profile_s'] for s in stats):.1f} s "
                f"| {statistics.fmean(s['temp_c'] for s in stats):.1f} (max {max(s['temp_max_c'] for s in stats):.0f}) "
                f"| {min(s['sm_mhz_min'] for s in stats):,.0f} MHz | {', '.join(f'{w:.1f} s' for w in waits) or '—'} |"
            )
        hot = [offsets[p.name] for p in processes if p.condition == "hot"]
        rest = [offsets[p.name] for p in processes if p.condition != "hot"]
        verdicts.append((lease.name, min(hot), max(hot), min(rest), max(rest)))
    out.append("")
    ranges = "; ".join(
        f"{name}: hot {lo:+.2f}% to {hi:+.2f}%, settled and cold {rlo:+.2f}% to {rhi:+.2f}%"
        for name, lo, hi, rlo, rhi in verdicts
    )
    hot_mean = statistics.fmean(all_offsets[lease][n] for lease in all_offsets for n in hot_names[lease])
    rest_mean = statistics.fmean(
        v for lease, offs in all_offsets.items() for n, v in offs.items() if n not in hot_names[lease]
    )
    out.append(
        f"The hot processes started their profile at the power cap, NVML's SM clock as low as {min(hot_mhz):,.0f} "
        f"MHz, and the cap lasted at most {capped_max:.1f} s into a profile of {min(profile_s):.0f}–"
        f"{max(profile_s):.0f} s. Their shared levels sit low ({ranges}): on average {hot_mean:+.2f}% against "
        f"{rest_mean:+.2f}% for the settled and cold ones, and an exact permutation test, the conditions shuffled "
        f"within each lease, gives p = {stratified_p(all_offsets, hot_names):.3f} for a gap that low. So a start hot "
        f"from a load reads about {rest_mean - hot_mean:.2f}% faster, though its cap is gone within a second: a small "
        "effect beside the 0.5% target, which a wait before timing would remove at the cost of seconds per run. "
        "The profiler does not wait; a run records its GPU's state at its start (`environment.health_start`)."
    )
    out.append("")
    return out, by_lease


def gpu_section(by_lease: dict[str, list[Process]], redraw: list[Process]) -> list[str]:
    groups = {f"{name} (`{short_gpu_id(ps[0].gpu)}`)": ps for name, ps in by_lease.items()}
    reuse = [p for p in redraw if p.condition == "reuse"]
    if reuse:
        groups[f"redraw, reuse (`{short_gpu_id(reuse[0].gpu)}`)"] = reuse
    if len(groups) < 2:
        return []
    names = list(groups)
    cases = heavy_cases([p for ps in groups.values() for p in ps])
    medians = {g: {c: statistics.median(p.medians[c] for p in ps) for c in cases} for g, ps in groups.items()}
    out = ["## 2. Three GPUs under one testbed key", ""]
    out.append(
        "Each lease was lent a different H200: the same model, driver and software, so the same testbed key. The "
        "validation set's median over each lease's processes, against the first lease (the settle leases pool "
        "their three conditions; the third lease's are the processes of section 4 that ran the profiler as it "
        "is, without a load before):"
    )
    out.append("")
    out.append("| case | " + " | ".join(names) + " |")
    out.append("|---|" + "---:|" * len(names))
    for c in cases:
        base = medians[names[0]][c]
        cells = [f"{base:,.1f} µs"] + [f"{medians[g][c] / base * 100 - 100:+.2f}%" for g in names[1:]]
        out.append(f"| {c} | " + " | ".join(cells) + " |")
    out.append("")
    deltas = [medians[g][c] / medians[names[0]][c] * 100 - 100 for g in names[1:] for c in cases]
    first, second = names[0], names[1]
    own = {g: dict(zip(cases, case_spreads(groups[g], cases), strict=True)) for g in (first, second)}
    moved = [
        c for c in cases if abs(medians[second][c] / medians[first][c] - 1) * 100 > max(own[first][c], own[second][c])
    ]
    out.append(
        f"The leases read the same cases {min(deltas):+.2f}% to {max(deltas):+.2f}% apart, with signs that differ "
        f"from case to case. Between the first two, {len(moved)} of {len(cases)} cases moved by more than they "
        "spread across either lease's own processes. Each GPU was lent once, so what belongs to the GPU and what "
        "to the time of its lease cannot be told apart here; GPUs of one model are known to differ by their "
        "silicon and cooling. Either way a baseline and a candidate timed on different GPUs carry such a "
        "difference: a comparison names it (`OTHER GPU`, when their NVML UUIDs differ), and a paired run, both "
        "sides on one GPU, does not carry it."
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
        "times them. Ranges as (max − min) / median of the round medians; the last column, of the rebuilt rounds "
        "whose build and step allocated at the very same virtual addresses (the allocator's history names every "
        "block), the widest-apart pair."
    )
    out.append("")
    out.append("| file | case | µs | rounds | range, same | range, rebuilt | same addresses, widest pair |")
    out.append("|---|---|---:|---:|---:|---:|---|")
    merged: dict[str, Any] = {}
    all_pairs: list[tuple[float, float, str]] = []
    for stem, run in runs.items():
        for key, r in run.items():
            if "error" in r:
                continue
            rebuilt = [x["us"] for x in r["rebuilt"]]
            pair = same_address_pairs(r["rebuilt"])
            all_pairs += [(lo, hi, f"{stem}:{key}") for lo, hi in same_address_diffs(r["rebuilt"])]
            out.append(
                f"| {stem} | {key} | {statistics.median(r['same']):,.1f} | {len(r['same'])} "
                f"| {spread(r['same']):.2f}% | {spread(rebuilt):.2f}% "
                f"| {f'{pair[0]:.1f} and {pair[1]:.1f} µs' if pair else '—'} |"
            )
            merged[f"{stem}:{key}"] = r
    out.append("")
    wider = {k for k, r in merged.items() if spread([x["us"] for x in r["rebuilt"]]) > 2 * spread(r["same"])}
    top = max(merged, key=lambda k: spread([x["us"] for x in merged[k]["rebuilt"]]))
    apart = [(lo, hi, key) for lo, hi, key in all_pairs if (hi - lo) / lo * 100 >= 2 * TARGET_PCT]
    by_case: dict[str, int] = {}
    for _, _, key in apart:
        by_case[key] = by_case.get(key, 0) + 1
    most = max(by_case, key=lambda k: by_case[k])
    widest = max(apart, key=lambda p: (p[1] - p[0]) / p[0])
    out.append(
        f"In {len(wider)} of {len(merged)} case runs the rebuilt rounds range more than twice as widely as the same "
        f"workload's, up to {spread([x['us'] for x in merged[top]['rebuilt']]):.2f}% ({top.split(':', 1)[1]}). Of "
        f"{len(all_pairs)} pairs of rounds rebuilt at the very same virtual addresses, {len(apart)} read 1% or more "
        f"apart, from {len(by_case)} cases ({by_case[most]} of them {most.split(':', 1)[1]}), the widest "
        f"{widest[0]:.1f} and {widest[1]:.1f} µs: what differs there is presumably the physical memory behind the "
        "addresses, which the driver chooses (the pads before them may differ too)."
    )
    out.append("")
    return out, merged


def redraw_section(processes: list[Process]) -> list[str]:
    cases = heavy_cases(processes)
    out = ["## 4. Rounds from fresh memory against rounds from the allocator's cache", ""]
    gpus = sorted({short_gpu_id(p.gpu) for p in processes})
    out.append(
        f"`bench/h200_redraw.py`, {len(processes)} processes alternating on one GPU (`{', '.join(gpus)}`, a third "
        "lease): each round's tensors fresh from the driver, the allocator's cache emptied right before each build "
        "(`redraw`), and the profiler as it is, its rounds taking their tensors from the blocks the allocator "
        "holds (`reuse`). Spread over the variant's processes; beside it, after dividing out each process's "
        "shared level, and the share of five-process subsets within 0.5%."
    )
    out.append("")
    header = "| case | µs |"
    rule = "|---|---:|"
    rows: dict[str, list[str]] = {c: [] for c in cases}
    summary = []
    groups = {v: [p for p in processes if p.condition == v] for v in ("redraw", "reuse")}
    for variant, group in groups.items():
        offsets = common_offsets(group, cases)
        raw = case_spreads(group, cases)
        residual = case_spreads(group, cases, offsets)
        header += f" {variant}: spread | after the shared level | fives within 0.5% |"
        rule += "---:|---:|---:|"
        for c, s, r in zip(cases, raw, residual, strict=True):
            rows[c].append(f" {s:.2f}% | {r:.2f}% | {share_of_fives_within([p.medians[c] for p in group]):.0%} |")
        summary.append(
            f"{variant}: {sum(1 for s in raw if s <= TARGET_PCT)}/{len(cases)} cases within 0.5% over its "
            f"{len(group)} processes, {sum(1 for s in residual if s <= TARGET_PCT)}/{len(cases)} after the shared "
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
    fresh = [p.medians[TWO_LEVEL_CASE] for p in groups["redraw"]]
    reused = [p.medians[TWO_LEVEL_CASE] for p in groups["reuse"]]
    p_two = permutation_p(fresh, reused)
    rest = [c for c in cases if c != TWO_LEVEL_CASE]
    narrower = sum(
        1
        for c in rest
        if spread([p.medians[c] for p in groups["redraw"]]) < spread([p.medians[c] for p in groups["reuse"]])
    )
    shares = {v: [low_level_share(p.samples[TWO_LEVEL_CASE]) for p in g] for v, g in groups.items()}
    switching = {v: sum(1 for x in xs if 0.05 <= x <= 0.95) for v, xs in shares.items()}
    out.append(
        f"{TWO_LEVEL_CASE} spread {spread(reused):.2f}% from the cache and {spread(fresh):.2f}% from fresh memory, "
        f"but one process makes the difference: an exact permutation test over the twelve processes gives "
        f"p = {p_two:.2f}. Of the other {len(rest)} cases, {narrower} spread less from fresh memory and "
        f"{len(rest) - narrower} more. Six processes a side do not tell the two apart. Nor does the mechanism "
        f"call for the change: within one process {TWO_LEVEL_CASE}'s "
        f"samples already lie at both of its levels (at least 5% at each, the split at {TWO_LEVEL_SPLIT_US:.0f} µs) in "
        f"{switching['reuse']} of {len(shares['reuse'])} processes taking their tensors from the cache and "
        f"{switching['redraw']} of {len(shares['redraw'])} taking them fresh (the share at the lower level "
        f"{min(shares['reuse']):.2f}–{max(shares['reuse']):.2f} and "
        f"{min(shares['redraw']):.2f}–{max(shares['redraw']):.2f}), and a case's pooled "
        "median averages over them. The profiler keeps taking its rounds' tensors from the allocator. What is "
        "left is in part a level the cases of one process share and in part some cases' own process-to-process "
        "spread (the columns after the shared level). The clocks were not locked: the lent GPU's settings stay as "
        "found."
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
    ax.axvspan(-TARGET_PCT / 2, TARGET_PCT / 2, color="#2ca02c", alpha=0.12, label="±0.25%")
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
    settle, by_lease = settle_section(data)
    workspace, merged = workspace_section(data)
    redraw = load_processes(data / "redraw")
    lines += settle + gpu_section(by_lease, redraw) + workspace + [f"![round medians]({png_name})", ""]
    lines += redraw_section(redraw)
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
