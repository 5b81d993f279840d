"""The level a process shares, against the host's CPUs, a stream per round and one non-default stream; a stream per
round over both suites; a stream per round of the suite, and the blocks a round lands on; the lease that decided
the runner takes up a stream per case-round.

    python bench/h200_stream_report.py --data bench/reports/data/h200-stream-2026-12-03 \
        --before bench/reports/data/h200-rounds-2026-12-03 \
        --placed bench/reports/data/h200-placement-2026-12-03/validation \
        --placed bench/reports/data/h200-spread-causes-2026-12-03/redraw --out bench/reports/h200-stream.md

``bench/reports/h200-rounds.md`` found four cases (SHARED) moving together from process to process, about ±0.5%, and
holding their level through a process's rounds. The raw data (``provenance.json`` lists the commands and GPUs):

  pin/       ``bench/h200_redraw.py`` processes in turn: the profiler then, pinned to the host's first two CPUs
             (``pin-lo``), to its last two (``pin-hi``), and not pinned (``reuse``); ``topo.txt``: the host's CPUs
  stream/    the same lease, processes alternating between the profiler then (``reuse``: every round on the
             process's current stream) and each round on a new stream from PyTorch's pool (``stream``)
  runs/      ``bench/h200_truth.sh runs`` on another H200 with a stream per round built into the runner (785d8bc):
             both suites, do_bench beside them; compared with the two commands of ``--before`` (the runner as it is)
  one-stream/ a third lease: processes alternating between the profiler then (``reuse``) and every round on one
             non-default stream for the whole process (``one-stream``)
  round-stream/a, round-stream/b
             two more leases (two GPUs): processes in turn as it is (``reuse``), with a new stream per round of
             the suite shared by its cases (``round-stream``) and with a new stream per case-round (``stream``),
             each with its ``--addresses`` record (``<label>-<pid>.addresses.json.gz``: each case-round's stream
             and blocks)
  adopt/a, adopt/b, adopt/c
             the lease the rule of ``bench/h200_adopt.py`` decides on (set before it): both suites, processes
             alternating between a stream per case-round (``stream``) and the runner as it then was (``reuse``);
             later commands the device gave other GPUs (b, c), shown beside it

``--placed DIR`` (any number) adds folders of ``h200_redraw`` processes that draw each round's blocks anew on the
process's one stream (``reuse`` and one other variant): the contrast for section 5.

Writes the report and its plots beside it (same name, ``.png``, ``-levels.png`` and ``-adopt.png``).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}
SEED = 20261203


def shared_levels(processes: list[Process]) -> list[float]:
    """Each process's shared level: the median offset of its SHARED cases from the processes' own medians, in the
    order of ``processes`` (keyed by pid underneath: two processes of one pid would make one level, so that is
    refused)."""
    levels = list(_process_levels(processes).values())
    if len(levels) != len(processes):
        raise ValueError(f"{len(processes)} processes gave {len(levels)} levels: two of them share a pid")
    return levels


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
        f"One lease, {len(reuse)} + {len(stream)} processes alternating (`reuse`: the profiler then, every round "
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
        f"in {ns} of {ts} case-processes; one stream {ro:+.2f}, {no} of {to}). So part of what sets the level is "
        "shared by streams that run at about the same time (section 5 takes the stream apart from the time): it "
        "is something a stream per round changes. That variant changes three things at once: a non-default stream, "
        "a new one each round, and where the round's tensors land (PyTorch's allocator keeps freed blocks per "
        "stream). Section 4 takes the first alone. hd256[efficient], whose builds land on levels, and hd256[flash] "
        "stay as wide.",
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
        "The runner then kept every round on the process's stream (section 6 has it take up a stream per "
        "case-round). Each round's build placed anew, over both suites in "
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
        f"A third lease, {len(reuse)} + {len(one)} processes alternating: `reuse` (the profiler then) and "
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


CO_MOVEMENT = ("same round, same stream", "same stream, other round", "same round, other stream", "neither")
ROUND_VARIANTS = ("reuse", "round-stream", "stream")
NEW_STREAMS = ("round-stream", "stream")
RESAMPLES = 2000  # bootstrap draws of the processes


def p_text(p: float) -> str:
    """A p-value as a report states it: three decimals, or below the smallest it could show."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def load_placed(folder: Path, name: str) -> list[dict[str, Any]]:
    """A process's ``--addresses`` record (``<name>.addresses.json``, gzipped or not): per case-round in the order
    they ran, its stream and the (address, bytes) of the blocks its build and warm-up were handed."""
    plain = folder / f"{name}.addresses.json"
    if plain.exists():
        found: list[dict[str, Any]] = json.loads(plain.read_text())
        return found
    with gzip.open(folder / f"{name}.addresses.json.gz", "rt") as f:
        found = json.load(f)
    return found


def case_rounds(placed: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """``placed`` by (case, round): a case's n-th build is its n-th round (the runner builds each case once a
    round, in suite order: ``profile_suite`` calls ``first`` and then ``again`` once per case and round, and each
    prepares the case once)."""
    seen: dict[str, int] = {}
    out = {}
    for entry in placed:
        r = seen[entry["case"]] = seen.get(entry["case"], -1) + 1
        out[(entry["case"], r)] = entry
    return out


@dataclass(frozen=True)
class CoMove:
    """Rounds of different cases paired one way: how many pairs, their correlation with a 95% interval from
    resampling the processes, and the mean share of block addresses the two rounds of a pair had in common."""

    pairs: int
    r: float
    low: float
    high: float
    shared_blocks: float


def co_movement(
    processes: list[Process],
    placed: dict[str, list[dict[str, Any]]],
    cases: tuple[str, ...] = SHARED,
    resamples: int = RESAMPLES,
) -> dict[str, CoMove]:
    """Within each process, every two rounds of different ``cases`` (each round's median relative to the case's
    median in that process, as :func:`round_r` takes them), by whether they ran in the same round of the suite and on
    the same stream (CO_MOVEMENT): per kind of pair, a :class:`CoMove`. Each pair is counted both ways, so the
    correlation is symmetric; the processes are resampled with replacement for its interval, since the pairs of one
    process overlap and are not independent. Centring each case on its own median leaves pairs of different rounds
    slightly negative. Kinds with no pairs are left out."""
    import numpy as np

    # per kind and process: [pairs, sum x, sum x^2, sum xy, shared-block share summed] (both orders: sum y = sum x)
    sums = {k: np.zeros((len(processes), 5)) for k in CO_MOVEMENT}
    for row, p in enumerate(processes):
        runs = case_rounds(placed[p.name])
        dev = {}
        for case_id in cases:
            centre = median_of(p.cases[case_id])
            rounds = _rounds(p.cases[case_id])
            dev.update({(case_id, r): x / centre - 1.0 for r, x in enumerate(rounds) if (case_id, r) in runs})
        addresses = {key: {a for a, _ in runs[key]["blocks"]} for key in dev}
        for a, b in itertools.combinations(sorted(dev), 2):
            if a[0] == b[0]:
                continue
            same_round, same_stream = a[1] == b[1], runs[a]["stream"] == runs[b]["stream"]
            kind = CO_MOVEMENT[0 if same_round and same_stream else 1 if same_stream else 2 if same_round else 3]
            union = addresses[a] | addresses[b]
            common = len(addresses[a] & addresses[b]) / len(union) if union else 0.0
            x, y = dev[a], dev[b]
            sums[kind][row] += (1.0, (x + y) / 2, (x * x + y * y) / 2, x * y, common)

    def r_of(s: Any) -> float:
        n = s[0]
        mean = s[1] / n
        var = s[2] / n - mean * mean
        return float((s[3] / n - mean * mean) / var) if var > 0 else float("nan")

    rng = np.random.default_rng(SEED)
    out = {}
    for kind, table in sums.items():
        total = table.sum(axis=0)
        if total[0] < 2:
            continue
        draws = rng.multinomial(len(processes), [1 / len(processes)] * len(processes), size=resamples) @ table
        rs = [r_of(s) for s in draws if s[0] >= 2]
        low, high = np.percentile(rs, [2.5, 97.5])
        out[kind] = CoMove(int(total[0]), r_of(total), float(low), float(high), float(total[4] / total[0]))
    return out


def blocks_drawn(placed: list[dict[str, Any]]) -> float:
    """Over a process's cases, the mean share of a case's later rounds (its first left out) built on a set of
    blocks (address, bytes) that no earlier round of the case was built on: 1 when every round lands on blocks of its
    own, 0 when every round lands on its first round's."""
    by_case: dict[str, list[frozenset[tuple[int, int]]]] = {}
    for entry in placed:
        by_case.setdefault(entry["case"], []).append(frozenset((a, n) for a, n in entry["blocks"]))
    return statistics.fmean((len(set(sets)) - 1) / (len(sets) - 1) for sets in by_case.values() if len(sets) > 1)


def addresses_new(placed: list[dict[str, Any]]) -> float:
    """The mean share of a case-round's block addresses that no earlier case-round of the process was handed."""
    seen: set[int] = set()
    shares = []
    for entry in placed:
        addresses = {a for a, _ in entry["blocks"]}
        shares.append(len(addresses - seen) / len(addresses) if addresses else 0.0)
        seen |= addresses
    return statistics.fmean(shares)


def sd_ratio_interval(a: list[float], b: list[float], resamples: int = RESAMPLES) -> tuple[float, float, float]:
    """sd(b) / sd(a), each about its own median, and a 95% percentile bootstrap interval (each group's processes
    resampled with replacement)."""
    import numpy as np

    da = np.array(a) - statistics.median(a)
    db = np.array(b) - statistics.median(b)
    rng = np.random.default_rng(SEED)
    ratios = []
    for _ in range(resamples):
        sa = rng.choice(da, len(da)).std(ddof=1)
        sb = rng.choice(db, len(db)).std(ddof=1)
        if sa > 0:
            ratios.append(sb / sa)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(db.std(ddof=1) / da.std(ddof=1)), float(low), float(high)


def _span(values: list[float], fmt: str = "{:.0%}") -> str:
    """One value, or the lowest and highest, as a report shows them."""
    low, high = min(values), max(values)
    return fmt.format(low) if fmt.format(low) == fmt.format(high) else f"{fmt.format(low)}–{fmt.format(high)}"


@dataclass
class LeaseResult:
    """Section 5's measures for one lease."""

    name: str
    p: dict[str, float]  # a new stream's shared level narrower than reuse's
    p_between: float  # a stream per case-round's narrower than a stream per round of the suite's
    ratio: dict[str, float]  # sd(variant) / sd(reuse)
    facts: str


def _lease_result(
    name: str, variants: dict[str, list[Process]], placed: dict[str, list[dict[str, Any]]]
) -> LeaseResult:
    own = {v: shared_levels(variants[v]) for v in ROUND_VARIANTS}  # each group about its own medians
    sd = {v: statistics.stdev(own[v]) for v in ROUND_VARIANTS}
    p = {v: variance_ratio_p(own["reuse"], own[v])[1] for v in NEW_STREAMS}
    p_between = variance_ratio_p(own["round-stream"], own["stream"])[1]
    pooled = shared_levels(variants["reuse"] + variants["stream"])  # about both groups' medians
    k = len(variants["reuse"])
    gap, p_gap = mean_gap_p(pooled[:k], pooled[k:])
    streams = {v: [float(len({e["stream"] for e in placed[q.name]})) for q in variants[v]] for v in sd}
    drawn = {v: [blocks_drawn(placed[q.name]) for q in variants[v]] for v in sd}
    new = {v: [addresses_new(placed[q.name]) for q in variants[v]] for v in sd}

    def each(values: dict[str, list[float]], fmt: str = "{:.0%}") -> str:
        return ", ".join(f"{v} {_span(values[v], fmt)}" for v in ROUND_VARIANTS)

    facts = (
        f"Lease {name}: the shared level's standard deviation {pct(sd['reuse'])} as it is, {pct(sd['round-stream'])} "
        f"with a stream per round of the suite ({p_text(p['round-stream'])}), {pct(sd['stream'])} with a stream per "
        f"case-round ({p_text(p['stream'])}; narrower than a stream per round of the suite: {p_text(p_between)}); "
        f"the four cases' mean correlation with the others' level {mean_shared_r(variants['reuse']):+.2f} as it is, "
        f"{mean_shared_r(variants['round-stream']):+.2f} and {mean_shared_r(variants['stream']):+.2f} with the new "
        "streams. With a stream per "
        f"case-round the shared level's mean moves by {pct(gap, sign=True)} ({p_text(p_gap)}). Streams a process "
        f"used: {each(streams, '{:.0f}')}; share of a case's later rounds built on a block set none of its earlier "
        f"rounds had: {each(drawn)}; share of a case-round's block addresses the process had not handed out "
        f"before: {each(new)}."
    )
    ratio = {v: sd[v] / sd["reuse"] for v in NEW_STREAMS}
    return LeaseResult(name, p, p_between, ratio, facts)


def round_stream_section(
    leases: dict[str, dict[str, list[Process]]],
    placed: dict[str, dict[str, list[dict[str, Any]]]],
    gpus: dict[str, str],
    contrast: dict[str, dict[str, list[Process]]],
) -> list[str]:
    """Section 5. ``leases``: per lease, its processes by variant (ROUND_VARIANTS); ``placed``: per lease, each
    process's ``--addresses`` record by name; ``gpus``: per lease, its GPU; ``contrast``: per folder shown, processes
    that draw each round's blocks anew on the one stream (``reuse`` and one other variant), from other leases."""
    names = list(leases)
    count = NUMBERS.get(len(names), str(len(names))).capitalize()
    cases = sorted(leases[names[0]]["reuse"][0].cases)
    forward = [i for i in cases if i not in SHARED]
    apart = len({gpus[n] for n in names}) == len(names)
    out = [
        "## 5. A new stream per round of the suite or per case-round, and the blocks a round lands on",
        "",
        f"{count} more lease{'s' if len(names) > 1 else ''}"
        + (", each on its own GPU" if apart and len(names) > 1 else "")
        + " ("
        + "; ".join(f"{n}: `{gpus[n]}`, {len(leases[n]['reuse'])} processes a variant" for n in names)
        + "), the processes in turn: `reuse` (the profiler then), `round-stream` (a new stream from PyTorch's "
        "pool for each round of the suite, shared by every case of that round) and `stream` (a stream for each "
        "case-round, as in section 1: the pool hands out its streams in turn, so one comes back after as many "
        f"case-rounds as the pool holds, with the blocks the allocator cached on it), over {len(cases)} cases "
        f"({', '.join(cases)}). Each process recorded, for every case-round, the stream its build ran on and the "
        "blocks the allocator handed it (`--addresses`). Each lease on its own; the last column compares the means.",
        "",
        "| lease | case | µs | sd, reuse | sd, round-stream | sd, stream | fives within 0.5%, reuse | "
        "fives, round-stream | fives, stream | stream / reuse (means) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        variants = leases[n]
        for i in cases:
            m = {v: [median_of(q.cases[i]) for q in variants[v]] for v in ROUND_VARIANTS}
            centre = statistics.median(m["reuse"] + m["round-stream"] + m["stream"])
            cells = [pct(statistics.stdev(m[v]) / centre) for v in ROUND_VARIANTS]
            cells += [f"{share_within(m[v]):.0%}" for v in ROUND_VARIANTS]
            cells.append(pct(statistics.fmean(m["stream"]) / statistics.fmean(m["reuse"]) - 1, sign=True))
            out.append(f"| {n} | {i} | {centre:,.1f} | " + " | ".join(cells) + " |")
    results = [_lease_result(n, leases[n], placed[n]) for n in names]
    out += ["", *(f"- {r.facts}" for r in results), ""]
    out += _blocks_lines(results, contrast)
    out += _co_movement_lines(names, leases, placed)
    out += _forward_lines(names, leases, forward)
    return out


def _blocks_lines(results: list[LeaseResult], contrast: dict[str, dict[str, list[Process]]]) -> list[str]:
    """The verdict on a new stream, and what blocks drawn anew on the one stream did in other leases."""
    every = {v: all(r.p[v] < 0.05 for r in results) for v in NEW_STREAMS}
    finer = [r for r in results if r.p_between < 0.05]
    weakest = max(r.ratio[v] for r in results for v in NEW_STREAMS if every[v]) if any(every.values()) else None
    against = []
    for folder, variants in contrast.items():
        other = next(v for v in variants if v != "reuse")
        own = {v: shared_levels(variants[v]) for v in ("reuse", other)}
        ratio, low, high = sd_ratio_interval(own["reuse"], own[other])
        p_other = variance_ratio_p(own["reuse"], own[other])[1]
        against.append((folder, other, len(variants[other]), ratio, low, high, p_other))
    if every["stream"] and every["round-stream"]:
        verdict = (
            "In every lease both a stream per case-round and a stream per round of the suite narrowed the shared "
            "level: a new stream for each round of the suite, shared by its cases, is enough to narrow it."
        )
    elif every["stream"]:
        verdict = "In every lease a stream per case-round narrowed the shared level; a stream per round of the suite "
        verdict += "did not in every one."
    elif every["round-stream"]:
        verdict = "In every lease a stream per round of the suite narrowed the shared level; a stream per case-round "
        verdict += "did not in every one."
    else:
        verdict = "A new stream per round did not narrow the shared level in every lease."
    verdict += (
        " A stream per case-round was narrower still in lease "
        + ", ".join(f"{r.name} ({p_text(r.p_between)})" for r in finer)
        + "."
        if finer
        else " A stream per case-round was not shown narrower than a stream per round of the suite in any lease."
    )
    out = [verdict, ""]
    if not against:
        return out
    out += [
        "From other leases and GPUs, variants that give each round other blocks on the process's one stream (none "
        "recorded its addresses): "
        + "; ".join(
            f"`{other}` in `{folder}`, {n} processes: its shared level's sd {ratio:.2f} times as it is (95% "
            f"interval {low:.2f}–{high:.2f}; {p_text(p_other)} that it is narrower)"
            for folder, other, n, ratio, low, high, p_other in against
        )
        + ".",
        "",
    ]
    narrowed = [a for a in against if a[6] < 0.05]
    if narrowed:
        out.append(
            "Blocks drawn anew on the one stream narrowed it too ("
            + ", ".join(f"`{a[1]}`" for a in narrowed)
            + "): the level may follow the blocks a round lands on as much as its stream."
        )
    elif weakest is not None:
        excluded = [a for a in against if a[4] > weakest]
        undecided = [a for a in against if a[4] <= weakest]
        out.append(
            "Blocks drawn anew on the one stream were not shown to narrow it"
            + (
                "; "
                + ", ".join(f"`{a[1]}`'s interval" for a in excluded)
                + f" excludes a narrowing as large as a new stream's here (to {weakest:.2f} times or less)"
                + (
                    ", " + ", ".join(f"`{a[1]}`'s ({a[2]} processes)" for a in undecided) + " does not"
                    if undecided
                    else ""
                )
                if excluded
                else ", nor do their intervals exclude a narrowing as large as a new stream's here"
            )
            + ". A new stream brings the stream itself and blocks of its own: PyTorch's allocator keeps each "
            "stream's freed blocks apart, so a new stream's rounds are built on addresses the process had not used "
            "before while the old streams' blocks stay held, where emptying the cache gives the memory back to the "
            "driver, which may hand the same pages out again. These data do not tell the stream from its blocks."
        )
    out.append("")
    return out


def moving_together(found: list[tuple[str, CoMove]]) -> str:
    """What pairs of one kind did, lease by lease: they move together where the interval of their correlation lies
    above 0."""
    moving = [n for n, c in found if c.low > 0]
    if len(moving) == len(found):
        return "move together"
    return f"move together in lease {', '.join(moving)} only" if moving else "were not shown to move together"


def _co_movement_lines(
    names: list[str], leases: dict[str, dict[str, list[Process]]], placed: dict[str, dict[str, list[dict[str, Any]]]]
) -> list[str]:
    co = {n: {v: co_movement(leases[n][v], placed[n]) for v in ROUND_VARIANTS} for n in names}
    out = [
        f"Within a process, two rounds of different cases among {', '.join(SHARED)} (each round's median about its "
        "case's median in the process): their correlation by whether they ran in the same round of the suite and on "
        "the same stream, with a 95% interval from resampling the processes; then the number of pairs and the share of "
        "block "
        "addresses the two rounds had in common.",
        "",
        "| lease | variant | " + " | ".join(CO_MOVEMENT) + " |",
        "|---|---|" + "---:|" * len(CO_MOVEMENT),
    ]
    for n in names:
        for v in ROUND_VARIANTS:
            cells = [
                f"{c.r:+.2f} ({c.low:+.2f} to {c.high:+.2f}; {c.pairs:,}; {c.shared_blocks:.0%})"
                if (c := co[n][v].get(k))
                else "—"
                for k in CO_MOVEMENT
            ]
            out.append(f"| {n} | {v} | " + " | ".join(cells) + " |")

    def said(kind: str, v: str, subject: str) -> str:
        found = [(n, co[n][v][kind]) for n in names if kind in co[n][v]]
        if not found:
            return ""
        word = moving_together(found)
        values = ", ".join(f"{c.r:+.2f}" for _, c in found)
        blocks = _span([c.shared_blocks for _, c in found])
        return f"{subject} {word} (r = {values}; {blocks} of their block addresses in common)."

    sentences = [
        said(CO_MOVEMENT[0], "reuse", "With the process's one stream, rounds of one round of the suite"),
        said(
            CO_MOVEMENT[1], "stream", "With a stream per case-round, rounds on one stream in other rounds of the suite"
        ),
        said(CO_MOVEMENT[2], "stream", "Rounds of one round of the suite on other streams"),
        said(CO_MOVEMENT[0], "round-stream", "With a stream per round of the suite, rounds of one round"),
    ]
    out += [
        "",
        " ".join(s for s in sentences if s)
        + " Where rounds on one stream share blocks cached on it, the stream and its blocks are not told apart.",
        "",
    ]
    return out


def _forward_lines(names: list[str], leases: dict[str, dict[str, list[Process]]], forward: list[str]) -> list[str]:
    """The cases outside the shared four under a stream per case-round: their spread, their level, the slowest
    process."""
    if not forward:
        return [RULE, ""]
    held = all(
        statistics.stdev([median_of(q.cases[i]) for q in leases[n]["stream"]])
        <= statistics.stdev([median_of(q.cases[i]) for q in leases[n]["reuse"]])
        for n in names
        for i in forward
    )
    shifts, slowest, slowest_reuse = [], [], []
    for n in names:
        reuse, stream = leases[n]["reuse"], leases[n]["stream"]
        for i in forward:
            centre = statistics.fmean(median_of(q.cases[i]) for q in reuse)
            gap, p = mean_gap_p(
                [median_of(q.cases[i]) / centre - 1 for q in reuse],
                [median_of(q.cases[i]) / centre - 1 for q in stream],
            )
            shifts.append(f"{i} {pct(gap, sign=True)} in lease {n} ({p_text(p)})")
        centres = {i: statistics.median(median_of(q.cases[i]) for q in reuse) for i in forward}
        offset = {
            v: [statistics.median(median_of(q.cases[i]) / centres[i] - 1 for i in forward) for q in leases[n][v]]
            for v in ("reuse", "stream")
        }
        slowest.append(max(offset["stream"]))
        slowest_reuse.append(max(offset["reuse"]))
    return [
        "Section 3's runner with a stream per case-round read fewer cases within 0.5% than the runner as it is, "
        "against commands on another GPU in another lease, with forward cases slow in some processes where do_bench "
        "in the "
        f"same processes was not. Here the forward cases' ({', '.join(forward)}) standard deviation was "
        + (
            "no larger with a stream per case-round in any lease"
            if held
            else "larger with a stream per case-round in at least one lease"
        )
        + f"; their means move by {'; '.join(shifts)}; the slowest `stream` process reads them "
        + ", ".join(f"{pct(s, sign=True)} (lease {n})" for s, n in zip(slowest, names, strict=True))
        + " from the `reuse` processes' median, the slowest `reuse` process "
        + ", ".join(f"{pct(s, sign=True)}" for s in slowest_reuse)
        + ".",
        "",
        RULE,
        "",
    ]


RULE = (
    "The runner stayed on the process's stream until one lease compared the two over both suites, with the rule "
    "set beforehand: take a stream per case-round if the expected number of cases ≥ 100 µs within 0.5% over every "
    "five rises and the 95% bootstrap interval of the geometric-mean sd ratio lies below 1 "
    "(`bench/h200_placement_report.py`'s measures; `bench/h200_adopt.py` applies the rule): "
    "`REDRAW_SUITES='examples/llama7b.toml bench/validation/suite.toml' REDRAW_VARIANTS='stream reuse' bash "
    "bench/h200_truth.sh redraw N`, then `python bench/h200_adopt.py DATA --keep reuse --candidate stream`."
)


ADOPT_SHIFT = 0.0025  # a case whose median moved more than this between the ways of timing is named


def level_shifts(kept: list[Process], candidate: list[Process], ids: list[str]) -> dict[str, float]:
    """Per case, the candidate processes' median of their medians relative to the kept ones' (0.001 = 0.1% slower)."""
    return {
        i: statistics.median(median_of(p.cases[i]) for p in candidate)
        / statistics.median(median_of(p.cases[i]) for p in kept)
        - 1
        for i in ids
    }


def shifted_cases(kept: list[Process], candidate: list[Process], ids: list[str], alpha: float = 0.05) -> list[str]:
    """The cases whose process medians differ between the groups at ``alpha`` (two-sided Mann–Whitney U)."""
    from scipy.stats import mannwhitneyu

    return [
        i
        for i in ids
        if mannwhitneyu([median_of(p.cases[i]) for p in kept], [median_of(p.cases[i]) for p in candidate]).pvalue
        < alpha
    ]


def deciding_lease(leases: dict[str, dict[str, list[Process]]]) -> str | None:
    """The first lease with the processes ``bench/h200_adopt.py`` asks for of both ``reuse`` and ``stream``."""
    from bench.h200_adopt import MIN_PROCESSES

    return next(
        (n for n, v in leases.items() if min(len(v.get("reuse", [])), len(v.get("stream", []))) >= MIN_PROCESSES),
        None,
    )


def adopt_section(leases: dict[str, dict[str, list[Process]]], gpus: dict[str, str]) -> list[str]:
    """Section 6: the rule of ``bench/h200_adopt.py`` applied to the lease that has the processes it asks for (the
    first with enough of both), and what the other leases add."""
    from bench.h200_adopt import cases_to_decide, decide
    from bench.h200_adopt import render as render_decision
    from bench.h200_placement_report import sd_ratio_ci, sd_ratio_p

    deciding = deciding_lease(leases)
    lines = [
        "## 6. The decision: a stream per case-round over both suites, in one lease",
        "",
        "The rule was set, and committed as `bench/h200_adopt.py`, before this lease: over the cases of 100 µs and "
        "more, a stream per case-round (`stream`) is taken up only if the expected number of cases within 0.5% over "
        "every five processes rises and the 95% bootstrap interval of the standard-deviation ratio lies below 1, with "
        "at least eight processes a side. Processes alternated between `stream` and the runner as it then was "
        "(`reuse`: every round on the process's current stream), each profiling both suites.",
        "",
    ]
    if deciding is None:
        return [*lines, "No lease has eight processes of each: the rule cannot decide.", ""]
    kept, candidate = leases[deciding]["reuse"], leases[deciding]["stream"]
    decision = decide(kept, candidate)
    ids, _ = cases_to_decide(kept, candidate)
    lines += [
        f"**Lease {deciding}** (GPU {gpus[deciding][4:12]}), "
        f"`python bench/h200_adopt.py {{data}}/adopt/{deciding} --keep reuse --candidate stream`:",
        "",
        render_decision(decision, "reuse", "stream"),
        "",
    ]
    all_ids = sorted(set.intersection(*(set(p.cases) for p in kept + candidate)))
    shifts = level_shifts(kept, candidate, all_ids)
    heavy_shifts = [shifts[i] for i in ids]
    moved = sorted((i for i in ids if abs(shifts[i]) > ADOPT_SHIFT), key=lambda i: -abs(shifts[i]))
    light = [shifts[i] for i in all_ids if i not in ids]
    apart = shifted_cases(kept, candidate, all_ids)
    lines += [
        f"**Levels.** Over the {len(ids)} cases of 100 µs and more, `stream`'s median of process medians stood "
        f"{pct(statistics.median(heavy_shifts), sign=True)} from `reuse`'s at the median case "
        f"({pct(min(heavy_shifts), sign=True)} to {pct(max(heavy_shifts), sign=True)}); "
        + (
            f"moved more than {pct(ADOPT_SHIFT)}: " + ", ".join(f"{i} {pct(shifts[i], sign=True)}" for i in moved)
            if moved
            else f"none moved more than {pct(ADOPT_SHIFT)}"
        )
        + (
            f"; the {len(light)} shorter cases {pct(min(light), sign=True)} to {pct(max(light), sign=True)}"
            if light
            else ""
        )
        + f". Of all {len(all_ids)} cases, {len(apart)} read other medians at p < 0.05 (Mann–Whitney on the process "
        f"medians, case by case; {0.05 * len(all_ids):.1f} expected by chance)"
        + (": " + ", ".join(f"{i} {pct(shifts[i], sign=True)}" for i in apart) if apart else "")
        + ". A comparison across the change lists it (`attnprof timing`), as it lists a new torch.",
        "",
    ]
    others = []
    for name, variants in leases.items():
        if name == deciding:
            continue
        k, c = variants.get("reuse", []), variants.get("stream", [])
        if min(len(k), len(c)) >= 3:
            ratio = sd_ratio_p(k, c, ids)[0]
            low, high = sd_ratio_ci(k, c, ids)
            others.append(
                f"lease {name} (GPU {gpus[name][4:12]}, {len(k)} processes of each): standard deviation {ratio:.2f} "
                f"times `reuse`'s, 95% interval {low:.2f}–{high:.2f}"
            )
        else:
            others.append(
                f"lease {name} (GPU {gpus[name][4:12]}): {len(k)} and {len(c)} processes, too few for a spread"
            )
    if others:
        lines += [
            "**Other GPUs.** The device lent later commands other machines; too few processes for the rule, they "
            "are shown, not weighed: " + "; ".join(others) + ".",
            "",
        ]
    lines += [
        f"**Verdict:** {'take up' if decision.adopt else 'keep'} "
        + (
            "a stream per case-round. The runner now builds, warms up and times each case-round on a new stream "
            "from PyTorch's pool (`SuiteSession.new_round_stream`), in profile and paired runs alike, and the "
            "result document's `attnprof timing` says so."
            if decision.adopt
            else "the process's one stream."
        ),
        "",
    ]
    return lines


def plot_adopt(kept: list[Process], candidate: list[Process], ids: list[str], path: Path) -> None:
    """Section 6: each case's standard deviation of process medians, one stream against a stream per case-round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def sd(group: list[Process], i: str) -> float:
        values = [median_of(p.cases[i]) for p in group]
        centre = statistics.median(values)
        return statistics.stdev(v / centre - 1 for v in values) * 100

    x = [sd(kept, i) for i in ids]
    y = [sd(candidate, i) for i in ids]
    fig, ax = plt.subplots(figsize=(5.6, 5.2))
    ax.scatter(x, y, s=22, alpha=0.8, color="#1f77b4")
    low, top = min(x + y) / 1.3, max(x + y) * 1.3
    ax.plot([low, top], [low, top], color="grey", lw=1, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, top)
    ax.set_ylim(low, top)
    ax.set_xlabel("one stream (the runner before): sd of process medians, %")
    ax.set_ylabel("a stream per case-round: sd of process medians, %")
    ax.set_title(
        f"Cases of 100 µs and more, {len(kept)} processes a side, one H200 (section 6);\nbelow the line: narrower",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
        ax.set_xticklabels(["one stream\n(the profiler then)", "a stream\nper round"])
        ax.set_xlim(-0.6, len(labels) - 0.4)
        ax.set_title(i, fontsize=9)
    axes[0].set_ylabel("process median, % from all processes' median")
    fig.suptitle("One H200, processes alternating; green: ±0.25%", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_levels(by_lease: dict[str, dict[str, list[Process]]], path: Path) -> None:
    """Section 5: each process's shared level, by variant, one panel per lease."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"reuse": "#d62728", "round-stream": "#ff7f0e", "stream": "#1f77b4"}
    fig, axes = plt.subplots(1, len(by_lease), figsize=(5 * len(by_lease), 4.2), sharey=True, squeeze=False)
    for ax, (lease, variants) in zip(axes[0], by_lease.items(), strict=True):
        pooled = shared_levels([q for v in ROUND_VARIANTS for q in variants[v]])
        start = 0
        for x, v in enumerate(ROUND_VARIANTS):
            values = [level * 100 for level in pooled[start : start + len(variants[v])]]
            start += len(variants[v])
            ax.scatter([x + (k % 5 - 2) * 0.05 for k in range(len(values))], values, s=16, alpha=0.8, color=colours[v])
        ax.axhspan(-TARGET * 50, TARGET * 50, color="#2ca02c", alpha=0.12)
        ax.set_xticks(range(len(ROUND_VARIANTS)))
        ax.set_xticklabels(
            ["one stream\n(the profiler then)", "a stream per\nround of the suite", "a stream per\ncase-round"]
        )
        ax.set_title(f"lease {lease}: {len(variants['reuse'])} processes a variant", fontsize=9)
    axes[0][0].set_ylabel("shared level, % from all processes' median")
    fig.suptitle("The level four cases share per process (section 5); green: ±0.25%", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(
    data: Path, before: Path, png_name: str, placed_dirs: list[Path]
) -> tuple[str, dict[str, list[Process]], dict[str, dict[str, list[Process]]], dict[str, dict[str, list[Process]]]]:
    provenance = json.loads((data / "provenance.json").read_text())
    versions = (data / "versions.txt").read_text().strip()

    variants = load_variants(data / "stream")
    pins = load_variants(data / "pin")
    leases = len(provenance["leases"])
    lines = [
        "# The level a process shares: the host's CPUs, a stream per round, a stream per round over both suites, one "
        "non-default stream, a stream per round of the suite; the runner takes up a stream per case-round",
        "",
        f"From {NUMBERS.get(leases, leases)} leases on {provenance['date']} (raw data in `{shown(data)}`, "
        "recomputed by this report's script; "
        f"the profiler at {provenance['commit']}). GPUs: {lease_gpus(provenance)}. Software: {versions}; driver "
        f"{provenance['driver']}; clocks not locked.",
        "",
        "```bash",
        *provenance["commands"],
        f"python bench/h200_stream_report.py --data {shown(data)} --before {shown(before)} "
        + "".join(f"--placed {shown(d)} " for d in placed_dirs)
        + "--out bench/reports/h200-stream.md",
        "```",
        "",
    ]
    lines += ab_section(variants)
    lines += [f"![process medians, one stream against a stream per round]({png_name})", ""]
    lines += pin_section(pins, (data / "pin" / "topo.txt").read_text())
    before_gpu = json.loads((before / "provenance.json").read_text())["leases"]["a"]["gpu"]
    lines += runs_section(load_runs(data / "runs"), {k: load_runs(before / k) for k in ("a", "b")}, before_gpu)
    lines += one_stream_section(load_variants(data / "one-stream"), shared_levels(variants["stream"]))
    folders = sorted(p for p in (data / "round-stream").iterdir() if p.is_dir())
    by_lease = {f.name: load_variants(f) for f in folders}
    placed = {f.name: {q.name: load_placed(f, q.name) for ps in by_lease[f.name].values() for q in ps} for f in folders}
    gpus = {f.name: provenance["leases"][f"round-stream {f.name}"]["gpu"] for f in folders}
    lines += round_stream_section(by_lease, placed, gpus, {shown(d): load_variants(d) for d in placed_dirs})
    lines += [f"![shared levels by variant and lease]({Path(png_name).stem}-levels.png)", ""]
    from bench.h200_placement_report import load_both  # it reads this module's constants: imported here

    adopt = {f.name: load_both(f) for f in sorted(p for p in (data / "adopt").iterdir() if p.is_dir())}
    lines += [
        line.replace("{data}", shown(data))
        for line in adopt_section(adopt, {k: provenance["leases"][f"adopt {k}"]["gpu"] for k in adopt})
    ]
    lines += [
        f"![standard deviations, one stream against a stream per case-round]({Path(png_name).stem}-adopt.png)",
        "",
    ]
    return "\n".join(lines), variants, by_lease, adopt


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--before", type=Path, required=True, help="the rounds report's data (one stream)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--placed", type=Path, action="append", default=[], help="h200_redraw processes drawing blocks anew (section 5)"
    )
    args = parser.parse_args()
    png = args.out.with_suffix(".png")
    text, variants, by_lease, adopt = render(args.data, args.before, png.name, args.placed)
    args.out.write_text(text)
    plot(variants, png)
    levels = png.with_name(f"{png.stem}-levels.png")
    plot_levels(by_lease, levels)
    written = [args.out, png, levels]
    deciding = deciding_lease(adopt)
    if deciding is not None:
        written.append(png.with_name(f"{png.stem}-adopt.png"))
        kept = adopt[deciding]["reuse"]
        plot_adopt(kept, adopt[deciding]["stream"], heavy(kept), written[-1])
    print(f"wrote {', '.join(map(str, written))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
