"""A profile's rounds on the H200: the spread of five processes, the levels builds land on, a level processes share.

    python bench/h200_rounds_report.py --data bench/reports/data/h200-rounds-2026-12-03 \
        --out bench/reports/h200-rounds.md

The result documents record how many samples each round took (``latency_us.round_samples``), so each round's median
can be read back. The raw data (``provenance.json`` lists the commands, leases and GPUs):

  a/raw/run*/, b/raw/run*/   two commands of ``bench/h200_truth.sh runs`` on one H200, eight processes each: both
                             suites profiled (10 rounds) and ``do_bench`` in the same process; NVML beside them
  persist/                   ``bench/h200_redraw.py`` on another H200: seven cases, processes alternating between the
                             profiler as it is (``reuse``) and the same with the flush buffer and cuBLAS's workspaces
                             drawn anew before each round (``persist``)

Writes the report and a plot beside it (same name, ``.png``).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnprof.core.documents import Case, ResultDocument, load_result
from attnprof.core.rounds import round_levels, round_medians

HEAVY_US = 100.0  # the spread target's cases: 100 µs and more
TARGET = 0.005  # the spread target, relative
FIVE = 5  # processes the targets are stated over
ROOT = Path(__file__).resolve().parents[1]
# The cases that share a process's level most (section 3), each compared with the mean of the others.
SHARED = ("bwd[backend=cudnn]", "bwd[backend=flash]", "naive-bwd", "hd256[backend=cudnn]")

Estimator = Callable[[Case], float]


@dataclass
class Process:
    """One profile process: its cases (both suites), where it ran do_bench's clean-flush medians, and its result
    documents as read."""

    name: str
    cases: dict[str, Case]
    dobench: dict[str, float]
    documents: list[ResultDocument] = field(default_factory=list)


def spread(values: list[float]) -> float:
    """(max - min) / median, relative."""
    return (max(values) - min(values)) / statistics.median(values)


def pct(x: float, digits: int = 2, sign: bool = False) -> str:
    return f"{x * 100:{'+' if sign else ''}.{digits}f}%"


def load_runs(folder: Path) -> list[Process]:
    """The processes of one ``runs`` command, in the order they ran."""
    out = []
    for run in sorted(folder.glob("raw/run*/"), key=lambda p: int(p.name[3:])):
        cases: dict[str, Case] = {}
        dobench: dict[str, float] = {}
        documents = [load_result(run / f"{suite}.json.gz") for suite in ("llama7b", "validation")]
        for suite, doc in zip(("llama7b", "validation"), documents, strict=True):
            cases.update({c.id: c for c in doc.cases if c.latency_us})
            with gzip.open(run / f"{suite}-dobench.json.gz", "rt") as f:
                dobench.update({k: v["clean"] for k, v in json.load(f).items() if "clean" in v})
        out.append(Process(f"{folder.name}{run.name[3:]}", cases, dobench, documents))
    return out


def load_variants(folder: Path) -> dict[str, list[Process]]:
    """The ``h200_redraw`` processes of a folder by label (``<label>-<pid>.json.gz``; a label may hold dashes), each
    in the order they ran; their ``--addresses`` records (``<label>-<pid>.addresses.json.gz``) are not documents."""
    found = []
    for path in folder.glob("*.json.gz"):
        if path.name.endswith(".addresses.json.gz"):  # a process's --addresses record, beside its document
            continue
        label, pid = path.name.removesuffix(".json.gz").rsplit("-", 1)
        doc = load_result(path)
        cases = {c.id: c for c in doc.cases if c.latency_us}
        found.append((doc.run.created_at, label, Process(f"{label}-{pid}", cases, {})))
    out: dict[str, list[Process]] = {}
    for _, label, process in sorted(found, key=lambda f: f[0]):
        out.setdefault(label, []).append(process)
    return out


def shown(path: Path) -> str:
    """``path`` as a report shows it: relative to the repository when inside it."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def lease_gpus(provenance: dict[str, Any]) -> str:
    """The GPU and the hours of each lease in a data set's ``provenance.json``."""
    return ", ".join(
        f"{k}: `{v['gpu']}` ({v['from'][11:16]}–{v['to'][11:16]} UTC)" for k, v in provenance["leases"].items()
    )


def median_of(case: Case) -> float:
    assert case.latency_us is not None
    return case.latency_us.median


def _rounds(case: Case) -> list[float]:
    assert case.latency_us is not None
    medians = round_medians(case.latency_us)
    assert medians is not None, f"{case.id}: no round counts"
    return medians


ESTIMATORS: dict[str, Estimator] = {
    "median of all samples (the profiler's)": median_of,
    "mean of the round medians": lambda c: statistics.fmean(_rounds(c)),
    "median of the round medians": lambda c: statistics.median(_rounds(c)),
    "lowest round median": lambda c: min(_rounds(c)),
    "mean of the round medians, two lowest and two highest dropped": lambda c: statistics.fmean(
        sorted(_rounds(c))[2:-2]
    ),
}


def share_within(values: list[float], k: int = FIVE, target: float = TARGET) -> float:
    """The share of the ``k``-process subsets of ``values`` whose spread is within ``target``."""
    subsets = list(itertools.combinations(values, k))
    return sum(spread(list(s)) <= target for s in subsets) / len(subsets)


def heavy(processes: list[Process]) -> list[str]:
    ids = [i for i in processes[0].cases if all(i in p.cases for p in processes)]
    return [i for i in ids if statistics.median(median_of(p.cases[i]) for p in processes) >= HEAVY_US]


def five_section(commands: dict[str, list[Process]]) -> list[str]:
    out = [
        "## 1. Five processes at a time",
        "",
        "The targets are stated over five processes. Each command below ran eight, back to back on one GPU; its first "
        "five are the protocol of the truth report, and every five of its eight show how much a count depends on "
        "which five. Spread = (max − min) / median of the processes' medians; do_bench (median mode, the same clean "
        "flush) ran in the same processes.",
        "",
        "| command | cases ≥ 100 µs within 0.5%, first five | the same over all 56 fives: median (range) | "
        "no wider than do_bench, first five |",
        "|---|---:|---:|---:|",
    ]
    for name, processes in commands.items():
        cases = heavy(processes)
        first = processes[:FIVE]
        within = [i for i in cases if spread([median_of(p.cases[i]) for p in first]) <= TARGET]
        counts = [
            sum(spread([median_of(p.cases[i]) for p in five]) <= TARGET for i in cases)
            for five in itertools.combinations(processes, FIVE)
        ]
        both = [i for i in first[0].cases if all(i in p.dobench and i in p.cases for p in first)]
        no_wider = [
            i for i in both if spread([median_of(p.cases[i]) for p in first]) <= spread([p.dobench[i] for p in first])
        ]
        out.append(
            f"| {name} | {len(within)}/{len(cases)} | {statistics.median(counts):g} ({min(counts)}–{max(counts)}) | "
            f"{len(no_wider)}/{len(both)} = {len(no_wider) / len(both):.0%} |"
        )
    out.append("")
    rows = []
    for name, processes in commands.items():
        for i in heavy(processes):
            share = share_within([median_of(p.cases[i]) for p in processes])
            if share < 0.5:
                rows.append((i, name, share, spread([median_of(p.cases[i]) for p in processes])))
    out.append(
        "Within 0.5% in fewer than half of the fives: "
        + "; ".join(f"{i} ({name}: {s:.0%} of the fives, eight processes {pct(r)})" for i, name, s, r in rows)
        + f". Levels (section 2) account for {LEVEL_CASES[1]}, a level shared by a process (section 4) for the "
        "backward cases; for the others this report shows no cause."
    )
    out.append("")
    return out


def levels_section(commands: dict[str, list[Process]], variants: dict[str, list[Process]]) -> list[str]:
    every = [p for ps in commands.values() for p in ps] + [p for ps in variants.values() for p in ps]
    runs: dict[str, list[Case]] = {}
    for p in every:
        for i, c in p.cases.items():
            runs.setdefault(i, []).append(c)
    out = [
        "## 2. Levels from one build to the next",
        "",
        "A profile builds each case again in each of its rounds. `attnprof.core.rounds.round_levels` sorts a run's "
        "round medians and cuts between neighbours further apart than 1% and than twice a round median's own 95% "
        "half-width; two groups of two rounds or more are levels (the report prints them under the case; section 3 "
        "says what a comparison makes of them). Over "
        f"{len(every)} runs of {len(runs)} cases, levels were found in these cases and in no other:",
        "",
        "| case | µs | runs with levels | levels in its first such run | its runs' medians: range |",
        "|---|---:|---:|---|---:|",
    ]
    for i, cases in sorted(runs.items()):
        found = [(c, lv) for c in cases if (lv := round_levels(c.latency_us)) is not None]
        if not found:
            continue
        medians = [median_of(c) for c in cases]
        out.append(
            f"| {i} | {statistics.median(medians):,.1f} | {len(found)}/{len(cases)} | "
            f"{found[0][1].describe().split(': ')[0]} | {pct(spread(medians))} |"
        )
    out += [
        "",
        "Within a round the samples agree; a run's median depends on how many of its rounds drew each level. Summing "
        "up the rounds another way does not make the processes agree more often. The share of five-process subsets "
        "within 0.5%, summed over the cases ≥ 100 µs of both commands (the larger, the more reproducible):",
        "",
        f"| estimator | expected cases within 0.5% (of {sum(len(heavy(ps)) for ps in commands.values())}) |",
        "|---|---:|",
    ]
    for name, estimator in ESTIMATORS.items():
        total = sum(share_within([estimator(p.cases[i]) for p in ps]) for ps in commands.values() for i in heavy(ps))
        out.append(f"| {name} | {total:.1f} |")
    out += [
        "",
        "So the profiler keeps the median of all samples, and says when the rounds landed on levels instead of "
        "hiding them in the number.",
        "",
    ]
    return out


LEVEL_CASES = ("decode-mqa[backend=cudnn]", "hd256[backend=efficient]")  # levels in most of their runs


def one_case(doc: ResultDocument, case_id: str, *, strip: bool = False, factor: float = 1.0) -> ResultDocument:
    """``doc`` with one case, its samples times ``factor``, its round counts dropped when ``strip``."""
    case = doc.case(case_id)
    assert case is not None and case.latency_us is not None
    lat = case.latency_us.model_copy(
        update={
            "samples": [x * factor for x in case.latency_us.samples],
            "median": case.latency_us.median * factor,
            "round_samples": None if strip else case.latency_us.round_samples,
        }
    )
    return doc.model_copy(update={"cases": [case.model_copy(update={"latency_us": lat})]})


def comparison_section(docs: list[ResultDocument]) -> list[str]:
    """Comparisons of the sixteen processes of lease 1 with each other, with and without their round counts."""
    from attnprof.core.analysis import compare

    out = [
        "## 3. What a comparison makes of levels",
        "",
        "A comparison (docs/regression-method.md, Levels) takes the within-run precision of the median of a run "
        "whose rounds landed on levels, baseline or candidate, from resampling its rounds instead of its samples (a "
        "cluster bootstrap), so that a change another draw of levels could make is not confirmed and warns instead "
        "of failing. Here the first lease's sixteen processes are compared with each other, one case at a time, "
        "with their round counts and without them (as documents were before they were recorded): every ordered pair "
        "with one baseline run (A/A: the same code), and, for power, each run of three consecutive ones (the "
        "windows overlap, and cross from command a to b) as baselines for the next with its samples made slower. "
        "The rule and its thresholds were chosen looking at these same runs, so this is not an out-of-sample test:",
        "",
        "| case | round counts | A/A, one baseline: fail / warn of 240 | ×1.05: fail of 13 | ×1.08 | ×1.10 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for case_id in LEVEL_CASES:
        runs = [d for d in docs if d.case(case_id) is not None]
        for strip in (False, True):
            one = [one_case(d, case_id, strip=strip) for d in runs]
            verdicts = [compare([a], b).verdict for a, b in itertools.permutations(one, 2)]
            caught = []
            for factor in (1.05, 1.08, 1.10):
                hits = 0
                for i in range(len(runs) - 3):
                    slow = one_case(runs[i + 3], case_id, strip=strip, factor=factor)
                    hits += compare(one[i : i + 3], slow).verdict == "fail"
                caught.append(f"{hits}/{len(runs) - 3}")
            out.append(
                f"| {case_id} | {'dropped' if strip else 'kept'} | {verdicts.count('fail')} / {verdicts.count('warn')} "
                f"| " + " | ".join(caught) + " |"
            )
    out += [
        "",
        "For unchanged code it turns most failures into warnings (failures and warnings together stay about as "
        "many), at the price of catching small slowdowns of these cases less often. A case without levels is "
        "compared as before; only its q-value moves with the others' p-values, in the comparison's one "
        "Benjamini–Hochberg family.",
        "",
    ]
    return out


def shared_section(commands: dict[str, list[Process]], variants: dict[str, list[Process]]) -> list[str]:
    out = [
        "## 4. A level a process shares",
        "",
        "Some cases move together from process to process. Correlation of each case's process medians with the mean "
        f"of the others' over the {sum(len(v) for v in variants.values())} processes of the second lease, by variant "
        "(a round's own median is only about ±0.6% precise, so the last column holds sampling noise too):",
        "",
        "| case | reuse: r | persist: r | reuse: range (sd) | persist: range (sd) | round medians' range within "
        "a process, median (reuse) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for i in SHARED:
        cells = []
        for v in ("reuse", "persist"):
            cells.append(f"{_shared_r(variants[v], i):+.2f}")
        for v in ("reuse", "persist"):
            m = [median_of(p.cases[i]) for p in variants[v]]
            centre = statistics.median(m)
            cells.append(f"{pct(spread(m))} ({pct(statistics.stdev(m) / centre)})")
        within = statistics.median(spread(_rounds(p.cases[i])) for p in variants["reuse"])
        out.append(f"| {i} | " + " | ".join(cells) + f" | {pct(within)} |")
    rows = []
    for i in heavy(commands["a"]) + [i for i in commands["a"][0].cases if i not in heavy(commands["a"])]:
        rs = [_shared_r(ps, i) for ps in commands.values()]
        c = commands["a"][0].cases[i]
        host = statistics.median(p.cases[i].latency_us.host_us or 0.0 for p in commands["a"])  # type: ignore[union-attr]
        rows.append((statistics.fmean(rs), i, median_of(c), host, sum(k.launches_per_iter for k in c.kernels)))
    reach = sum(all(_shared_r(ps, i) >= 0.71 for ps in commands.values()) for _, i, *_ in rows)
    level = _process_levels(variants["reuse"] + variants["persist"])
    ordered = [lv for _, lv in sorted(level.items())]
    lag = _lag1(ordered)
    spread_z = 1.96 / math.sqrt(len(ordered) - 1 - 3)  # Fisher's z, len - 1 pairs
    lag_low, lag_high = math.tanh(math.atanh(lag) - spread_z), math.tanh(math.atanh(lag) + spread_z)
    first = [p for ps in commands.values() for p in ps]
    naive = (
        statistics.median(spread(_rounds(p.cases["naive-bwd"])) for p in first),
        spread([median_of(p.cases["naive-bwd"]) for p in first]),
    )
    out += [
        "",
        "The persist processes allocated a new flush buffer (behind a pad of random size, while the old one was "
        "still held) and freed cuBLAS's workspaces before every round. The allocator may hand the buffer a block "
        "freed in an earlier round, so it lands on one of several places, not always a new one. Their cases still "
        "share one level per process, as widely as the processes as they are: neither the flush buffer's place nor "
        "cuBLAS's workspaces were shown to set it. Drawing the case's own tensors fresh from the driver each round "
        "did not break it either (`bench/reports/h200-spread-causes.md`, redraw), and the start state moves it by "
        "about 0.13% (same report). "
        "It does not look like a slow drift: in time order one process's shared level hardly predicts the next "
        f"one's (lag-1 correlation {lag:+.2f} over {len(ordered)} processes of about ten seconds each; 95% interval "
        f"{lag_low:+.2f} to {lag_high:+.2f}). Within a process it holds: in the first lease (another GPU; "
        "processes of about a minute, rounds spread over all of it) naive-bwd's round medians range "
        f"{pct(naive[0])} within a process (median) and its processes {pct(naive[1])}. An earlier lease found five "
        "profile sessions in one process spreading as widely as five processes (`bench/reports/h200-truth.md`, "
        "section 4), so a new process is not needed for it to change; whether each session draws its own was not "
        "tested.",
        "",
        "In the first lease's sixteen processes of both suites, many cases move with the same level: correlation "
        "with the mean of the four above (each case left out of its own mean) over each command's eight processes, "
        f"averaged over the two; {reach} of {len(rows)} cases reach +0.71 (the 5% significance level for eight "
        "processes) in both commands:",
        "",
        "| case | r | µs | host µs / iteration | kernels / iteration |",
        "|---|---:|---:|---:|---:|",
    ]
    for r, i, us, host, launches in sorted(rows, reverse=True):
        out.append(f"| {i} | {r:+.2f} | {us:,.1f} | {host:,.1f} | {launches:g} |")
    size = [
        max(abs(s) for s in _process_levels(ps, cases=[i for i in heavy(ps) if i not in SHARED]).values())
        for ps in commands.values()
    ]
    out += [
        "",
        "Its size is small for most cases: a process's offset, the median over its cases ≥ 100 µs (the four above "
        f"left out) of each one's offset from the eight-process median, is at most {pct(size[0])} and {pct(size[1])} "
        "in the two commands, against about ±0.5% for the backward cases above. What sets it is not found here: the "
        "GPU's settings stayed as found (clocks unlocked), and the events and the trace pass's profiler were not "
        "varied. A later lease on another GPU (`bench/reports/h200-stream.md`) found that running each round on a "
        "new stream averages it, and that pinning the process to two vCPUs does not reduce it.",
        "",
    ]
    return out


def _shared_r(processes: list[Process], case_id: str) -> float:
    import numpy as np

    others = [i for i in SHARED if i != case_id]

    def offsets(i: str) -> Any:
        m = np.array([median_of(p.cases[i]) for p in processes])
        return m / np.median(m) - 1.0

    shared = np.mean([offsets(i) for i in others], axis=0)
    return float(np.corrcoef(offsets(case_id), shared)[0, 1])


def _process_levels(processes: list[Process], cases: list[str] | None = None) -> dict[str, float]:
    """Each process's median offset over ``cases`` (default: the shared ones) from the processes' medians."""
    ids = list(cases or SHARED)
    centre = {i: statistics.median(median_of(p.cases[i]) for p in processes) for i in ids}
    return {
        p.name.split("-")[-1].zfill(8) if "-" in p.name else p.name: statistics.median(
            median_of(p.cases[i]) / centre[i] - 1.0 for i in ids
        )
        for p in processes
    }


def _lag1(values: list[float]) -> float:
    import numpy as np

    return float(np.corrcoef(values[:-1], values[1:])[0, 1])


def plot(commands: dict[str, list[Process]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = ["hd256[backend=efficient]", "decode-mqa[backend=cudnn]", "naive-bwd", "hd96[backend=cudnn]"]
    processes = [p for ps in commands.values() for p in ps]
    fig, axes = plt.subplots(1, len(shown), figsize=(14, 4.6), sharey=True)
    for ax, i in zip(axes, shown, strict=True):
        centre = statistics.median(median_of(p.cases[i]) for p in processes)
        for y, p in enumerate(processes):
            rounds = [(r / centre - 1) * 100 for r in _rounds(p.cases[i])]
            ax.scatter(rounds, [y] * len(rounds), s=9, color="#1f77b4", alpha=0.7)
            ax.scatter([(median_of(p.cases[i]) / centre - 1) * 100], [y], marker="|", s=120, color="#d62728")
        ax.axvspan(-TARGET * 50, TARGET * 50, color="#2ca02c", alpha=0.12)
        ax.set_title(i, fontsize=9)
        ax.set_xlabel("% from the 16 processes' median")
    axes[0].set_yticks(range(len(processes)))
    axes[0].set_yticklabels([p.name for p in processes], fontsize=7)
    axes[0].set_ylabel("process (command a, then b)")
    fig.suptitle("Round medians (dots) and the process's median (red bar) on one H200; green: ±0.25%", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(data: Path, png_name: str) -> tuple[str, dict[str, list[Process]]]:
    provenance = json.loads((data / "provenance.json").read_text())
    versions = (data / "versions.txt").read_text().strip()
    commands = {name: load_runs(data / name) for name in ("a", "b")}
    variants = load_variants(data / "persist")
    lines = [
        "# A profile's rounds on the H200: five processes, levels between builds, a level a process shares",
        "",
        f"From two leases on {provenance['date']} (raw data in `{shown(data)}`, recomputed by this report's script; "
        f"the profiler at {provenance['commit']}). GPUs: {lease_gpus(provenance)}. Software: {versions}; driver "
        f"{provenance['driver']}; clocks not locked.",
        "",
        "```bash",
        *provenance["commands"],
        f"python bench/h200_rounds_report.py --data {shown(data)} --out bench/reports/h200-rounds.md",
        "```",
        "",
    ]
    lines += five_section(commands) + levels_section(commands, variants)
    lines += [f"![round medians]({png_name})", ""]
    lines += comparison_section([d for ps in commands.values() for p in ps for d in p.documents])
    lines += shared_section(commands, variants)
    return "\n".join(lines), commands


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    png = args.out.with_suffix(".png")
    text, commands = render(args.data, png.name)
    args.out.write_text(text)
    plot(commands, png)
    print(f"wrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
