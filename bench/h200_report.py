"""The profiler core on the H200: the committed report, generated from the raw documents beside it.

    .venv/bin/python bench/h200_report.py --data bench/reports/data/h200-2026-11-29 \\
        --out bench/reports/h200-profiler-core.md

Reads what ``bench/h200_profile.sh all N`` produced on the GPU host, in two sets (two machine leases):
``set-a/`` and ``set-b/``, each with ``runN.json`` (result documents of independent ``attnprof profile``
processes, run 1 with cold compile caches), ``dobenchN.json`` ({case id: do_bench median µs}, one process
right after profile run N), ``walls.jsonl`` (process wall times) and ``versions.txt``; ``set-b/ncu.json``
is a ``--counters ncu`` run. Writes the markdown report and two plots beside it (``h200-stability.png``,
``h200-kernels.png``). Torch-free and deterministic: the same data gives the same files. Exits with a
message naming what is missing when the data is incomplete.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnprof.core.documents import PHASES, Case, Kernel, ResultDocument, load_result  # noqa: E402
from attnprof.core.errors import DocumentError  # noqa: E402
from attnprof.core.model import dtype_peak_key, ridge_point  # noqa: E402
from attnprof.core.report import KERNEL_COLUMNS, case_headline, kernel_rows  # noqa: E402

SETS = ("set-a", "set-b")
MIN_RUNS = 3
# Cases whose per-kernel table section 1 shows, in this order.
TABLE_CASES = (
    "sdpa[backend=math,pass=fwd]",
    "sdpa[backend=cudnn,pass=fwd]",
    "sdpa[backend=flash,pass=fwd]",
    "sdpa[backend=efficient,pass=fwd]",
    "flex[pass=fwd]",
    "compiled_naive[pass=fwd]",
    "sdpa[backend=cudnn,pass=fwd_bwd]",
)
TABLE_RUN = ("set-b", 2)  # the document the per-kernel tables come from
NCU_VERSION = "2025.3.1"  # as installed on the GPU host; the documents do not record it
HEAVY_SHARE = 0.05  # kernels that take at least this share of a case's kernel time (the ncu selection)
DURATION_TOL = 0.03  # target: per-launch duration within 3% of ncu's
TINY_US = 5.0  # per-launch durations under this: ncu's replay overhead dominates
MIXED_RATIO = (0.75, 1 / 0.75)  # several launches per iteration and a ratio outside this: launches differ
SPREAD_TARGET = 0.005  # target: spread of medians <= 0.5% for cases of >= 100 µs
LONG_CASE_US = 100.0
SUITE_TARGET_S = 60.0
TARGET_CI = 0.002  # the suite's target_rel_ci: sampling stops when the median's 95% CI is within ±0.2%
CLOCK_DROP_SUSPECT = 0.10  # as attnprof.core.measure.environment (which imports torch): a run's suspect threshold
# Expected range of n standard normal draws (d2 of quality control), for the sampling-only spread.
D2 = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 9: 2.970, 10: 3.078}
KINDS = (
    "agree",
    "latency / compute",
    "latency / memory",
    "ncu balanced",
    "memory / compute",
    "no bound from our model",
)
AGREEMENT_TARGET = 0.90
NCU = {
    "dur": "gpu__time_duration.sum",
    "read": "dram__bytes_read.sum",
    "write": "dram__bytes_write.sum",
    "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "mem": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "occ": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "tensor": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
}
# What a mixed key's launches are, where known.
MIXED_NOTES = {
    "elementwise:copy_bf16": "in the math path the fp32→bf16 conversions of the 32×2048×2048 probabilities "
    "(ncu's first launch) and of the 32×2048×128 output share one key",
}
FILE_ROLES = {
    "run": "result document (`attnprof.result/v1`) of one independent `attnprof profile` process",
    "dobench": "{case id: `triton.testing.do_bench` median µs}, one process right after the profile run of "
    "the same number",
    "ncu.json": "result document of a `--counters ncu` run: `kernels[].counters` from Nsight Compute, "
    "`counter_bound`, per-case `counters_wall_s`",
    "walls.jsonl": "process wall time of each run (`run`: number or `ncu`, exit code, seconds, UTC end time)",
    "versions.txt": "torch / CUDA / cuDNN / Triton / Python versions printed on the host before the runs",
    "nvidia-smi-start.csv": "`nvidia-smi` reading (clocks, power, temperature) before the runs",
    "nvidia-smi-end.csv": "`nvidia-smi` reading after the runs",
}


def fmt_us(x: float | None) -> str:
    """A duration in µs as the committed reports print it, number only (the caller writes "µs" after it)."""
    if x is None:
        return "—"
    return f"{x:,.1f}" if x >= 10 else f"{x:.2f}"


class DataError(SystemExit):
    def __init__(self, message: str) -> None:
        super().__init__(f"h200_report: {message}")


# --------------------------------------------------------------------------------------------- data


@dataclass
class RunSet:
    name: str
    path: Path
    runs: list[ResultDocument]
    dobench: list[dict[str, float | None]]
    walls: list[dict[str, Any]]
    versions: str

    @property
    def label(self) -> str:
        return self.name.removeprefix("set-")


@dataclass
class Data:
    root: Path
    sets: dict[str, RunSet]
    ncu: ResultDocument
    case_ids: list[str]


def _need(path: Path) -> Path:
    if not path.is_file():
        raise DataError(f"missing {path}")
    return path


def _numbered(folder: Path, stem: str) -> list[int]:
    pattern = re.compile(rf"{stem}(\d+)\.json")
    numbers = sorted(int(m.group(1)) for p in folder.glob(f"{stem}*.json") if (m := pattern.fullmatch(p.name)))
    if numbers != list(range(1, len(numbers) + 1)):
        raise DataError(f"{folder}: {stem}N.json files are not numbered 1..N: {numbers}")
    return numbers


def _load_doc(path: Path) -> ResultDocument:
    try:
        return load_result(_need(path))
    except DocumentError as exc:
        raise DataError(str(exc)) from exc


def _load_set(folder: Path) -> RunSet:
    if not folder.is_dir():
        raise DataError(f"missing folder {folder}")
    numbers = _numbered(folder, "run")
    if len(numbers) < MIN_RUNS:
        raise DataError(f"{folder}: {len(numbers)} run documents, at least {MIN_RUNS} needed")
    runs = [_load_doc(folder / f"run{i}.json") for i in numbers]
    dobench = []
    for i in numbers:
        raw = json.loads(_need(folder / f"dobench{i}.json").read_text())
        if not isinstance(raw, dict):
            raise DataError(f"{folder}/dobench{i}.json: expected {{case id: µs}}")
        dobench.append(raw)
    walls = [json.loads(line) for line in _need(folder / "walls.jsonl").read_text().splitlines() if line.strip()]
    have = {w.get("run") for w in walls}
    if missing := [i for i in numbers if i not in have]:
        raise DataError(f"{folder}/walls.jsonl: no wall time for runs {missing}")
    return RunSet(folder.name, folder, runs, dobench, walls, _need(folder / "versions.txt").read_text().strip())


def load_data(root: Path) -> Data:
    sets = {name: _load_set(root / name) for name in SETS}
    ncu = _load_doc(root / "set-b" / "ncu.json")
    case_ids = [c.id for c in sets["set-a"].runs[0].cases]
    for rs in sets.values():
        for i, doc in enumerate(rs.runs, 1):
            ids = [c.id for c in doc.cases]
            if ids != case_ids:
                raise DataError(f"{rs.path}/run{i}.json: cases {ids} differ from {case_ids}")
            for c in doc.cases:
                if c.status != "ok" or c.latency_us is None:
                    raise DataError(f"{rs.path}/run{i}.json: case {c.id} is {c.status} without a latency")
        for i, db in enumerate(rs.dobench, 1):
            if missing := [cid for cid in case_ids if db.get(cid) is None]:
                raise DataError(f"{rs.path}/dobench{i}.json: no median for {missing}")
    if [c.id for c in ncu.cases] != case_ids:
        raise DataError("set-b/ncu.json: its cases differ from the profile runs'")
    if ncu.run.counters != "ncu" or not any(k.counters for c in ncu.cases for k in c.kernels):
        raise DataError("set-b/ncu.json: not a --counters ncu run (no kernel carries counters)")
    for c in ncu.cases:
        if c.wall_s is None or c.counters_wall_s is None:
            raise DataError(f"set-b/ncu.json: case {c.id} lacks wall_s or counters_wall_s")
    return Data(root, sets, ncu, case_ids)


# --------------------------------------------------------------------------------------------- stats


def spread(values: Sequence[float]) -> float:
    """(max - min) / median."""
    return (max(values) - min(values)) / statistics.median(values)


def median_ci_half(samples: Sequence[float], level: float = 0.95) -> float:
    """Relative half-width of the distribution-free CI of the median (as ``measure.timing.median_ci``)."""
    x = sorted(samples)
    n = len(x)
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return (x[hi] - x[lo]) / 2 / statistics.median(x)


def expected_sampling_spread(runs: int) -> float:
    """Expected (max - min) / median of ``runs`` medians that differ only by sampling error (95% CI ±TARGET_CI)."""
    if runs not in D2:
        raise DataError(f"no expected-range constant for {runs} runs")
    return D2[runs] * TARGET_CI / 1.96


def short_case(case_id: str) -> str:
    """'sdpa[backend=math,pass=fwd]' -> 'math fwd'; 'flex[pass=fwd_bwd]' -> 'flex fwd_bwd'; 'block' -> 'block'."""
    m = re.fullmatch(r"(\w+)\[(.*)\]", case_id)
    if not m:
        return case_id
    params = dict(p.split("=", 1) for p in m.group(2).split(",") if "=" in p)
    head = params.get("backend", m.group(1))
    return " ".join(x for x in (head, params.get("pass")) if x)


def short_key(key: str, width: int = 40) -> str:
    return key if len(key) <= width else key[: width - 1] + "…"


def rng(values: Iterable[float | None], fmt: str = "{:.0f}%", *, scale: float = 100.0) -> str:
    """'lo–hi' of the values (scaled), or the single value when they are equal at this precision."""
    xs = [scale * v for v in values if v is not None]
    if not xs:
        return "—"
    lo, hi = fmt.format(min(xs)), fmt.format(max(xs))
    if lo == hi:
        return lo
    return f"{lo} to {hi}" if lo[0] in "+-" or hi[0] in "+-" else f"{lo}–{hi}"


def ncu_rng(rows: Iterable[NcuRow], metric: str) -> str:
    """'lo–hi%' of one ncu percentage over the rows."""
    return rng((r.c(metric) for r in rows), "{:.0f}%", scale=1.0)


def pct(x: float | None, digits: int = 0) -> str:
    return "—" if x is None else f"{100 * x:.{digits}f}%"


def num(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return [*out, ""]


def case_of(doc: ResultDocument, case_id: str) -> Case:
    case = doc.case(case_id)
    if case is None:
        raise DataError(f"case {case_id} not in run {doc.run.id}")
    return case


def kernel_of(case: Case, key: str, phase: str | None = None) -> Kernel:
    """The case's kernel whose key contains ``key`` (and in ``phase``): exactly one, or a loud failure."""
    found = [k for k in case.kernels if key in k.key and (phase is None or k.phase == phase)]
    if len(found) != 1:
        raise DataError(f"{case.id}: {len(found)} kernels match key {key!r} phase {phase!r}, expected 1")
    return found[0]


def per_launch_us(k: Kernel) -> float:
    return k.duration_us.median / k.launches_per_iter


@dataclass
class CaseStability:
    medians: list[float]
    dobench: list[float]
    samples: list[int]
    cvs: list[float]
    ci_half: list[float]
    clock_min: float | None
    clock_max: float | None

    @property
    def ours(self) -> float:
        return statistics.median(self.medians)

    @property
    def db(self) -> float:
        return statistics.median(self.dobench)

    @property
    def spread(self) -> float:
        return spread(self.medians)

    @property
    def db_spread(self) -> float:
        return spread(self.dobench)

    @property
    def ci_ratio(self) -> float:
        """Spread over the width of the runs' CIs (2 x mean half-width): above 1, more than sampling error."""
        return self.spread / (2 * statistics.mean(self.ci_half))


def stability(rs: RunSet, case_id: str) -> CaseStability:
    lats = [case_of(doc, case_id).latency_us for doc in rs.runs]
    clocks_lo = [lat.sm_clock_mhz_min for lat in lats if lat and lat.sm_clock_mhz_min]
    clocks_hi = [lat.sm_clock_mhz_max for lat in lats if lat and lat.sm_clock_mhz_max]
    return CaseStability(
        medians=[lat.median for lat in lats if lat],
        dobench=[float(db[case_id] or 0.0) for db in rs.dobench],
        samples=[len(lat.samples) for lat in lats if lat],
        cvs=[lat.cv for lat in lats if lat],
        ci_half=[median_ci_half(lat.samples) for lat in lats if lat],
        clock_min=min(clocks_lo) if clocks_lo else None,
        clock_max=max(clocks_hi) if clocks_hi else None,
    )


@dataclass
class NcuRow:
    case: Case
    kernel: Kernel
    ours_us: float
    ncu_us: float

    @property
    def ratio(self) -> float:
        return self.ours_us / self.ncu_us

    @property
    def heavy(self) -> bool:
        return (self.kernel.share or 0.0) >= HEAVY_SHARE

    @property
    def mixed(self) -> bool:
        """Several launches whose per-launch mean cannot stand for ncu's first launch."""
        lo, hi = MIXED_RATIO
        return self.kernel.launches_per_iter > 1 and not self.tiny and not lo <= self.ratio <= hi

    @property
    def tiny(self) -> bool:
        return self.ours_us < TINY_US

    def c(self, name: str) -> float | None:
        return (self.kernel.counters or {}).get(NCU[name])


def ncu_rows(doc: ResultDocument) -> list[NcuRow]:
    rows = []
    for case in doc.cases:
        for k in case.kernels:
            if k.counters and NCU["dur"] in k.counters:
                rows.append(NcuRow(case, k, per_launch_us(k), k.counters[NCU["dur"]] / 1000.0))
    if not rows:
        raise DataError("ncu.json: no kernel with gpu__time_duration.sum")
    return rows


def disagreement(ours: str | None, theirs: str | None) -> str:
    if ours == theirs:
        return "agree"
    if ours is None:
        return "no bound from our model"
    if theirs == "balanced":
        return "ncu balanced"
    pair = {ours, theirs}
    if pair == {"latency", "compute"}:
        return "latency / compute"
    if pair == {"latency", "memory"}:
        return "latency / memory"
    return "memory / compute"


def floor_variant(k: Kernel, floor: float) -> str | None:
    """Our bound had its 'roofline side' floor (0.3 of peak in ``classify_bound``) been ``floor``: a kernel
    classified compute or memory with both utilisations under 0.6 and under ``floor`` becomes latency."""
    utils = [u for u in (k.compute_util, k.bandwidth_util) if u is not None]
    if k.bound in ("compute", "memory") and len(utils) == 2 and max(utils) < min(floor, 0.6):
        return "latency"
    return k.bound


# --------------------------------------------------------------------------------------------- report


class Report:
    def __init__(self, data: Data, out: Path) -> None:
        self.d = data
        self.out = out
        self.lines: list[str] = []
        self.stab = {name: {cid: stability(rs, cid) for cid in data.case_ids} for name, rs in data.sets.items()}
        self.rows = ncu_rows(data.ncu)
        self.heavy = [r for r in self.rows if r.heavy and r.kernel.counter_bound]
        self.table_doc = data.sets[TABLE_RUN[0]].runs[TABLE_RUN[1] - 1]

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    # ---- figures used in several places

    def walls(self, rs: RunSet) -> tuple[list[float], list[float], float | None]:
        numbered = sorted((w for w in rs.walls if isinstance(w.get("run"), int)), key=lambda w: w["run"])
        cold = [float(w["wall_s"]) for w in numbered if w["run"] == 1]
        warm = [float(w["wall_s"]) for w in numbered if w["run"] != 1]
        ncu = next((float(w["wall_s"]) for w in rs.walls if w.get("run") == "ncu"), None)
        return cold, warm, ncu

    def target_rows(self) -> list[list[str]]:
        rows = []
        # (a) spread no wider than do_bench's
        parts, met_a = [], True
        for name in SETS:
            st = self.stab[name]
            ok = sum(st[c].spread <= st[c].db_spread for c in self.d.case_ids)
            met_a &= ok == len(st)
            med_o = statistics.median(s.spread for s in st.values())
            med_d = statistics.median(s.db_spread for s in st.values())
            parts.append(
                f"set {name[-1]} ({len(self.d.sets[name].runs)} runs): {ok}/{len(st)} cases no wider; "
                f"median spread over cases {pct(med_o, 2)} ours vs {pct(med_d, 2)} do_bench"
            )
        rows.append(
            [
                "(a) spread of medians over independent runs ≤ do_bench's, same cases",
                "; ".join(parts),
                "met" if met_a else "**not met**",
            ]
        )
        # (b) <= 0.5% for cases >= 100 µs
        parts, met_b = [], True
        for name in SETS:
            st = self.stab[name]
            long = [c for c in self.d.case_ids if st[c].ours >= LONG_CASE_US]
            bad = [c for c in long if st[c].spread > SPREAD_TARGET]
            met_b &= not bad
            worst = max(long, key=lambda c: st[c].spread)
            parts.append(
                f"set {name[-1]}: {len(long) - len(bad)}/{len(long)} within 0.5% (widest: {short_case(worst)} "
                f"{pct(st[worst].spread, 2)})"
            )
        rows.append(["(b) spread ≤ 0.5% for cases ≥ 100 µs", "; ".join(parts), "met" if met_b else "**not met**"])
        # (c) bound agreement
        n = len(self.heavy)
        agree = sum(r.kernel.bound == r.kernel.counter_bound for r in self.heavy)
        kinds = Counter(disagreement(r.kernel.bound, r.kernel.counter_bound) for r in self.heavy)
        detail = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])) if k != "agree")
        rows.append(
            [
                "(c) bound class agrees with ncu for ≥ 90% of kernels with ≥ 5% of a case",
                f"{agree}/{n} = {pct(agree / n)} strict; disagreements: {detail}",
                "met" if agree / n >= AGREEMENT_TARGET else "**not met**",
            ]
        )
        # (d) durations within 3%
        heavy_d = [r for r in self.rows if r.heavy]
        within_h = sum(abs(r.ratio - 1) <= DURATION_TOL for r in heavy_d)
        clean = [r for r in heavy_d if not r.mixed]
        within_c = sum(abs(r.ratio - 1) <= DURATION_TOL for r in clean)
        within_all = sum(abs(r.ratio - 1) <= DURATION_TOL for r in self.rows)
        tiny = [r for r in self.rows if r.tiny]
        rows.append(
            [
                "(d) kernel durations within 3% of ncu's (per launch)",
                f"≥ 5% kernels: {within_h}/{len(heavy_d)} ({within_c}/{len(clean)} without mixed-size launches), "
                f"median |Δ| {pct(statistics.median(abs(r.ratio - 1) for r in clean), 1)}; all kernels with "
                f"counters (tiny and mixed included): {within_all}/{len(self.rows)}; "
                f"the {len(tiny)} kernels under {TINY_US:.0f} µs read "
                f"{num(statistics.median(r.ncu_us - r.ours_us for r in tiny), 2)} µs longer under ncu (median)",
                "**not met**" if within_h < len(heavy_d) else "met",
            ]
        )
        # (e) ncu cost ratio
        ratios = [c.counters_wall_s / c.wall_s for c in self.d.ncu.cases if c.counters_wall_s and c.wall_s]
        _, warm_b, ncu_b = self.walls(self.d.sets["set-b"])
        suite = ""
        if ncu_b:
            suite = f"; whole suite {num(ncu_b, 0)} s vs {num(statistics.median(warm_b), 1)} s warm default"
        rows.append(
            [
                "(e) cost ratio of the ncu pass to default mode, per case",
                f"reported (section 4): {min(ratios):.1f}× to {max(ratios):.0f}×, median "
                f"{statistics.median(ratios):.0f}× (counters_wall_s / wall_s){suite}",
                "reported",
            ]
        )
        # (f) suite wall time
        colds: list[float] = []
        warms: list[float] = []
        for rs in self.d.sets.values():
            cold_s, warm_s, _ = self.walls(rs)
            colds += cold_s
            warms += warm_s
        longest_s = max(colds + warms)
        rows.append(
            [
                "(f) whole example suite in default mode ≤ 60 s",
                f"cold {', '.join(num(x, 1) for x in colds)} s; warm {num(min(warms), 1)}–{num(max(warms), 1)} s "
                f"(process wall times)",
                "met" if longest_s <= SUITE_TARGET_S else "**not met**",
            ]
        )
        return rows

    # ---- section 0

    def header(self) -> None:
        doc = self.table_doc
        e = doc.environment
        dev = e.device
        day = min(r.run.created_at for rs in self.d.sets.values() for r in rs.runs).strftime("%Y-%m-%d")
        self.add(
            f"# Profiler core on the NVIDIA H200 ({day}): kernels, agreement with Nsight Compute, stability, cost",
            "",
            f"Suite `examples/llama7b.toml` (`{doc.suite.name}`): one LLaMA-7B attention layer at prefill, B=1, "
            "32 heads of 128, S=2048, bf16, causal; 15 cases (SDPA with cudnn, flash, efficient and math; "
            "FlexAttention; eager and compiled matmul-softmax-matmul; fwd and fwd_bwd; and a whole block). "
            "The method (CUDA events around each iteration, a 256 MiB L2 flush before it, a blocking kernel holding "
            "the stream while the host queues the iteration, samples added until the 95% CI of the median is within "
            "±0.2%) is in `attnprof/core/measure/timing.py`; the document in `attnprof/core/documents/result.py`.",
            "",
        )
        peaks = []
        for name, rs in self.d.sets.items():
            p = rs.runs[0].environment.peaks
            peaks.append(
                f"set {name[-1]}: {num(p.dram_gbps.value, 0)} GB/s copy ({p.dram_gbps.source}), "
                + ", ".join(f"{k} {num(v.value, 1)} TFLOP/s" for k, v in p.tflops.items())
            )
        sm_arch = (dev.compute_capability or "").replace(".", "")
        gib, l2_mib = (dev.memory_bytes or 0) / 2**30, (dev.l2_bytes or 0) / 2**20
        max_clock = e.health_end.max_sm_clock_mhz if e.health_end else None
        self.add(
            *table(
                ["", ""],
                [
                    [
                        "GPU",
                        f"{dev.name} (sm_{sm_arch}, {dev.sm_count} SMs, {num(gib, 0)} GiB, L2 {num(l2_mib, 0)} MiB), "
                        f"clocks not locked (max SM clock {num(max_clock, 0)} MHz)",
                    ],
                    ["driver / CUDA / cuDNN", f"{e.driver} / {e.cuda} / {e.cudnn}"],
                    ["PyTorch / Triton / Python", f"{e.torch} / {e.triton} / {e.python}"],
                    ["Nsight Compute", f"{NCU_VERSION} (`--clock-control none`)"],
                    ["host OS", f"{e.os}"],
                    ["testbed key", f"`{e.testbed_key}` ({', '.join(f'{k} {v}' for k, v in e.testbed.items())})"],
                    ["measured peaks (cached per testbed)", "; ".join(peaks)],
                    [
                        "set a",
                        f"machine lease 1: {len(self.d.sets['set-a'].runs)} profile runs + as many do_bench runs",
                    ],
                    [
                        "set b",
                        f"machine lease 2, same code: {len(self.d.sets['set-b'].runs)} profile runs + do_bench "
                        "runs (the 5th was cut by the time budget) and one `--counters ncu` run",
                    ],
                ],
            )
        )
        self.add(
            "Produced by (GPU host, repository root, with the pydantic wheels on `PYTHONPATH`; `BUDGET_S` stops "
            "starting runs that would not fit the command's 600 s limit), then here:",
            "",
            "```bash",
            "BUDGET_S=330 bash bench/h200_profile.sh all 5   # set a (its ncu run preceded the final code)",
            "BUDGET_S=300 bash bench/h200_profile.sh all 5   # set b (run 5 did not fit the budget)",
            f"python3 bench/h200_report.py --data {self.rel(self.d.root)} --out {self.rel(self.out)}",
            "```",
            "",
            "## Targets",
            "",
            'From the issue (profiler core, "On the H200"). Figures are computed by this script from the '
            "committed documents.",
            "",
            *table(["target", "figure", "status"], self.target_rows()),
        )
        self.missed()

    def rel(self, p: Path) -> str:
        try:
            return str(p.resolve().relative_to(ROOT))
        except ValueError:
            return str(p)

    def missed(self) -> None:
        self.add("### Where a target is missed: why, and what would meet it", "")
        self.add(self.why_spread(), self.why_bounds(), self.why_durations(), "")

    def why_spread(self) -> str:
        a, b = self.stab["set-a"], self.stab["set-b"]
        ids = self.d.case_ids
        ci_max = max(h for st in (a, b) for s in st.values() for h in s.ci_half)
        fails = [
            (name, c)
            for name, st in self.stab.items()
            for c in ids
            if st[c].ours >= LONG_CASE_US and st[c].spread > SPREAD_TARGET
        ]
        ratios = [self.stab[name][c].ci_ratio for name, c in fails]
        wider = [short_case(c) for c in ids if a[c].spread > a[c].db_spread and b[c].spread > b[c].db_spread]
        eff = "sdpa[backend=efficient,pass=fwd_bwd]"
        expected = {name: expected_sampling_spread(len(rs.runs)) for name, rs in self.d.sets.items()}
        db_med = {name: statistics.median(s.db_spread for s in st.values()) for name, st in self.stab.items()}
        text = (
            f"- **(a), (b) spread.** Each run's median is precise: its 95% CI is at most ±{pct(ci_max, 2)} in "
            f"every run and case (sampling stops at ±{pct(TARGET_CI, 1)}). Sampling error alone would spread "
            f"the medians of {len(a[ids[0]].medians)} runs by about {pct(expected['set-a'], 2)} "
            f"({len(b[ids[0]].medians)} runs: {pct(expected['set-b'], 2)}; the expected range of that many "
            "normal draws). The "
            f"{len(fails)} (set, case) pairs of ≥ 100 µs that miss 0.5% — "
            + ", ".join(f"{short_case(c)} in set {name[-1]} {pct(self.stab[name][c].spread, 2)}" for name, c in fails)
            + f" — have spreads {min(ratios):.1f}–{max(ratios):.1f}× the width of their runs' CIs: the medians "
            "differ by more than their sampling error, so the spread is dominated by offsets between processes. "
            f"E.g. efficient fwd_bwd: per-run medians {', '.join(num(x, 1) for x in a[eff].medians)} µs (set a) "
            f"and {', '.join(num(x, 1) for x in b[eff].medians)} µs (set b), each ±0.2%. Our spread is wider "
            f"than do_bench's in both sets on {', '.join(wider) or 'no case'}; do_bench's own median spread "
            f"over the cases moves from {pct(db_med['set-a'], 2)} (set a) to {pct(db_med['set-b'], 2)} (set b): "
            "a range over 4–5 processes is itself a noisy statistic. "
        )
        blk = a.get("block")
        if blk and blk.clock_min and blk.clock_max and blk.clock_min < blk.clock_max:
            slow = [
                i + 1 for i, x in enumerate(blk.medians) if x > statistics.median(blk.medians) * (1 + SPREAD_TARGET)
            ]
            text += (
                f"The `block` case in set a reads {', '.join(num(blk.medians[i - 1], 1) for i in slow)} µs in "
                f"run(s) {', '.join(map(str, slow))} against a median of {num(blk.ours, 1)} µs: its clock readings "
                f"went down to {num(blk.clock_min, 0)} MHz ({pct(1 - blk.clock_min / blk.clock_max, 0)} under "
                f"{num(blk.clock_max, 0)}, power cap) there; that is under the {pct(CLOCK_DROP_SUSPECT)} `suspect` "
                "threshold and `sw_power_cap` counts as benign, so no run was flagged. "
            )
        return text + (
            "What would meet it: (1) gate on several processes, not one (the regression analysis pools runs and "
            "models the run-to-run variance); (2) if the offsets come from where the buffers land in memory "
            "(a reading, not verified here), re-allocate the inputs between sample batches so that one run "
            "averages over placements; (3) flag a case whose clock readings fell below the maximum (not only by "
            "10%) and re-time it after a pause; (4) a tighter stop (±0.1%, 4× the samples) halves the sampling "
            "part; (5) judge the targets on ≥ 10 processes."
        )

    def why_bounds(self) -> str:
        n = len(self.heavy)
        agree = sum(r.kernel.bound == r.kernel.counter_bound for r in self.heavy)
        lenient = sum(
            r.kernel.bound == r.kernel.counter_bound
            or (r.kernel.counter_bound == "balanced" and r.kernel.bound in ("compute", "memory"))
            for r in self.heavy
        )
        floors = {f: sum(floor_variant(r.kernel, f) == r.kernel.counter_bound for r in self.heavy) for f in (0.4, 0.5)}
        kind = {k: [r for r in self.heavy if disagreement(r.kernel.bound, r.kernel.counter_bound) == k] for k in KINDS}
        parts = [
            f"- **(c) bound agreement.** {agree}/{n} strict; counting ncu's `balanced` as agreeing when we name one "
            f"of its two units: {lenient}/{n} ({pct(lenient / n)}). The two rules read different evidence: ours "
            "divides *useful* FLOPs (the causal half) and *minimum* bytes by the duration, compares them with "
            "*measured* peaks (a copy, an 8192³ matmul), and names the roofline side of a kernel that reaches "
            "30–60% of a roof; ncu's reads *pipe activity* (issue slots, tensor-pipe cycles, L1/L2/DRAM traffic "
            "including re-reads) against theoretical peaks and calls everything under 60% latency-bound."
        ]
        if rows := kind["latency / compute"]:
            parts.append(
                f"*latency / compute* ({len(rows)}): "
                + ", ".join(sorted({short_key(r.kernel.key) for r in rows}))
                + f" reach {rng(r.kernel.compute_util for r in rows)} of the bf16 peak in useful FLOPs (`compute` "
                f"for us) while their tensor pipe is {ncu_rng(rows, 'tensor')} busy, "
                "under ncu's 60%."
            )
        if rows := kind["latency / memory"]:
            parts.append(
                f"*latency / memory* ({len(rows)}): these passes move "
                f"{rng(r.kernel.bandwidth_util for r in rows)} of the copy bandwidth in minimum bytes (`memory` for "
                f"us) while ncu's memory SOL is {ncu_rng(rows, 'mem')} and SM "
                f"{ncu_rng(rows, 'sm')}."
            )
        if rows := kind["ncu balanced"]:
            parts.append(
                f"*ncu balanced* ({len(rows)}): the softmax, mask add and `where` over the fp32 score matrix keep "
                f"memory SOL ({ncu_rng(rows, 'mem')}) and SM issue "
                f"({ncu_rng(rows, 'sm')}) within 10 points of each other; our "
                "utilisations count only the bytes, so we say `memory`."
            )
        if rows := kind["memory / compute"]:
            parts.append(
                f"*memory / compute* ({len(rows)}): "
                + ", ".join(sorted({short_key(r.kernel.key) for r in rows}))
                + f" issue enough ALU work (exp, index arithmetic) for SM {ncu_rng(rows, 'sm')}"
                " while their DRAM traffic stays low; useful FLOPs do not count that work."
            )
        if rows := kind["no bound from our model"]:
            parts.append(
                f"*no bound from our model* ({len(rows)}): "
                + ", ".join(short_key(r.kernel.key) for r in rows)
                + " has no FLOP/byte model yet."
            )
        parts.append(
            f"Raising our floor from 0.3 to 0.4 / 0.5 of peak would give {floors[0.4]}/{n} / {floors[0.5]}/{n} — "
            "tuned on these same kernels, so not evidence, and still short of 90%. Meeting 90% needs the two on "
            "one scale (executed FLOPs with the diagonal tiles counted, a per-kernel byte count closer to DRAM "
            "traffic, and a model for every kernel), or reporting the counter bound as *the* bound whenever "
            "counters exist and keeping ours as the counter-free estimate."
        )
        return " ".join(parts)

    def why_durations(self) -> str:
        heavy_d = [r for r in self.rows if r.heavy and not r.mixed and not r.tiny]
        off = [r for r in heavy_d if abs(r.ratio - 1) > DURATION_TOL]
        groups: dict[str, list[NcuRow]] = {
            "memory-bound, longer in our trace": [r for r in off if r.ratio > 1 and r.kernel.bound == "memory"],
            "short (< 20 µs), shorter in our trace": [r for r in off if r.ratio < 1 and r.ours_us < 20],
            "compute-bound, shorter in our trace": [
                r for r in off if r.ratio < 1 and r.ours_us >= 20 and r.kernel.bound == "compute"
            ],
        }
        grouped = {id(r) for rows in groups.values() for r in rows}
        groups["other"] = [r for r in off if id(r) not in grouped]
        why = {
            "memory-bound, longer in our trace": "most of them stream the 32×2048×2048 score matrix (or its "
            "gradient) right after the kernel that wrote it, so in our trace they start with an L2 full of dirty "
            "lines to write back, while ncu replays each kernel alone on a flushed cache; a likely cause, not "
            "measured here",
            "short (< 20 µs), shorter in our trace": "ncu's fixed ~1 µs per replayed launch (see the tiny kernels "
            "in section 2) is several percent of a kernel this short",
            "compute-bound, shorter in our trace": "ncu replays a kernel alone, after restoring its memory and "
            "idling between passes, with clocks unlocked; the clocks during ncu's replay were not recorded, so "
            "the cause is not confirmed",
            "other": "not explained by this data",
        }
        parts = [
            f"- **(d) durations.** {len(heavy_d) - len(off)}/{len(heavy_d)} kernels of ≥ 5% (mixed and tiny ones "
            f"aside) are within 3%; the {len(off)} others fall in groups:"
        ]
        for label, rows in groups.items():
            if rows:
                parts.append(
                    f"*{label}* ({len(rows)}, {rng((r.ratio - 1 for r in rows), '{:+.1f}%', scale=100)}: "
                    + ", ".join(f"{short_key(r.kernel.key)} in {short_case(r.case.id)}" for r in rows)
                    + f") — {why[label]}."
                )
        mixed = [r for r in self.rows if r.heavy and r.mixed]
        if mixed:
            parts.append(
                "*Mixed launches* ("
                + ", ".join(f"{r.kernel.key} in {short_case(r.case.id)}" for r in mixed)
                + "): one key covers launches of different sizes, so the per-launch mean cannot match ncu's first "
                "launch."
            )
        parts.append(
            "What would meet it: keep each launch's duration in the document (not only the per-iteration sum of "
            "a key) and match ncu launch by launch; time the same launch under the same conditions (ncu with "
            "`--cache-control none` after the same predecessor, or our trace with a flush before every kernel), "
            "and compare against the median of several ncu launches rather than the first."
        )
        return " ".join(parts)

    # ---- section 1

    def kernel_tables(self) -> None:
        doc = self.table_doc
        self.add(
            "## 1. Per-kernel tables",
            "",
            f"From `{TABLE_RUN[0]}/run{TABLE_RUN[1]}.json` (a warm run), as `attnprof report --format markdown` "
            "renders them. Latency is the median per iteration of all launches of that kernel; share is of the "
            "case's kernel time; BW and compute util are achieved rates (minimum bytes, useful FLOPs) as "
            "fractions of the measured peaks (fp32 peak for CUDA-core kernels, bf16 for tensor-core ones); "
            "occupancy is the theoretical occupancy from registers, shared memory and block size.",
            "",
        )
        for cid in TABLE_CASES:
            case = case_of(doc, cid)
            self.add(f"### {cid}", "", case_headline(case), "")
            self.add(*table(KERNEL_COLUMNS, kernel_rows(case)))
        self.add("**Reading.**", "", *self.reading(), "")

    def reading(self) -> list[str]:
        doc = self.table_doc
        peaks = doc.environment.peaks
        fp32, bf16 = peaks.tflops["fp32"].value, peaks.tflops["bf16"].value
        math_ = case_of(doc, "sdpa[backend=math,pass=fwd]")
        qk = kernel_of(math_, "ffma", "qk_matmul")
        pv = kernel_of(math_, "ffma", "av_matmul")
        sm = kernel_of(math_, "softmax_warp_forward")
        safe = [
            kernel_of(math_, "isneginf"),
            kernel_of(math_, "reduce:and"),
            kernel_of(math_, "elementwise:where", "softmax"),
        ]
        add = kernel_of(math_, "elementwise:add", "mask")
        casts = [k for k in math_.kernels if k.phase == "cast"]
        mt = sum(k.duration_us.median for k in math_.kernels)
        safe_us = sum(k.duration_us.median for k in safe)
        cud = case_of(doc, "sdpa[backend=cudnn,pass=fwd]")
        ck = kernel_of(cud, "flash_fprop")
        ncu_ck = kernel_of(case_of(self.d.ncu, cud.id), "flash_fprop")
        fused = {
            name: kernel_of(case_of(doc, cid), key)
            for name, cid, key in (
                ("flash", "sdpa[backend=flash,pass=fwd]", "flash_fwd"),
                ("efficient", "sdpa[backend=efficient,pass=fwd]", "cutlassF"),
                ("flex", "flex[pass=fwd]", "flex_attention"),
            )
        }
        cn = case_of(doc, "compiled_naive[pass=fwd]")
        red = kernel_of(cn, "triton_red", "softmax")
        gemms = [k for k in cn.kernels if k.phase in ("qk_matmul", "av_matmul")]
        bwd_case = case_of(doc, "sdpa[backend=cudnn,pass=fwd_bwd]")
        bprop = kernel_of(bwd_case, "flash_bprop")
        tensor = (ncu_ck.counters or {}).get(NCU["tensor"])
        old = [fused["flash"], fused["efficient"]]
        small = [k for k in bwd_case.kernels if k is not bprop and k.phase == "backward"]
        return [
            f"- Math path: the two fp32 GEMMs (QKᵀ {fmt_us(qk.duration_us.median)} µs, PV "
            f"{fmt_us(pv.duration_us.median)} µs) run on the FMA pipe (`ffma`, no tensor cores) at "
            f"{num(qk.tflops)} and {num(pv.tflops)} TFLOP/s, {pct(qk.compute_util)} and {pct(pv.compute_util)} of "
            f"the measured fp32 peak ({num(fp32)} TFLOP/s): compute-bound, together "
            f"{pct((qk.duration_us.median + pv.duration_us.median) / mt)} of the case. `softmax_warp_forward` takes "
            f"{fmt_us(sm.duration_us.median)} µs at {num((sm.gbps or 0) / 1000, 2)} TB/s "
            f"({pct(sm.bandwidth_util)} of the copy bandwidth): memory-bound. The safe-softmax passes around it "
            f"(`isneginf` {fmt_us(safe[0].duration_us.median)}, the `all` reduction "
            f"{fmt_us(safe[1].duration_us.median)}, `where` {fmt_us(safe[2].duration_us.median)} µs) and the "
            f"mask add ({fmt_us(add.duration_us.median)} µs) cost {num(safe_us + add.duration_us.median, 0)} µs, "
            f"{(safe_us + add.duration_us.median) / sm.duration_us.median:.1f}× the softmax itself; the "
            f"bf16↔fp32 casts add {num(sum(k.duration_us.median for k in casts), 0)} µs.",
            f"- cuDNN: one kernel of {fmt_us(ck.duration_us.median)} µs at {num(ck.tflops, 0)} TFLOP/s of useful "
            f"(causal) FLOPs, {pct(ck.compute_util)} of the measured bf16 matmul peak ({num(bf16, 0)} TFLOP/s), "
            f"while ncu finds its tensor pipe {num(tensor, 0)}% busy (it executes the diagonal tiles in full): "
            f"`{ck.bound}` here, `{ncu_ck.counter_bound}` by ncu's rule with the tensor pipe counted. The same "
            "attention costs "
            f"{mt / ck.duration_us.median:.0f}× more on the math path.",
            "- The other fused kernels: "
            + ", ".join(
                f"{name} {fmt_us(k.duration_us.median)} µs ({pct(k.compute_util)} of bf16 peak, {k.bound})"
                for name, k in fused.items()
            )
            + ". flash (FA2, `mma.sync`) and efficient (CUTLASS, sm80 code) do not use Hopper's `wgmma`"
            + (
                "; neither reaches 30% of a roof, hence `latency` by our rule."
                if all(max(k.compute_util or 0, k.bandwidth_util or 0) < 0.3 for k in old)
                else "."
            ),
            f"- compiled_naive: Inductor fuses scale, mask and softmax into one Triton reduction "
            f"({fmt_us(red.duration_us.median)} µs, {pct(red.share)} of the case, {pct(red.bandwidth_util)} of the "
            f"copy bandwidth); its tensor-core GEMMs ("
            + ", ".join(f"{fmt_us(k.duration_us.median)} µs" for k in gemms)
            + ") are memory-bound at "
            + "/".join(pct(k.bandwidth_util) for k in gemms)
            + " of the bandwidth because they write and read the 32×2048×2048 score matrix.",
            f"- cuDNN fwd_bwd: the backward kernel ({fmt_us(bprop.duration_us.median)} µs, {pct(bprop.share)} of "
            f"the case) runs at {num(bprop.tflops, 0)} TFLOP/s ({pct(bprop.compute_util)} of peak) on 2.5× the "
            "forward FLOPs; "
            + ", ".join(f"{k.key} ({fmt_us(k.duration_us.median)} µs, {pct(k.share)}, {k.bound})" for k in small)
            + " are the rest.",
        ]

    def kernels_caption(self) -> str:
        doc = self.table_doc
        bf16 = doc.environment.peaks.tflops["bf16"]
        block = case_of(doc, "block")
        gemms = [k for k in block.kernels if k.phase in ("qkv_proj", "out_proj", "ffn") and k.tflops]
        top = max(gemms, key=lambda k: k.tflops or 0.0)
        outside = []
        for cid in ("sdpa[backend=math,pass=fwd]", "naive[pass=fwd]", "compiled_naive[pass=fwd]"):
            ks = case_of(doc, cid).kernels
            mm = sum(k.duration_us.median for k in ks if k.phase in ("qk_matmul", "av_matmul"))
            outside.append(1 - mm / sum(k.duration_us.median for k in ks))
        text = (
            f"Left: each case's kernel time by phase (the unfused forward paths spend {rng(outside)} of it "
            "outside the two matmuls). "
            "Right: every kernel with ≥ 1% of a case and a FLOP model, against the measured roofs; circles use the "
            "tensor cores, squares the CUDA cores (fp32 roof), colour is our bound, size the share."
        )
        if top.tflops and top.tflops > bf16.value:
            text += (
                f" The block's {top.phase} GEMM reaches {num(top.tflops, 0)} TFLOP/s, "
                f"{pct(top.tflops / bf16.value - 1, 0)} above the measured bf16 peak ({num(bf16.value, 0)}, "
                f"{bf16.detail}): the measured peak is a floor, not the hardware's limit, and utilisations are "
                "clamped to 100% (`tflops` keeps the unclamped rate)."
            )
        return text

    # ---- section 2

    def ncu_section(self) -> None:
        doc = self.d.ncu
        dram_peaks = [
            ((r.c("read") or 0) + (r.c("write") or 0)) / (r.ncu_us * 1e-6) / ((r.c("dram") or 0) / 100) / 1e9
            for r in self.rows
            if (r.c("dram") or 0) >= 20
        ]
        ours_peak = doc.environment.peaks.dram_gbps.value
        self.add(
            "## 2. Agreement with Nsight Compute, per kernel",
            "",
            f"From `set-b/ncu.json` ({doc.run.command}). Each case was replayed under ncu "
            "(`--clock-control none`, 8 metrics, `--profile-from-start off` around one iteration after 3 warm-up "
            "iterations and an L2 flush: `attnprof.core.measure.single`); counters were merged "
            "into the kernels whose base name and launch configuration match, first launch each. "
            "**Per launch:** our `duration_us.median` is the sum over all launches of that kernel key in one "
            "iteration (from the trace pass), ncu's `gpu__time_duration.sum` is one launch (the first matching), "
            "so the table compares ours ÷ launches with ncu's. Where one key covers launches of different sizes "
            f"(several launches and a ratio outside {MIXED_RATIO[0]:.2f}–{MIXED_RATIO[1]:.2f}, marked *mixed*) the "
            "mean per launch is not comparable. In this data the merge gave a kernel's later launches to the next "
            "kernel of the same name and shape (fixed since: later launches are now counted against their own "
            "kernel): in `sdpa[backend=math,pass=fwd_bwd]` the backward `elementwise:copy` row likely carries a "
            "forward cast's counters.",
            "",
            f"ncu's `dram__throughput` is a percentage of its theoretical DRAM peak: bytes ÷ duration ÷ percentage "
            f"gives {num(statistics.median(dram_peaks), 0)} GB/s (median over {len(dram_peaks)} kernels at ≥ 20%), "
            f"against our measured {num(ours_peak, 0)} GB/s copy peak, so for the same bytes our BW util reads "
            f"{statistics.median(dram_peaks) / ours_peak:.2f}× ncu's DRAM %. Ours counts minimum bytes, ncu's "
            "the DRAM traffic (re-reads count, writes still in L2 do not). Bold rows: ≥ 5% of the case (the "
            "kernels the targets count). Occupancy: ncu's achieved vs our theoretical.",
            "",
        )
        head = [
            "case",
            "kernel",
            "share",
            "launches",
            "ours µs/launch",
            "ncu µs",
            "ours/ncu",
            "our bound",
            "ncu bound",
            "our BW util",
            "DRAM %",
            "mem SOL %",
            "SM %",
            "tensor %",
            "achieved occ.",
            "theor. occ.",
        ]
        body = []
        for r in self.rows:
            k = r.kernel
            flag = " (mixed)" if r.mixed else (" (tiny)" if r.tiny else "")
            name = f"**{k.key[:60]}**" if r.heavy else k.key[:60]
            body.append(
                [
                    r.case.id,
                    name,
                    pct(k.share),
                    f"{k.launches_per_iter:g}",
                    fmt_us(r.ours_us),
                    fmt_us(r.ncu_us),
                    f"{r.ratio:.3f}{flag}",
                    k.bound or "—",
                    k.counter_bound or "—",
                    pct(k.bandwidth_util),
                    num(r.c("dram"), 0),
                    num(r.c("mem"), 0),
                    num(r.c("sm"), 0),
                    num(r.c("tensor"), 0),
                    f"{num(r.c('occ'), 0)}%",
                    pct(k.theoretical_occupancy),
                ]
            )
        self.add(*table(head, body))
        # durations
        heavy_d = [r for r in self.rows if r.heavy]
        clean = [r for r in heavy_d if not r.mixed]
        rest = [r for r in self.rows if not r.mixed and not r.tiny]
        tiny = [r for r in self.rows if r.tiny]

        def within(rows: Sequence[NcuRow]) -> str:
            ok = sum(abs(r.ratio - 1) <= DURATION_TOL for r in rows)
            devs = [abs(r.ratio - 1) for r in rows]
            return (
                f"{ok}/{len(rows)} within 3%, median |Δ| {pct(statistics.median(devs), 1)}, "
                f"ratio {min(r.ratio for r in rows):.3f}–{max(r.ratio for r in rows):.3f}"
            )

        self.add(
            "**Durations.** "
            f"Kernels ≥ 5%: {within(heavy_d)}; without mixed launches: {within(clean)}. All kernels with counters "
            f"and ≥ {TINY_US:.0f} µs, mixed excluded: {within(rest)}. Kernels under {TINY_US:.0f} µs per launch: "
            + ", ".join(f"{r.kernel.key} {fmt_us(r.ours_us)} vs {fmt_us(r.ncu_us)}" for r in tiny)
            + f" µs: ncu adds {num(min(r.ncu_us - r.ours_us for r in tiny), 2)}–"
            f"{num(max(r.ncu_us - r.ours_us for r in tiny), 2)} µs, a roughly fixed cost of its measurement that "
            "swamps a kernel of 1–5 µs and is a few percent of one of 20 µs.",
            "",
        )
        for r in self.rows:
            if r.mixed:
                self.add(
                    f"*Mixed:* `{r.kernel.key}` in {r.case.id} has {r.kernel.launches_per_iter:g} launches totalling "
                    f"{fmt_us(r.kernel.duration_us.median)} µs; ncu's first launch took {fmt_us(r.ncu_us)} µs, "
                    f"leaving {fmt_us(r.kernel.duration_us.median - r.ncu_us)} µs for the other(s)"
                    + (f": {MIXED_NOTES[r.kernel.key]}." if r.kernel.key in MIXED_NOTES else "."),
                    "",
                )
        # bounds
        labels = ("compute", "memory", "balanced", "latency", None)
        present = [b for b in labels if any(r.kernel.counter_bound == b for r in self.heavy)]
        ours_present = [b for b in labels if any(r.kernel.bound == b for r in self.heavy)]
        conf = [
            [f"ours: {o or 'none'}"]
            + [str(sum(r.kernel.bound == o and r.kernel.counter_bound == t for r in self.heavy)) for t in present]
            for o in ours_present
        ]
        kinds = Counter(disagreement(r.kernel.bound, r.kernel.counter_bound) for r in self.heavy)
        self.add(
            f"**Bound classes**, the {len(self.heavy)} kernels with ≥ 5% of a case and a counter bound "
            "(rows ours, columns ncu's SOL rule with the tensor pipe counted as compute):",
            "",
            *table(["", *[f"ncu: {t}" for t in present]], conf),
            "Disagreements by kind: "
            + ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])) if k != "agree")
            + ". Where they disagree:",
            "",
        )
        for kind in sorted(k for k in kinds if k != "agree"):
            rows = [r for r in self.heavy if disagreement(r.kernel.bound, r.kernel.counter_bound) == kind]
            self.add(
                f"- *{kind}*: "
                + "; ".join(
                    f"{r.kernel.key[:48]} ({r.case.id}: BW {pct(r.kernel.bandwidth_util)}, compute "
                    f"{pct(r.kernel.compute_util)} vs mem SOL {num(r.c('mem'), 0)}%, SM {num(r.c('sm'), 0)}%, "
                    f"tensor {num(r.c('tensor'), 0)}%)"
                    for r in rows
                )
            )
        self.add("")

    # ---- section 3

    def stability_section(self, plot: Path) -> None:
        ids = self.d.case_ids
        a, b = self.stab["set-a"], self.stab["set-b"]
        na, nb = len(self.d.sets["set-a"].runs), len(self.d.sets["set-b"].runs)
        self.add(
            "## 3. Timing stability",
            "",
            f'Each profile run is a separate process; do_bench (`return_mode="median"`, its defaults: 25 ms '
            "warm-up, 100 ms of repetitions, its own 256 MB flush) runs in its own process right after. Spread = "
            f"(max − min) ÷ median of the per-run medians: set a {na} runs, set b {nb} runs (a replication on "
            "another lease). Median = median of the per-run medians.",
            "",
        )
        rows = []
        for c in ids:
            row = [c]
            for st in (a, b):
                s = st[c]
                mark = "" if s.spread <= s.db_spread else " ▲"
                row += [
                    num(s.ours),
                    f"{pct(s.spread, 2)}{mark}",
                    num(s.db),
                    pct(s.db_spread, 2),
                    f"{s.ours / s.db:.3f}",
                ]
            rows.append(row)
        self.add(
            *table(
                [
                    "case",
                    "a: ours µs",
                    "a: spread",
                    "a: do_bench µs",
                    "a: spread",
                    "a: ours/db",
                    "b: ours µs",
                    "b: spread",
                    "b: do_bench µs",
                    "b: spread",
                    "b: ours/db",
                ],
                rows,
            ),
            "▲: our spread wider than do_bench's on that set.",
            "",
            f"![Spread of medians per case]({plot.name})",
            "",
        )
        for name, st in self.stab.items():
            n = len(self.d.sets[name].runs)
            self.add(f"**Per-run medians, set {name[-1]}** (µs; ours, then do_bench):", "")
            self.add(
                *table(
                    ["case", *[f"ours {i}" for i in range(1, n + 1)], *[f"db {i}" for i in range(1, n + 1)]],
                    [[c, *[num(x, 1) for x in st[c].medians], *[num(x, 1) for x in st[c].dobench]] for c in ids],
                )
            )
        self.add(
            "**Samples, within-run CV and precision.** n: samples per run (adaptive: ≥ 50, until the 95% CI of the "
            "median is within ±0.2%, ≤ 2000 or 1 s); CV: stdev ÷ mean per run (outliers weigh in: the median does "
            "not); CI: the largest relative half-width of the median's 95% CI over the runs; spread ÷ 2·CI: the "
            "spread over the width of the runs' CIs — with sampling error alone its expected value is "
            f"{D2[na] / 3.92:.2f} for {na} runs and {D2[nb] / 3.92:.2f} for {nb}; above 1, the runs differ by more "
            "than their sampling error. SM clock: lowest–highest per-case reading over the runs.",
            "",
        )
        rows = []
        for c in ids:
            row = [c]
            for st in (a, b):
                s = st[c]
                row += [
                    ", ".join(str(x) for x in s.samples),
                    ", ".join(f"{100 * x:.1f}" for x in s.cvs),
                    pct(max(s.ci_half), 2),
                    f"{s.ci_ratio:.1f}",
                    f"{num(s.clock_min, 0)}–{num(s.clock_max, 0)}",
                ]
            rows.append(row)
        self.add(
            *table(
                [
                    "case",
                    "a: n",
                    "a: CV %",
                    "a: CI ±",
                    "a: spread ÷ 2·CI",
                    "a: SM MHz",
                    "b: n",
                    "b: CV %",
                    "b: CI ±",
                    "b: spread ÷ 2·CI",
                    "b: SM MHz",
                ],
                rows,
            )
        )
        self.observations()

    def observations(self) -> None:
        a, b = self.stab["set-a"], self.stab["set-b"]
        ids = self.d.case_ids
        ratio = {c: (a[c].ours / a[c].db, b[c].ours / b[c].db) for c in ids}
        above = [c for c in ids if min(ratio[c]) >= 1.01]
        unfused_ids = [c for c in ids if c.split("[")[0] in ("naive", "compiled_naive") or "backend=math" in c]
        unfused_rng = rng((r - 1 for c in unfused_ids for r in ratio[c]), "{:+.1f}%")
        fx, cud, blk = "flex[pass=fwd_bwd]", "sdpa[backend=cudnn,pass=fwd]", "block"
        runs = [d for rs in self.d.sets.values() for d in rs.runs]
        fx_lats = [lat for d in runs if (lat := case_of(d, fx).latency_us)]
        cud_lats = [lat for d in runs if (lat := case_of(d, cud).latency_us)]
        fx_kern = sum(k.duration_us.median for k in case_of(self.table_doc, fx).kernels)
        host = [lat.host_us for lat in fx_lats if lat.host_us]
        gemm_tensor = [
            r.c("tensor") for r in self.rows if r.case.id == blk and r.kernel.phase in ("qkv_proj", "out_proj", "ffn")
        ]
        self.add(
            "**Observed facts.**",
            "",
            "- Our medians read ≥ 1% above do_bench's in both sets on "
            + ", ".join(f"{short_case(c)} (+{pct(ratio[c][0] - 1, 1)} / +{pct(ratio[c][1] - 1, 1)})" for c in above)
            + f", e.g. cuDNN fwd {num(a[cud].ours)} vs {num(a[cud].db)} µs in set a; on the unfused cases (math, "
            f"naive, compiled_naive) ours ÷ do_bench − 1 is {unfused_rng}"
            ". The offset sits on the fused-kernel cases and is steady across runs, so it does not blur a "
            "comparison between runs of the same method; its cause is not isolated in this data (our event window "
            "opens when the hold kernel ends, do_bench's when its flush ends).",
            f"- do_bench on {fx}: set a medians "
            + ", ".join(num(x, 0) for x in a[fx].dobench)
            + f" µs (spread {pct(a[fx].db_spread, 0)}), set b "
            + ", ".join(num(x, 0) for x in b[fx].dobench)
            + f" µs ({pct(b[fx].db_spread, 0)}), for {num(fx_kern, 0)} µs of kernels; ours {num(a[fx].ours, 1)} / "
            f"{num(b[fx].ours, 1)} µs (spread {pct(a[fx].spread, 2)} / {pct(b[fx].spread, 2)}). Queueing one "
            f"iteration of the compiled backward takes {num(min(host), 0)}–{num(max(host), 0)} µs of host time "
            f"({min(host) / fx_kern:.1f}–{max(host) / fx_kern:.1f}× its kernel time), so do_bench times the host's "
            "launch rate; the blocking kernel removes that.",
            f"- `block` runs near the power cap: its GEMMs keep the tensor pipe {rng(gemm_tensor, '{:.0f}%', scale=1)} "
            f"busy (section 2); per-case clock readings span {num(a[blk].clock_min, 0)}–{num(a[blk].clock_max, 0)} "
            f"MHz in set a and {num(b[blk].clock_min, 0)}–{num(b[blk].clock_max, 0)} MHz in set b. do_bench reads "
            f"it {pct(a[blk].db / a[blk].ours - 1, 0)} / {pct(b[blk].db / b[blk].ours - 1, 0)} higher than ours, "
            f"with {pct(a[blk].db_spread, 1)} / {pct(b[blk].db_spread, 1)} spread: it runs the iterations back to "
            "back, ours leaves the GPU a hold between them; do_bench did not record clocks, so power capping as "
            "the cause is likely, not shown.",
            f"- The within-run CV on cuDNN fwd is {rng(lat.cv for lat in cud_lats)} because of rare slow samples "
            f"(max {rng((lat.max for lat in cud_lats), '{:.0f}', scale=1)} µs against medians of "
            f"{rng((lat.median for lat in cud_lats), '{:.1f}', scale=1)} µs); the interquartile range is "
            f"{rng(((lat.p75 - lat.p25) / lat.median for lat in cud_lats), '{:.1f}%')} of the median, and the "
            "median is what is compared.",
            "",
        )

    # ---- section 4

    def cost_section(self) -> None:
        rows = []
        for name, rs in self.d.sets.items():
            docs = {i + 1: d for i, d in enumerate(rs.runs)}
            for w in rs.walls:
                run = w.get("run")
                kind = "`--counters ncu`" if run == "ncu" else ("default, cold caches" if run == 1 else "default, warm")
                inner = docs[run].run.wall_s if isinstance(run, int) and run in docs else None
                if run == "ncu" and name == "set-b":
                    inner = self.d.ncu.run.wall_s
                rows.append(
                    [
                        f"set {name[-1]}",
                        str(run),
                        kind,
                        str(w.get("rc")),
                        num(float(w["wall_s"]), 2),
                        num(inner, 2),
                        str(w.get("at", "—")),
                    ]
                )
        self.add(
            "## 4. Cost",
            "",
            "Process wall time (`walls.jsonl`: interpreter start, imports, the runs, the document written) and, "
            "where the document is committed, the run's own `run.wall_s` (from the first case to the document). "
            "Run 1 of each set starts with empty Inductor/Triton caches (compiled FlexAttention and "
            "compiled_naive compile there).",
            "",
            *table(["set", "run", "mode", "rc", "process wall s", "document wall s", "ended (UTC)"], rows),
        )
        _, warm_b, ncu_b = self.walls(self.d.sets["set-b"])
        _, _, ncu_a = self.walls(self.d.sets["set-a"])
        if ncu_a is not None:
            self.add(
                f"Set a's `walls.jsonl` also records an ncu run ({num(ncu_a, 1)} s); its document is not among the "
                "committed files, so the per-case figures below come from set b.",
                "",
            )
        if ncu_b:
            self.add(
                f"The `--counters ncu` suite costs {num(ncu_b, 0)} s against a warm default run's "
                f"{num(statistics.median(warm_b), 1)} s (median of set b's warm runs): "
                f"{ncu_b / statistics.median(warm_b):.1f}×.",
                "",
            )
        warm_docs = self.d.sets["set-b"].runs[1:]
        rows = []
        for c in self.d.ncu.cases:
            heavy = sum((k.share or 0) >= HEAVY_SHARE for k in c.kernels)
            counted = sum(bool(k.counters) for k in c.kernels)
            warm = [ws for d in warm_docs if (ws := case_of(d, c.id).wall_s) is not None]
            wall, cwall = c.wall_s or 0.0, c.counters_wall_s or 0.0
            rows.append(
                [
                    c.id,
                    str(len(c.kernels)),
                    str(heavy),
                    str(counted),
                    num(wall, 2),
                    num(cwall, 1),
                    f"{cwall / wall:.1f}×" if wall else "—",
                    num(statistics.median(warm), 2) if warm else "—",
                    f"{cwall / statistics.median(warm):.1f}×" if warm else "—",
                ]
            )
        self.add(
            "Per case (`set-b/ncu.json`): `wall_s` is the default-mode profiling of the case in that run, "
            "`counters_wall_s` its ncu pass (a separate `ncu ... python -m attnprof.core.measure.single` process "
            "per case: interpreter and CUDA start, the case built and run once, one replay pass per metric group "
            "for every matching launch). *kernels ≥ 5%* were selected; *with counters* is how many of the case's "
            "kernel keys received counters: the selection is a regex on base names, so it also catches the "
            "smaller kernels that share a base name (e.g. `vectorized_elementwise_kernel`).",
            "",
            *table(
                [
                    "case",
                    "kernel keys",
                    "kernels ≥ 5%",
                    "with counters",
                    "wall_s",
                    "counters_wall_s",
                    "ratio",
                    "warm wall_s (set b runs 2+)",
                    "ratio to warm",
                ],
                rows,
            ),
            "The ratio is large because a case's default profiling takes tenths of a second once its first "
            "case has warmed the process up, while every ncu pass pays a process start and a replay per metric "
            "group per launch. The issue's own measurement (ncu with these 8 metrics: +13 s on a math step of "
            "22 kernels, +4 s on a cuDNN step of 3) is of the same order. Narrowing the regex with the launch "
            "configuration, or `--launch-count 1` per kernel, would cut the math cases most.",
            "",
        )

    # ---- section 5

    def files_section(self) -> None:
        rows = []
        for p in sorted(self.d.root.rglob("*")):
            if not p.is_file():
                continue
            role = FILE_ROLES.get(p.name)
            if role is None:
                m = re.fullmatch(r"(run|dobench)(\d+)\.json", p.name)
                if m:
                    role = FILE_ROLES[m.group(1)] + (
                        " (cold Inductor/Triton caches)" if m.group(1) == "run" and m.group(2) == "1" else ""
                    )
            rows.append(
                [
                    f"`{p.relative_to(self.d.root)}`",
                    num(p.stat().st_size / 1024, 1),
                    hashlib.sha256(p.read_bytes()).hexdigest()[:12],
                    role or "—",
                ]
            )
        self.add(
            "## 5. The raw documents",
            "",
            f"Under `{self.rel(self.d.root)}/` (the regression analysis calibrates on them). Chrome traces were "
            "not committed (they stay on the GPU host's output archive).",
            "",
            *table(["file", "KiB", "sha256 (12)", "what it is"], rows),
        )

    def build(self, stability_png: Path, kernels_png: Path) -> str:
        self.header()
        self.kernel_tables()
        self.add(f"![Per-phase time and roofline]({kernels_png.name})", "", self.kernels_caption(), "")
        self.ncu_section()
        self.stability_section(stability_png)
        self.cost_section()
        self.files_section()
        return "\n".join(self.lines).rstrip() + "\n"


# --------------------------------------------------------------------------------------------- plots


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise DataError("matplotlib is needed for the plots: .venv/bin/pip install matplotlib") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 8, "svg.hashsalt": "attnprof", "path.simplify": False})
    return plt


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=110, metadata={"Software": None})


def plot_stability(report: Report, path: Path) -> None:
    plt = _pyplot()
    ids = report.d.case_ids
    series: list[tuple[str, str, Callable[[CaseStability], float], str, str]] = [
        ("ours, set a", "set-a", lambda s: s.spread, "#1f77b4", ""),
        ("do_bench, set a", "set-a", lambda s: s.db_spread, "#ff7f0e", ""),
        ("ours, set b", "set-b", lambda s: s.spread, "#aec7e8", "//"),
        ("do_bench, set b", "set-b", lambda s: s.db_spread, "#ffbb78", "//"),
    ]
    fig, ax = plt.subplots(figsize=(8, 7.5))
    height = 0.2
    for j, (label, name, fn, color, hatch) in enumerate(series):
        st = report.stab[name]
        ys = [i + (j - 1.5) * height for i in range(len(ids))]
        xs = [max(100 * fn(st[c]), 0.01) for c in ids]
        ax.barh(ys, xs, height=height, color=color, hatch=hatch, edgecolor="black", linewidth=0.3, label=label)
    ax.axvline(100 * SPREAD_TARGET, color="red", linestyle="--", linewidth=1, label="0.5% (target for cases ≥ 100 µs)")
    ax.set_xscale("log")
    ax.set_xlim(0.01, 100)
    labels = [f"{short_case(c)}  ({fmt_us(report.stab['set-a'][c].ours)} µs)" for c in ids]
    ax.set_yticks(range(len(ids)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("spread of the per-run medians, (max − min) / median, % (log scale)")
    n_a, n_b = (len(report.d.sets[n].runs) for n in SETS)
    ax.set_title(f"H200, llama7b: spread of medians over separate processes (set a: {n_a}, set b: {n_b})")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=3, fontsize=7, frameon=False)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


# Short labels for the roofline, by a fragment of the kernel key (first match wins).
ROOFLINE_LABELS = (
    ("flash_fprop", "cuDNN fwd"),
    ("flash_bprop", "cuDNN bwd"),
    ("flash_fwd_kernel", "flash fwd"),
    ("flash_bwd_dq_dk_dv", "flash bwd"),
    ("cutlassF", "efficient fwd"),
    ("cutlassB", "efficient bwd"),
    ("triton_tem_fused_flex_attention_backward", "flex bwd"),
    ("triton_tem_fused_flex_attention", "flex fwd"),
    ("f32f32", "math fp32 GEMMs"),
    ("simt_sgemm", "math fp32 GEMM (bwd)"),
    ("triton_red_fused__softmax__to_copy", "Inductor softmax"),
    ("softmax_warp_forward", "softmax"),
    ("isneginf", "isneginf"),
)


# Where a label sits beside its point (points of the forward and backward kernels crowd at two intensities).
LABEL_OFFSETS = {
    "cuDNN fwd": (-6, 2, "right"),
    "flash fwd": (-6, -8, "right"),
    "flex fwd": (-6, 3, "right"),
    "efficient fwd": (-6, -3, "right"),
    "bf16 GEMMs over the scores": (-6, -3, "right"),
    "softmax": (-6, 2, "right"),
    "flex bwd": (6, 3, "left"),
    "flash bwd": (6, -7, "left"),
}


def roofline_label(key: str, phase: str) -> str | None:
    if key.startswith("nvjet"):
        return "block GEMMs" if phase in ("qkv_proj", "out_proj", "ffn") else "bf16 GEMMs over the scores"
    return next((label for frag, label in ROOFLINE_LABELS if frag in key), None)


def plot_kernels(report: Report, path: Path) -> None:
    plt = _pyplot()
    doc = report.table_doc
    ids = report.d.case_ids
    cmap = plt.get_cmap("tab20")
    colors = {p: cmap(i % 20) for i, p in enumerate(PHASES)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 7), gridspec_kw={"width_ratios": [1, 1.1]})
    used: set[str] = set()
    for i, cid in enumerate(ids):
        case = case_of(doc, cid)
        total = sum(k.duration_us.median for k in case.kernels)
        start = 0.0
        for phase in PHASES:
            t = sum(k.duration_us.median for k in case.kernels if k.phase == phase)
            if t <= 0:
                continue
            left.barh(i, 100 * t / total, left=start, color=colors[phase], label=None if phase in used else phase)
            used.add(phase)
            start += 100 * t / total
        left.text(101, i, f"{fmt_us(total)} µs", va="center", fontsize=7)
    left.set_yticks(range(len(ids)), [short_case(c) for c in ids])
    left.invert_yaxis()
    left.set_xlim(0, 115)
    left.set_xlabel("share of the case's kernel time, % (the case's total kernel time at the right)")
    left.set_title(f"Where the time goes, per phase ({TABLE_RUN[0]}/run{TABLE_RUN[1]})")
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=6, fontsize=7, frameon=False)

    peaks = doc.environment.peaks
    bw = peaks.dram_gbps.value * 1e9
    xs = [10 ** (e / 20) for e in range(-20, 81)]
    for key, style in (("bf16", "-"), ("fp32", "--")):
        top = peaks.tflops[key].value
        right.plot(
            xs,
            [min(top, x * bw / 1e12) for x in xs],
            style,
            color="black",
            linewidth=1,
            label=f"{key} roof: {top:.0f} TFLOP/s; {bw / 1e12:.2f} TB/s; ridge {ridge_point(top, bw / 1e9):.0f} FLOP/B",
        )
    bound_colors = {"compute": "#d62728", "memory": "#1f77b4", "balanced": "#9467bd", "latency": "#7f7f7f"}
    labelled: set[str] = set()
    skipped = 0
    for cid in ids:
        case = case_of(doc, cid)
        for k in case.kernels:
            if not k.flops or not k.bytes or not k.tflops or not k.arithmetic_intensity or (k.share or 0) < 0.01:
                skipped += 1
                continue
            fp32_pipe = dtype_peak_key(str(case.params.get("dtype")), k.name) == "fp32"
            right.scatter(
                k.arithmetic_intensity,
                k.tflops,
                s=15 + 100 * (k.share or 0),
                color=bound_colors.get(k.bound or "", "#bcbd22"),
                marker="s" if fp32_pipe else "o",
                alpha=0.75,
                edgecolors="black",
                linewidths=0.3,
            )
            label = roofline_label(k.key, k.phase)
            if label and label not in labelled:
                labelled.add(label)
                dx, dy, ha = LABEL_OFFSETS.get(label, (6, -3, "left"))
                right.annotate(
                    label,
                    (k.arithmetic_intensity, k.tflops),
                    fontsize=7,
                    xytext=(dx, dy),
                    textcoords="offset points",
                    ha=ha,
                )
    for b, c in bound_colors.items():
        right.scatter([], [], color=c, label=f"our bound: {b}")
    right.scatter([], [], color="white", edgecolors="black", marker="s", label="square: fp32 pipe / CUDA cores")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlim(0.1, 1e4)
    right.set_ylim(0.1, 2000)
    right.set_xlabel("arithmetic intensity, useful FLOP / minimum byte")
    right.set_ylabel("achieved TFLOP/s (useful FLOPs)")
    right.set_title(
        f"Roofline: kernels with ≥ 1% of a case and a FLOP model, all cases ({skipped} kernel entries left out)"
    )
    right.legend(loc="lower right", fontsize=6.5)
    right.grid(which="both", alpha=0.2)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "bench/reports/data/h200-2026-11-29")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/reports/h200-profiler-core.md")
    args = parser.parse_args(argv)
    data = load_data(args.data)
    report = Report(data, args.out)
    stability_png = args.out.parent / "h200-stability.png"
    kernels_png = args.out.parent / "h200-kernels.png"
    text = report.build(stability_png, kernels_png)
    plot_stability(report, stability_png)
    plot_kernels(report, kernels_png)
    args.out.write_text(text)
    print(f"wrote {args.out}, {stability_png.name}, {kernels_png.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
