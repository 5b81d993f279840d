"""Measurement truth on the H200: the committed report, generated from the raw data beside it.

    .venv/bin/python -m bench.h200_truth_report --data bench/reports/data/h200-truth-2026-12-04 \\
        --again bench/reports/data/h200-truth-2026-12-04-b --out bench/reports/h200-truth.md

Reads what ``bench/h200_truth.sh runs 5`` and ``bench/h200_truth.sh ncu`` gathered: ``runN/<suite>.json.gz`` (result
documents of five independent processes over the example suite and the validation set), ``runN/<suite>-dobench.json.gz``
(triton.testing.do_bench, median mode, in the same process, with its own zero_() flush and with the profiler's clean
flush), ``ncu.csv.gz`` (Nsight Compute over one iteration of every case, default cache control, ``--clock-control
none``), ``ncu-none.csv.gz`` (the same with ``--cache-control none``, duration only) and the versions; beside them,
copied from earlier leases, ``hold.json``, ``flush-variants.json``, ``ncu-overhead/``, ``placement*.json`` and
``outliers-after-lead.txt``, whose experiments have left the tree (docs/findings.md records each, with its command and
the commit that holds it). ``--again``: a second five-process run of the same lease (runs only), for the spread.
Every figure in the prose is computed from these files; the auxiliary experiments' figures (hold, flush variants,
ncu's overhead, placement, outliers) are named as such where they are quoted. Writes the markdown report and
``h200-truth.png``. Torch-free and deterministic.
"""

# ruff: noqa: E501 - the markdown rows and sentences this script writes are kept whole, as they read in the report
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import statistics as st
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from attnprof.core.documents import Case, Kernel, ResultDocument, parse_result
from attnprof.core.measure.counters import base_name, parse_ncu_csv
from attnprof.core.model.roofline import BUSY, COUNTER_BUSY_PCT, LATENCY_US, counter_bound
from attnprof.core.suite import TimingConfig, load_suite
from attnprof.core.units import fmt_duration_us

ROOT = Path(__file__).resolve().parents[1]

SUITES = {
    "llama7b": "example suite (`examples/llama7b.toml`)",
    "validation": "validation set (`bench/validation/suite.toml`)",
}
SUITE_FILES = {
    "llama7b": ROOT / "examples" / "llama7b.toml",
    "validation": ROOT / "bench" / "validation" / "suite.toml",
}
RUNS = 5
HEAVY = 0.05
TOL_KERNEL = 0.03
TOL_LEVEL = 0.01
SPREAD_LONG = 0.005
LONG_US = 100.0
MARKER = "attnprof_case_marker"
SM, MEM, TENSOR, DRAM, DUR = (
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__time_duration.sum",
)
CLASSES = ("compute", "memory", "latency")
FINDINGS = "[docs/findings.md](../../docs/findings.md)"  # the decisions, each with its experiment's command and commit


def _finding(anchor: str, title: str) -> str:
    """A markdown link from the report (``bench/reports/``) to a section of docs/findings.md."""
    return f"[{title}](../../docs/findings.md#{anchor})"


def fmt_us(x: float | None) -> str:
    """A duration in µs as the committed reports print it, number only (the caller writes "µs" after it)."""
    if x is None:
        return "—"
    return f"{x:,.1f}" if x >= 10 else f"{x:.2f}"


def _json(path: Path) -> Any:
    if path.suffix != ".gz":
        return json.loads(path.read_text())
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _ncu(
    data: Path, csv_name: str, map_name: str
) -> dict[str, list[tuple[str, tuple[int, ...] | None, dict[str, float]]]]:
    """ncu rows per case (``suite/case id``), in launch order, split at the marker kernels."""
    with gzip.open(data / csv_name, "rt") as f:
        rows = parse_ncu_csv(f.read())
    index = json.loads((data / map_name).read_text())
    per: dict[str, list[tuple[str, tuple[int, ...] | None, dict[str, float]]]] = {}
    current: str | None = None
    for name, grid, _block, values in rows:
        if base_name(name) == MARKER:
            current = index.get(str(grid[0])) if grid else None
            if current:
                per[current] = []
            continue
        if current:
            per[current].append((name, grid, values))
    return per


def ncu_class(values: dict[str, float]) -> str:
    return counter_bound(values[SM], values[MEM], values.get(TENSOR))


_NAME_NOISE = frozenset(
    [
        "void",
        "at",
        "native",
        "std",
        "array",
        "char",
        "int",
        "long",
        "unsigned",
        "const",
        "cuda",
        "detail",
        "TensorInfo",
        "T1",
        "T2",
        "T3",
        "T4",
        "operator",
        "lambda",
        "instance",
        "anonymous",
        "unnamed",
        "namespace",
        "ul",
        "u",
        "l",
        "bool",
        "float",
        "double",
        "Half",
        "BFloat16",
        "c10",
        "signed",
        "short",
    ]
)


def name_signature(name: str) -> tuple[str, ...]:
    """A launched kernel's name as words, the same from Kineto's demangler and ncu's: namespaces, numbers, scalar
    types and the demanglers' own spellings (``{lambda()#3}`` against ``[lambda() (instance 3)]``) dropped, so the
    functor and template words that tell one elementwise kernel from another remain."""
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", name)
    return tuple(w for w in words if w not in _NAME_NOISE)


def same_signature(a: tuple[str, ...], b: tuple[str, ...], words: int = 4) -> bool:
    """Two signatures of one kernel: their first ``words`` words agree (ncu prints the template arguments, Kineto the
    function's parameters as well)."""
    k = min(len(a), len(b), words)
    return k > 0 and a[:k] == b[:k]


def match_launches(kernels: list[Kernel], launches: list[tuple[str, Any]]) -> dict[int, list[int]]:
    """Which launches (name, grid, in launch order) are which of the case's kernels.

    A kernel takes up to its ``launches_per_iter`` launches, in order; its record keeps its first launch's grid, so only
    its first launch must agree with it. First each launch goes to the first kernel whose name reads the same word for
    word (``name_signature``): several elementwise kernels share a base name and differ in their functor; then the
    launches left go, in order, to the kernels left of the same base name (templates stripped)."""
    left = [round(k.launches_per_iter) for k in kernels]
    taken: dict[int, int] = {}
    sigs = [name_signature(k.name) for k in kernels]
    bases = [base_name(k.name) for k in kernels]
    launch_sigs = [name_signature(name) for name, _ in launches]
    launch_bases = [base_name(name) for name, _ in launches]
    rules: tuple[Callable[[int, int], bool], ...] = (
        lambda i, j: same_signature(sigs[i], launch_sigs[j]),
        lambda i, j: bases[i] == launch_bases[j],
    )
    for same in rules:
        for j, (_name, grid) in enumerate(launches):
            if j in taken:
                continue
            for i, k in enumerate(kernels):
                if left[i] <= 0 or not same(i, j):
                    continue
                first = left[i] == round(k.launches_per_iter)
                if first and grid and k.grid and tuple(k.grid) != tuple(grid):
                    continue
                left[i] -= 1
                taken[j] = i
                break
    out: dict[int, list[int]] = {i: [] for i in range(len(kernels))}
    for j in sorted(taken):
        out[taken[j]].append(j)
    return out


@dataclass
class KernelRow:
    suite: str
    case: Case
    kernel: Kernel
    index: int
    share: float
    ours_us: float  # per launch, median over the runs
    ncu_us: float | None
    ncu_none_us: float | None
    counters: dict[str, float] | None

    @property
    def heavy(self) -> bool:
        return self.share >= HEAVY

    @property
    def delta(self) -> float | None:
        return None if self.ncu_us is None else self.ours_us / self.ncu_us - 1

    @property
    def ncu_bound(self) -> str | None:
        return ncu_class(self.counters) if self.counters else None


class Runs:
    """Five processes' result documents and do_bench medians (``runN/<suite>.json.gz``, ``<suite>-dobench.json.gz``)."""

    def __init__(self, data: Path) -> None:
        self.dir = data
        self.docs: dict[str, list[ResultDocument]] = {
            s: [parse_result(_json(data / f"run{i}" / f"{s}.json.gz")) for i in range(1, RUNS + 1)] for s in SUITES
        }
        self.dobench: dict[str, list[dict[str, Any]]] = {
            s: [_json(data / f"run{i}" / f"{s}-dobench.json.gz") for i in range(1, RUNS + 1)] for s in SUITES
        }
        provenance = data / "provenance.json"  # which lease gathered what, where the data folder says
        self.provenance: dict[str, Any] = json.loads(provenance.read_text()) if provenance.exists() else {}

    def cases(self, suite: str) -> list[Case]:
        return [c for c in self.docs[suite][0].cases if c.status == "ok"]

    def runs_of(self, suite: str, case_id: str) -> list[Case]:
        return [c for d in self.docs[suite] if (c := d.case(case_id)) is not None and c.status == "ok"]


class Data(Runs):
    """A lease's five processes with Nsight Compute's passes and the auxiliary experiments beside them."""

    def __init__(self, data: Path) -> None:
        super().__init__(data)
        self.ncu = _ncu(data, "ncu.csv.gz", "ncu-map.json")
        self.ncu_none = _ncu(data, "ncu-none.csv.gz", "ncu-none-map.json")
        self.hold = json.loads((data / "hold.json").read_text())
        self.flushes = json.loads((data / "flush-variants.json").read_text())
        self.spin_events = json.loads((data / "ncu-overhead" / "events.json").read_text())
        with gzip.open(data / "ncu-overhead" / "ncu.csv.gz", "rt") as f:
            spins = [(v[DUR] / 1000) for name, _g, _b, v in parse_ncu_csv(f.read()) if base_name(name) == "spin_kernel"]
        lengths = [k for k in self.spin_events if k != "sm_clock_mhz"]
        per = len(spins) // len(lengths)  # launches per length, in order
        self.spin_ncu = {k: st.median(spins[i * per : (i + 1) * per]) for i, k in enumerate(lengths)}
        self.versions = (data / "versions.txt").read_text().strip()
        self.ncu_version = next(
            (ln.strip() for ln in (data / "ncu-version.txt").read_text().splitlines() if ln.startswith("Version")), "?"
        )
        self.rows = [r for s in SUITES for r in self._kernel_rows(s)]

    def _kernel_rows(self, suite: str) -> list[KernelRow]:
        out = []
        for case in self.cases(suite):
            key = f"{suite}/{case.id}"
            rows, nones = self.ncu.get(key, []), self.ncu_none.get(key, [])
            kernels = case.kernels
            total = sum(k.duration_us.median for k in kernels) or 1.0
            launches: dict[int, list[tuple[dict[str, float], float | None]]] = {i: [] for i in range(len(kernels))}
            for i, js in match_launches(kernels, [(name, grid) for name, grid, _ in rows]).items():
                for j in js:
                    name, _, values = rows[j]
                    none = (
                        nones[j][2].get(DUR) if j < len(nones) and base_name(nones[j][0]) == base_name(name) else None
                    )
                    launches[i].append((values, none))
            runs = self.runs_of(suite, case.id)
            for i, k in enumerate(kernels):
                per_run = [r.kernels[i].duration_us.median for r in runs if len(r.kernels) == len(kernels)]
                ours = st.median(per_run) / max(k.launches_per_iter, 1.0)
                got = launches[i]
                # per-launch mean over the iteration; launches of another configuration left it unmatched
                complete = got and len(got) == round(k.launches_per_iter)
                ncu_us = sum(v[DUR] for v, _ in got) / len(got) / 1000 if complete else None
                nones_us = [n for _, n in got if n is not None] if complete else []
                out.append(
                    KernelRow(
                        suite, case, k, i, k.duration_us.median / total, ours, ncu_us,
                        sum(nones_us) / len(nones_us) / 1000 if nones_us else None, got[0][0] if got else None,
                    )
                )  # fmt: skip
        return out


def _rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def _pct(x: float | None, digits: int = 1, sign: bool = True) -> str:
    if x is None:
        return "—"
    return f"{100 * x:+.{digits}f}%" if sign else f"{100 * x:.{digits}f}%"


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / st.median(values)


def _span(values: list[float], show: Any = _pct, sep: str = " to ") -> str:
    """``lo to hi`` of the values as ``show`` prints them (one figure where both print alike); "—" when empty."""
    if not values:
        return "—"
    lo, hi = show(min(values)), show(max(values))
    return lo if lo == hi else f"{lo}{sep}{hi}"


def _upct(values: list[float], digits: int = 0) -> str:
    """``lo–hi%`` of fractions, unsigned."""
    return _span(values, lambda x: f"{100 * x:.{digits}f}", "–") + "%"


def _net_delta(r: KernelRow, overhead: float) -> float:
    """Ours against ncu's reading less what ncu adds to every replayed launch."""
    return r.ours_us / ((r.ncu_us or 0) - overhead) - 1 if (r.ncu_us or 0) > overhead else float("inf")


def _ncu_overhead(d: Data) -> float:
    """What ncu adds to every replayed launch, µs: its reading of a spin kernel of known length, less the length
    (median over the lengths; ``ncu-overhead/``, an earlier lease)."""
    return st.median(v - float(k) for k, v in d.spin_ncu.items())


def _timing(d: Data) -> TimingConfig | None:
    """The suites' timing, read from the suite files when both are the bytes the runs profiled (and time alike)."""
    timings = []
    for s, path in SUITE_FILES.items():
        if hashlib.sha256(path.read_bytes()).hexdigest() != d.docs[s][0].suite.source_sha256:
            return None
        timings.append(load_suite(path).timing)
    return timings[0] if all(t == timings[0] for t in timings) else None


@dataclass
class CaseRow:
    suite: str
    case: Case
    ours: list[float]
    zero: list[float]
    clean: list[float]
    host_us: float | None

    @property
    def ours_med(self) -> float:
        return st.median(self.ours)

    @property
    def clean_med(self) -> float:
        return st.median(self.clean)

    @property
    def zero_med(self) -> float:
        return st.median(self.zero)

    flush_us: float = 63.0

    @property
    def host_bound(self) -> bool:
        """do_bench measures the host: one iteration takes longer to queue than the flush and the device
        work take to run (do_bench queues while its flush runs; it has no blocking kernel)."""
        return self.host_us is not None and self.host_us > self.ours_med + self.flush_us


def case_rows(d: Runs) -> list[CaseRow]:
    out = []
    for s in SUITES:
        for case in d.cases(s):
            runs = d.runs_of(s, case.id)
            db = [x.get(case.id, {}) for x in d.dobench[s]]
            if len(runs) < RUNS or any("clean" not in x for x in db):
                continue
            hosts = [r.latency_us.host_us for r in runs if r.latency_us and r.latency_us.host_us is not None]
            # the flush reads 256 MiB: its time at the measured copy bandwidth
            flush_us = 2**28 / (d.docs[s][0].environment.peaks.dram_gbps.value * 1e3)
            out.append(
                CaseRow(
                    s, case, [r.latency_us.median for r in runs if r.latency_us], [x["zero"] for x in db],
                    [x["clean"] for x in db], st.median(hosts) if hosts else None, flush_us,
                )
            )  # fmt: skip
    return out


def predicted(k: Kernel) -> str | None:
    return k.bound


def confusion(rows: list[KernelRow]) -> tuple[list[str], int, int]:
    heavy = [r for r in rows if r.heavy and r.counters]
    lines = ["| ours \\ ncu | " + " | ".join(CLASSES) + " |", "|---|" + "---:|" * len(CLASSES)]
    for ours in (*CLASSES, None):
        cells = [sum(1 for r in heavy if predicted(r.kernel) == ours and r.ncu_bound == t) for t in CLASSES]
        if ours is None and not any(cells):
            continue
        lines.append(f"| {ours or 'no bound'} | " + " | ".join(str(c) for c in cells) + " |")
    agree = sum(1 for r in heavy if predicted(r.kernel) == r.ncu_bound)
    return lines, agree, len(heavy)


def render(d: Data, out: Path, plot: Path, again: Runs | None = None) -> str:
    cases = case_rows(d)
    env = d.docs["llama7b"][0].environment
    peaks = env.peaks
    day = d.docs["llama7b"][0].run.created_at.date().isoformat()
    # the auxiliary experiments copied beside the runs: the same day's earlier leases unless provenance names their day
    earlier = d.provenance.get("earlier_day")
    aux_day = earlier if earlier and earlier != day else None
    aux = f"in a lease on {aux_day}" if aux_day else "in a lease earlier that day"
    lines = [
        "# Measurement truth on the H200: flush, decode, custom kernels, bounds and durations against Nsight Compute",
        "",
        ("Everything below comes from one H200 on " if not earlier else "The headline runs come from one H200 on ")
        + f"{day} and everything is recomputed from the raw data in "
        f"`{_rel(d.dir)}`"
        + (f" and `{_rel(again.dir)}`" if again is not None else "")
        + " by this report's script: the five profile processes "
        "(`h200_truth.sh runs`) and the two Nsight Compute passes (`h200_truth.sh ncu`) "
        f"{d.provenance.get('leases', 'in two leases minutes apart')}; "
        f"the flush variants, the hold's place and ncu's per-launch overhead {aux}, with the "
        "flush that summed the buffer into an int64 (section 1 compares it with the shipped one); the placement "
        "experiment (section 4) " + (aux if aux_day else "in a lease before the profile runs") + ". Two sets of cases: "
        "the example suite (prefill of one LLaMA-7B layer through every path, and decode: one token against "
        "KV caches of 4k–32k, GQA 8:1 and MQA, batch 1 and 16) and the validation set (head dims 64, 96 and 256, "
        "fp16 and bf16, cross-attention causal and not, 128-token sequences, forward and backward, and a custom "
        "Triton FlashAttention kernel with and without declared work).",
        "",
        "|  |  |",
        "|---|---|",
        f"| GPU | {env.device.name} (sm_{(env.device.compute_capability or '').replace('.', '')}, {env.device.sm_count} "
        f"SMs, L2 {(env.device.l2_bytes or 0) / 2**20:.0f} MiB), clocks not locked |",
        f"| driver | {env.driver} |",
        f"| software | {d.versions} |",
        f"| Nsight Compute | {d.ncu_version}, `--clock-control none`, default cache control (flushed before each replay) |",
        f"| peaks (this lease) | {peaks.dram_gbps.value:,.0f} GB/s copy; "
        + ", ".join(f"{k} {v.value:,.1f} TFLOP/s" for k, v in peaks.tflops.items())
        + f"; {peaks.origin or peaks.dram_gbps.source} |",
        f"| testbed key | `{env.testbed_key}` |",
        "",
        "The earlier leases' files in the data folder (`hold.json`, `flush-variants.json`, `ncu-overhead/`, "
        "`placement*.json`, `outliers-after-lead.txt`) come from experiments whose scripts have left the tree; each "
        f"is recorded, with its command and the commit that holds it, in {FINDINGS} (sections "
        "[the hold before the flush](../../docs/findings.md#the-hold-before-the-flush), "
        "[the flush before each sample](../../docs/findings.md#the-flush-before-each-sample), "
        "[the fixed cost of Nsight Compute per launch](../../docs/findings.md#the-fixed-cost-of-nsight-compute-per-launch), "
        "[timing in rounds](../../docs/findings.md#timing-in-rounds) and "
        "[a lead hold before each batch](../../docs/findings.md#a-lead-hold-before-each-batch)).",
        "",
        "Produced by (on the GPU host, from the repository root, the pydantic wheels in `.whl/`; then here):",
        "",
        "```bash",
        f"BUDGET_S={d.provenance.get('budget_s', 480)} bash bench/h200_truth.sh runs {RUNS}",
        "bash bench/h200_truth.sh ncu",
        *(
            [f"BUDGET_S={again.provenance.get('budget_s', 480)} bash bench/h200_truth.sh runs {RUNS}  # --again"]
            if again is not None
            else []
        ),
        f"python -m bench.h200_truth_report --data {_rel(d.dir)} "
        + (f"--again {_rel(again.dir)} " if again is not None else "")
        + f"--out {_rel(out)}",
        "```",
        "",
    ]
    lines += _targets(d, cases, again)
    lines += _flush_section(d, cases)
    lines += _bound_section(d)
    lines += _duration_section(d)
    lines += _level_spread_section(d, cases)
    lines += _custom_and_decode(d)
    lines += _reconcile_section(d)
    lines += _kernel_tables(d)
    _plot(d, cases, plot)
    return "\n".join(lines) + "\n"


def _targets(d: Data, cases: list[CaseRow], again: Runs | None = None) -> list[str]:
    out = ["## Targets", "", "| target | figure | status |", "|---|---|---|"]
    mem = [r for r in d.rows if r.heavy and r.ncu_bound == "memory" and r.ncu_us and r.ncu_us >= 10]
    mem_ok = sum(1 for r in mem if abs(r.delta or 1) <= TOL_KERNEL)
    out.append(
        f"| clean flush: memory-bound kernels (≥ 10 µs, ≥ 5% of a case) within 3% of ncu | {mem_ok}/{len(mem)} "
        "(section 1 names the others and their cause) | "
        + ("met" if mem_ok == len(mem) else "**not met**: gaps explained")
        + " |"
    )
    for s in SUITES:
        _, agree, n = confusion([r for r in d.rows if r.suite == s])
        status = "met" if agree >= 0.9 * n else "**not met**"
        out.append(
            f"| bound without counters = ncu's class, ≥ 90% of kernels ≥ 5%, {s} | {agree}/{n} = {agree / n:.0%} | {status} |"
        )
    heavy = [r for r in d.rows if r.heavy and r.counters]
    out.append(
        f"| `--counters ncu` agrees with NVIDIA's rule | {len(heavy)}/{len(heavy)} (the same function, "
        "`counter_bound`, applied to ncu's values) | met |"
    )
    ovh = _ncu_overhead(d)
    for s in SUITES:
        rows = [r for r in d.rows if r.suite == s and r.heavy and r.ncu_us]
        ok = sum(1 for r in rows if abs(r.delta or 1) <= TOL_KERNEL)
        net = sum(1 for r in rows if abs(_net_delta(r, ovh)) <= TOL_KERNEL)
        out.append(
            f"| per-kernel medians within 3% of ncu, kernels ≥ 5%, {s} | {ok}/{len(rows)} "
            f"({net}/{len(rows)} against ncu less its measured {ovh:.1f} µs per launch) | "
            + ("met" if ok == len(rows) else "**not met**: gaps in section 3")
            + " |"
        )
    device = [c for c in cases if not c.host_bound]
    within = sum(1 for c in device if abs(c.ours_med / c.clean_med - 1) <= TOL_LEVEL)
    out.append(
        f"| case medians within 1% of do_bench (same clean flush, same processes) | {within}/{len(device)} cases whose "
        f"device time exceeds their host time; the {len(cases) - len(device)} others are host-bound under do_bench "
        "(section 4) | " + ("met" if within == len(device) else "**not met**: gaps in section 4") + " |"
    )
    no_wider = sum(1 for c in cases if _spread(c.ours) <= _spread(c.clean) + 1e-12)
    no_wider_z = sum(1 for c in cases if _spread(c.ours) <= _spread(c.zero) + 1e-12)
    out.append(
        f"| spread of {RUNS} processes' medians no wider than do_bench's on ≥ 80% of cases | against do_bench's clean "
        f"flush {no_wider}/{len(cases)} = {no_wider / len(cases):.0%}; against its own zero_() flush {no_wider_z}/"
        f"{len(cases)} = {no_wider_z / len(cases):.0%} | "
        + ("met" if no_wider >= 0.8 * len(cases) else "**not met**")
        + " |"
    )
    tight = _tight(cases)
    cause = _reference_spread_words(cases, again)
    cause += (
        ". What moves a case's level between processes, and what the runner took up against it: "
        + _finding("the-spread-between-processes", "the spread between processes")
        + ", "
        + _finding("levels-between-builds", "levels between builds")
        + " and "
        + _finding("a-stream-per-case-round", "a stream per case-round")
    )
    cause += ". Clocks were not locked: the lease leaves them as it finds them"
    out.append(
        f"| spread ≤ 0.5% for cases ≥ 100 µs | {tight.ours}/{tight.cases}{cause} | "
        + ("met" if tight.ours == tight.cases else "**not met**: section 4")
        + " |"
    )
    out.append("")
    return out


class Tight(NamedTuple):
    """The spread target over a set of cases ≥ 100 µs: how many spread ≤ 0.5% (ours, do_bench with the clean flush,
    do_bench with its zero_()), of how many, and the median spread of ours and of do_bench clean."""

    ours: int
    clean: int
    zero: int
    cases: int
    ours_median: float
    clean_median: float


def _tight(rows: list[CaseRow]) -> Tight:
    long_ = [c for c in rows if c.ours_med >= LONG_US]
    return Tight(
        sum(1 for c in long_ if _spread(c.ours) <= SPREAD_LONG),
        sum(1 for c in long_ if _spread(c.clean) <= SPREAD_LONG),
        sum(1 for c in long_ if _spread(c.zero) <= SPREAD_LONG),
        len(long_),
        st.median(_spread(c.ours) for c in long_),
        st.median(_spread(c.clean) for c in long_),
    )


def _tight_words(t: Tight, device: Tight) -> str:
    return (
        f"ours {t.ours}/{t.cases}, do_bench {t.clean}/{t.cases} with the clean flush and {t.zero}/{t.cases} with its "
        f"zero_() (median spreads: ours {_pct(t.ours_median, 2, False)}, do_bench clean "
        f"{_pct(t.clean_median, 2, False)}); over the {device.cases} cases that are not host-bound under do_bench, ours "
        f"{device.ours}/{device.cases} and do_bench {device.clean}/{device.cases} and {device.zero}/{device.cases} "
        f"(medians {_pct(device.ours_median, 2, False)} and {_pct(device.clean_median, 2, False)})"
    )


def _reference_spread_words(cases: list[CaseRow], again: Runs | None) -> str:
    """The spread target beside do_bench's in the same processes, for this report's runs and a second run."""
    sets = [cases] + ([case_rows(again)] if again is not None else [])
    tights = [(_tight(rows), _tight([c for c in rows if not c.host_bound])) for rows in sets]
    words = ". do_bench timed the same cases in the same processes: " + _tight_words(*tights[0])
    if again is not None:
        at = again.docs["llama7b"][0].run.created_at
        words += (
            f"; in a second five-process run on the same GPU right after (`{_rel(again.dir)}`, {at:%Y-%m-%d %H:%M} "
            "UTC): " + _tight_words(*tights[1])
        )
    if all(d.ours >= d.clean and d.ours >= d.zero for _, d in tights):
        words += (
            ". The reference timer, in the same processes, meets the target on no more cases than the profiler: "
            "what is left is a level each process lands on, not the profiler's timing; whether locked clocks would "
            "remove it is not measured"
        )
    return words


def _flush_us(d: Data, copies: float = 1.0) -> float:
    """A sweep that moves ``copies`` times the 256 MiB flush buffer, µs at the runs' measured copy bandwidth."""
    return copies * 2**28 / (d.docs["llama7b"][0].environment.peaks.dram_gbps.value * 1e3)


def _lengthened(d: Data) -> dict[str, float]:
    """The flush-variant cases the one-read flush read more than 0.5% longer than the int64 sum (``flush-variants.json``)."""
    ratios = {k: v["amax"] / v["sum-int64"] - 1 for k, v in d.flushes.items()}
    return {k: x for k, x in ratios.items() if x > 0.005}


def _flush_section(d: Data, cases: list[CaseRow]) -> list[str]:
    out = [
        "## 1. The clean flush",
        "",
        "The flush is now a read sweep over 256 MiB (a reduction into a preallocated scalar: see below), after the hold, right "
        "before the timed iteration. do_bench ran in the same processes twice: with its own flush (`zero_()` of 256 "
        "MB, which leaves the L2 full of dirty lines) and with ours patched in. The zero_() flush is what the "
        "profiler used before: the gap between the two columns is what memory-bound cases paid for it.",
        "",
        "| case | do_bench, zero_() flush µs | do_bench, clean flush µs | change | ours µs |",
        "|---|---:|---:|---:|---:|",
    ]
    shown = []
    for c in cases:
        if c.host_bound:
            continue
        change = c.clean_med / c.zero_med - 1
        if abs(change) >= 0.02 or "decode" in c.case.id:
            shown.append((c, change))
            out.append(
                f"| {c.suite}/{c.case.id} | {fmt_us(c.zero_med)} | {fmt_us(c.clean_med)} | {_pct(change)} | {fmt_us(c.ours_med)} |"
            )
    up = [(c, x) for c, x in shown if x > 0]
    if shown:
        out += [
            "",
            f"do_bench's clean flush read shorter than its zero_() flush on {sum(1 for _, x in shown if x < 0)} of "
            f"these {len(shown)} rows"
            + (
                f" and longer on {len(up)}, each by less than do_bench's own five medians spread: "
                + "; ".join(
                    f"{c.suite}/{c.case.id} {_pct(x)}, spread {_pct(_spread(c.clean), 0, False)} (clean) and "
                    f"{_pct(_spread(c.zero), 0, False)} (zero_())"
                    for c, x in up
                )
                if up and all(x < min(_spread(c.clean), _spread(c.zero)) for c, x in up)
                else f" and longer on {len(up)}: " + ", ".join(f"{c.suite}/{c.case.id} {_pct(x)}" for c, x in up)
                if up
                else ""
            )
            + ".",
        ]
    top: dict[str, KernelRow] = {}
    for r in d.rows:
        key = f"{r.suite}/{r.case.id}"
        if r.counters and (key not in top or r.share > top[key].share):
            top[key] = r
    compute = [
        c for c in cases if not c.host_bound and (t := top.get(f"{c.suite}/{c.case.id}")) and t.ncu_bound == "compute"
    ]
    moved = {f"{c.suite}/{c.case.id}": c.clean_med / c.zero_med - 1 for c in compute}
    by_key = {f"{c.suite}/{c.case.id}": c for c in cases}
    f = d.flushes
    decode = [k for k in f if "decode" in k]
    penalty = [f[k]["zero_"] / f[k]["sum-int64"] - 1 for k in decode]
    lengthened = _lengthened(d)
    out += [
        "",
        f"Compute-bound cases (their largest kernel compute-bound by ncu; {len(compute)} device-bound ones) moved "
        f"{_span(list(moved.values()))}: " + ", ".join(f"{k} {_pct(v)}" for k, v in moved.items()) + "."
        if moved
        else "",
        "",
        "**Which read sweep.** The runs above flush with one read (a max in the buffer's own dtype: 256 MiB read, "
        f"~{_flush_us(d):.0f} µs at the measured copy bandwidth). An earlier version summed into int64, which first "
        "writes an int64 copy of the buffer (512 MiB) and then reads it: it ends on a read, so the L2 holds clean "
        f"lines, but it moves five times the bytes (~{_flush_us(d, 5):.0f} µs). Measured side by side after the "
        "hold, interleaved in blocks of 10, 300 iterations each ("
        + _finding("the-flush-before-each-sample", "the flush before each sample")
        + ", "
        + (
            f"a lease on {d.provenance['earlier_day']}"
            if d.provenance.get("earlier_day")
            else "same day, an earlier lease"
        )
        + ": `flush-variants.json`), medians in µs:",
        "",
        "| case | sum into int64 (before) | one read (now) | zero_() |",
        "|---|---:|---:|---:|",
        *[
            f"| {k} | {fmt_us(v['sum-int64'])} | {fmt_us(v['amax'])} ({_pct(v['amax'] / v['sum-int64'] - 1)}) | "
            f"{fmt_us(v['zero_'])} ({_pct(v['zero_'] / v['sum-int64'] - 1)}) |"
            for k, v in f.items()
        ],
        "",
        f"Both reads remove the dirty-line penalty that `zero_()` leaves (decode {_span(penalty, lambda x: _pct(x, 0))} "
        "against the int64 sum). The one read lengthened "
        + (", ".join(f"{k} {_pct(v)}" for k, v in lengthened.items()) or "no case by more than 0.5%")
        + f" and read the decode cases {_span([f[k]['amax'] / f[k]['sum-int64'] - 1 for k in decode])}: after the "
        "shorter flush the kernel starts on a GPU that was busy for less time, which section 3 shows matters to "
        "compute-bound kernels (and is closer to ncu, which replays each kernel after an idle gap). do_bench given "
        "the same flush has no idle gap before it"
        + (
            ": in section 4 those cases read "
            + ", ".join(
                f"{k} {_pct(by_key[k].ours_med / by_key[k].clean_med - 1, 2)}" for k in lengthened if k in by_key
            )
            + " against it."
            if any(k in by_key for k in lengthened)
            else "."
        ),
        "",
        "Memory-bound kernels (ncu's class, ≥ 10 µs, ≥ 5% of a case) against ncu's `gpu__time_duration` (ncu replays "
        "each kernel alone on flushed caches; 'ncu, cache none' replays it where it ran, after its predecessors):",
        "",
        "| case | kernel | ours µs | ncu µs | Δ | ncu, cache none µs |",
        "|---|---|---:|---:|---:|---:|",
    ]
    mem = [r for r in d.rows if r.heavy and r.ncu_bound == "memory" and r.ncu_us and r.ncu_us >= 10]
    for r in mem:
        out.append(
            f"| {r.suite}/{r.case.id} | `{r.kernel.key[:48]}` | {fmt_us(r.ours_us)} | {fmt_us(r.ncu_us)} | "
            f"{_pct(r.delta)} | {fmt_us(r.ncu_none_us)} |"
        )
    shorter = [r for r in mem if (r.delta or 0) < -TOL_KERNEL]
    longer = [r for r in mem if (r.delta or 0) > TOL_KERNEL]
    longer_none = [r for r in longer if r.ncu_none_us and r.ncu_us]
    words = []
    if shorter:
        where = (
            "all in decode cases"
            if all(r.case.id.startswith("decode") for r in shorter)
            else ", ".join(dict.fromkeys(f"{r.suite}/{r.case.id}" for r in shorter))
        )
        words.append(
            f"Where a memory-bound kernel reads more than 3% shorter here ({len(shorter)} kernels, {where}), ncu's reading is "
            f"{_span([(r.ncu_us or 0) - r.ours_us for r in shorter], fmt_us, '–')} µs longer; ncu adds a fixed "
            f"{_ncu_overhead(d):.1f} µs to every replayed launch (section 3)."
        )
    if longer:
        words.append(
            f"Where one reads more than 3% longer here ({len(longer)} kernels, in "
            + ", ".join(dict.fromkeys(f"{r.suite}/{r.case.id}" for r in longer))
            + "), it follows a kernel that wrote the matrix it reads (the unfused paths' passes over the score "
            "matrix): it starts with an L2 full of its predecessor's dirty lines, which ncu's replay flushes first"
            + (
                f"; ncu with cache control none, which replays it after its predecessors, reads these kernels a median "
                f"{_pct(st.median((r.ncu_none_us or 0) / (r.ncu_us or 1) - 1 for r in longer_none))} longer than "
                f"with its flush (ours: {_pct(st.median(r.delta or 0 for r in longer_none))})"
                if longer_none
                else ""
            )
            + ". That is the kernel as the model runs it, not an artefact of our flush: the flush comes once per "
            "iteration, before its first kernel."
        )
    out += ["", " ".join(words), ""] if words else [""]
    return out


def _bound_section(d: Data) -> list[str]:
    out = [
        "## 2. Bound without counters against ncu's class",
        "",
        "ncu's class is NVIDIA's speed-of-light rule with the tensor pipe counted as compute: compute = max(SM %, "
        f"tensor %); both compute and memory SOL under {COUNTER_BUSY_PCT:.0f}%: latency; else the higher (no "
        f"`balanced`). Ours (`classify_bound`): a kernel under {LATENCY_US:.0f} µs per launch is latency; a unit is "
        f"busy at ≥ {BUSY} of the measured peak in useful work (formula FLOPs, minimum bytes); neither busy: latency; "
        "else the busier. The threshold was chosen on the example suite" + _threshold_words(d),
        "",
    ]
    for s, title in SUITES.items():
        lines, agree, n = confusion([r for r in d.rows if r.suite == s])
        out += [f"**{title}**: {agree}/{n} agree ({agree / n:.0%}).", "", *lines, ""]
    out += [
        "Disagreements, with ncu's figures:",
        "",
        "| case | kernel | ours | ncu | our compute / BW util | ncu SM / tensor / memory % |",
        "|---|---|---|---|---|---|",
    ]
    for r in d.rows:
        if r.heavy and r.counters and predicted(r.kernel) != r.ncu_bound:
            c = r.counters
            out.append(
                f"| {r.suite}/{r.case.id} | `{r.kernel.key[:40]}` | {r.kernel.bound or '—'} | {r.ncu_bound} | "
                f"{_pct(r.kernel.compute_util, 0, False)} / {_pct(r.kernel.bandwidth_util, 0, False)} | "
                f"{c[SM]:.0f} / {c.get(TENSOR, 0):.0f} / {c[MEM]:.0f} |"
            )
    out += ["", _disagreement_words(d), ""]
    return out


def _bound_at(k: Kernel, busy: float) -> str | None:
    """``classify_bound``'s rule on a kernel's recorded utilisations, with ``busy`` as the threshold."""
    if k.duration_us.median / max(k.launches_per_iter, 1.0) < LATENCY_US:
        return "latency"
    if k.compute_util is None and k.bandwidth_util is None:
        return None
    compute, memory = k.compute_util or 0.0, k.bandwidth_util or 0.0
    if compute < busy and memory < busy:
        return "latency"
    return "compute" if compute >= memory else "memory"


def _threshold_words(d: Data) -> str:
    """Each suite's agreement at ``BUSY`` against the other thresholds (0.01 apart): where it holds, and the best."""
    heavy = [r for r in d.rows if r.heavy and r.counters]
    if any(_bound_at(r.kernel, BUSY) != predicted(r.kernel) for r in heavy):
        return "."  # the documents' bounds are not this rule on their utilisations: no sweep to show
    steps = [round(BUSY + i / 100, 2) for i in range(-25, 26)]

    def runs(picked: list[float]) -> str:
        """The picked thresholds as ranges of neighbours: 0.52–0.54, 0.58."""
        groups: list[list[float]] = []
        for t in picked:
            if groups and steps.index(t) == steps.index(groups[-1][-1]) + 1:
                groups[-1].append(t)
            else:
                groups.append([t])
        return ", ".join(f"{g[0]:.2f}" if len(g) == 1 else f"{g[0]:.2f}–{g[-1]:.2f}" for g in groups)

    words = []
    for s, name in (("llama7b", "example suite"), ("validation", "validation set")):
        rows = [r for r in heavy if r.suite == s]
        agree = {t: sum(1 for r in rows if _bound_at(r.kernel, t) == r.ncu_bound) for t in steps}
        at, best = agree[BUSY], max(agree.values())
        i = j = steps.index(BUSY)
        while i > 0 and agree[steps[i - 1]] == at:
            i -= 1
        while j < len(steps) - 1 and agree[steps[j + 1]] == at:
            j += 1
        holds = f"only at {BUSY:.2f}" if i == j else f"from {steps[i]:.2f} to {steps[j]:.2f}"
        words.append(
            f"the {name}'s {at}/{len(rows)} holds {holds}"
            + (
                ", the most any gives"
                if best == at
                else f", and {runs([t for t in steps if agree[t] == best])} give {best}/{len(rows)}"
            )
        )
    return (
        f" of earlier runs. On these runs, of the thresholds from {steps[0]:.2f} to {steps[-1]:.2f} in steps of "
        "0.01: " + "; ".join(words) + "."
    )


def _disagreement_words(d: Data) -> str:
    """The kernels the rule and ncu class differently, by why, with their figures."""
    kinds: dict[str, dict[str, list[KernelRow]]] = {}
    for r in d.rows:
        if not (r.heavy and r.counters) or predicted(r.kernel) == r.ncu_bound:
            continue
        c, ours = r.counters, predicted(r.kernel)
        if r.ncu_bound == "compute" and ours == "latency":
            kind = "tensor" if c.get(TENSOR, 0) > c[SM] else "issue"
        elif r.ncu_bound == "compute" and ours == "memory":
            kind = "edge"
        elif r.ncu_bound == "memory" and ours == "latency":
            kind = "bytes"
        else:
            kind = "other"
        kinds.setdefault(kind, {}).setdefault(f"`{r.kernel.key[:40]}`", []).append(r)
    if not kinds:
        return "The rule and ncu class every kernel ≥ 5% alike."

    def counter(rows: list[KernelRow], key: str) -> str:
        return _span([(r.counters or {}).get(key, 0.0) for r in rows], lambda x: f"{x:.0f}", "–") + "%"

    def util(rows: list[KernelRow], compute: bool) -> str:
        values = [(r.kernel.compute_util if compute else r.kernel.bandwidth_util) or 0.0 for r in rows]
        return _span(values, lambda x: f"{100 * x:.0f}", "–") + "%"

    phrases: dict[str, tuple[str, Callable[[list[KernelRow]], str]]] = {
        "issue": (
            "CUDA-core kernels whose issue slots are busy while their useful bytes are not, latency here and compute "
            "under ncu: ",
            lambda rows: f"SM {counter(rows, SM)} moving {util(rows, False)} of the measured bandwidth",
        ),
        "edge": (
            "kernels busy on both units, memory here and compute under ncu (its SM figure ahead): ",
            lambda rows: f"SM {counter(rows, SM)}, memory {counter(rows, MEM)}",
        ),
        "tensor": (
            "tensor-core kernels, latency here and compute under ncu, whose useful FLOPs read under the threshold "
            "while the tensor pipe is busy: ",
            lambda rows: f"{util(rows, True)} of the measured peak, tensor pipe {counter(rows, TENSOR)}",
        ),
        "bytes": (
            f"kernels whose useful bytes read under {BUSY} of the measured bandwidth while ncu's memory SOL is over "
            f"{COUNTER_BUSY_PCT:.0f}%: ",
            lambda rows: f"{util(rows, False)} of the bandwidth, memory {counter(rows, MEM)}",
        ),
        "other": (
            "others: ",
            lambda rows: (
                f"{predicted(rows[0].kernel) or 'no bound'} here, {rows[0].ncu_bound} under ncu, SM "
                f"{counter(rows, SM)}, tensor {counter(rows, TENSOR)}, memory {counter(rows, MEM)}"
            ),
        ),
    }
    return (
        "What the rule cannot see: "
        + "; ".join(
            head + ", ".join(f"{name} ({figures(rows)})" for name, rows in kinds[kind].items())
            for kind, (head, figures) in phrases.items()
            if kind in kinds
        )
        + ". `--counters ncu` records both bounds."
    )


def _duration_section(d: Data) -> list[str]:
    out = [
        "## 3. Kernel durations against ncu",
        "",
        f"Ours: the per-launch median of the trace pass (Kineto), median over the {RUNS} processes. ncu: "
        "`gpu__time_duration` of the launch in one profiled iteration.",
        "",
        "| kernels ≥ 5% of a case | n | within 3% | median Δ | ours shorter by > 3% (median µs shorter) | "
        "ours longer by > 3% | within 3% of ncu less its per-launch overhead |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    overhead = _ncu_overhead(d)
    groups: dict[str, Callable[[KernelRow], bool]] = {
        "under 10 µs": lambda r: r.ncu_us is not None and r.ncu_us < 10,
        "10 µs and over": lambda r: r.ncu_us is not None and r.ncu_us >= 10,
    }
    gaps: list[float] = []  # the µs column
    for s in SUITES:
        for label, pred in groups.items():
            rows = [r for r in d.rows if r.suite == s and r.heavy and pred(r)]
            if not rows:
                continue
            deltas = [r.delta or 0 for r in rows]
            shorter = [(r.ncu_us or 0) - r.ours_us for r in rows if (r.delta or 0) < -TOL_KERNEL]
            gap = f" ({st.median(shorter):.1f})" if shorter else ""
            gaps += [st.median(shorter)] if shorter else []
            out.append(
                f"| {s}, {label} | {len(rows)} | {sum(abs(x) <= TOL_KERNEL for x in deltas)} | {_pct(st.median(deltas))} "
                f"| {len(shorter)}{gap} | {sum(x > TOL_KERNEL for x in deltas)} | "
                f"{sum(abs(_net_delta(r, overhead)) <= TOL_KERNEL for r in rows)} |"
            )
    h = d.hold
    cud = h.get("llama7b/sdpa[backend=cudnn,pass=fwd]", {})
    tri = h.get("validation/triton[causal=false]", {})
    ovh = _ncu_overhead(d)
    heavy = [r for r in d.rows if r.heavy and r.ncu_us is not None]
    short_rows = [r for r in heavy if (r.delta or 0) < -TOL_KERNEL]
    short = [r for r in heavy if (r.ncu_us or 0) < 10]
    decode = [
        r for r in heavy if r.case.id.startswith("decode") and r.ncu_bound == "memory" and 10 <= (r.ncu_us or 0) < 100
    ]
    both = [r for r in short_rows if r.ncu_none_us is not None]
    # ncu's flush before the replay is most of the gap: over twice the fixed overhead with it, under it without
    cache = [r for r in both if (r.ncu_us or 0) - r.ours_us > 2 * ovh and (r.ncu_none_us or 0) - r.ours_us < ovh]
    # an idle gap before the replay: over twice the fixed overhead with ncu's flush and more than it without
    idle = [
        r
        for r in both
        if r.ncu_bound in ("compute", "latency")
        and (r.ncu_us or 0) - r.ours_us > 2 * ovh
        and (r.ncu_none_us or 0) - r.ours_us > ovh
    ]
    held = [v["flush-hold"] / v["hold-flush"] - 1 for k, v in h.items() if "decode" in k]
    none_gap = st.median((r.ncu_none_us or 0) - r.ours_us for r in both) if both else 0.0
    flush_gap = st.median((r.ncu_us or 0) - r.ours_us for r in both) if both else 0.0
    out += [
        "",
        "The gaps, and what was measured about them:",
        "",
        "- **Ours shorter by a few microseconds.** Where ours is shorter by more than 3%, ncu's reading is longer by "
        f"{_span(gaps, lambda x: f'{x:.1f}', '–')} µs per launch in the median of each group (the µs column above). "
        "Measured on a kernel of known length (`torch.cuda._sleep`, which spins a number of SM cycles; "
        + _finding("the-fixed-cost-of-nsight-compute-per-launch", "the fixed cost of Nsight Compute per launch")
        + ", an earlier lease: `ncu-overhead/`): "
        + ", ".join(f"{float(k):g} µs → ncu {v:.2f}" for k, v in d.spin_ncu.items())
        + f" (SM clock {d.spin_events.get('sm_clock_mhz')} MHz): ncu adds {ovh:.1f} µs to every replayed launch. "
        f"For the kernels under 10 µs that is {_upct([ovh / r.ours_us for r in short])} of ours"
        + (
            f"; for the {_span([r.ours_us for r in decode], fmt_us, '–')} µs memory-bound decode kernels "
            f"{_upct([ovh / r.ours_us for r in decode])}, against their gaps of {_upct([-(r.delta or 0) for r in decode])}"
            if decode
            else ""
        )
        + (
            f". With cache control none (no flush before the replay) ncu reads these kernels a median "
            f"{none_gap:.1f} µs longer than ours, against {flush_gap:.1f} µs with its flush"
            + (": its flush is not what makes it longer" if none_gap >= flush_gap / 2 else "")
            if both
            else ""
        )
        + (
            ", except where it is most of the gap (over twice the fixed overhead with it, under it without): "
            "kernels that read what their predecessor left in L2, "
            + ", ".join(
                f"`{r.kernel.key[:40]}` in {r.suite}/{r.case.id} ({fmt_us((r.ncu_us or 0) - r.ours_us)} µs longer "
                f"with the flush, {fmt_us((r.ncu_none_us or 0) - r.ours_us)} without)"
                for r in cache
            )
            if cache
            else ""
        )
        + ".",
        f"- **Compute- and latency-bound kernels, ours {_upct([-(r.delta or 0) for r in idle], 1)} shorter** ({len(idle)} "
        "kernels: those ncu reads longer than ours by more than twice its fixed overhead with its flush, and by more "
        "than it without). They ran back to back after the flush in our trace; ncu replays each one after an idle gap (its "
        "save and restore between passes). The same gap was measured without ncu ("
        + _finding("the-hold-before-the-flush", "the hold before the flush")
        + ", an earlier lease, section 4's hold table): with a nearly idle blocking kernel right before the step, cuDNN forward "
        f"read {cud.get('flush-hold', 0):.1f} µs against {cud.get('hold-flush', 0):.1f} µs when the flush came "
        f"last, the Triton kernel {tri.get('flush-hold', 0):.1f} against {tri.get('hold-flush', 0):.1f} µs; the "
        f"decode cases moved {_span(held)} between the two orders.",
        "- **Memory-bound passes after a writer, ours longer** (section 1): the predecessor's dirty lines.",
        "",
        "Each gap's cause, traced kernel by kernel in ncu's conditions without ncu (after a flush, after an idle gap, "
        "with cold address translations, and the iterations ncu replays traced without it), is recorded in "
        + _finding("kernel-durations-against-nsight-compute", "kernel durations against Nsight Compute")
        + ".",
        "",
    ]
    return out


def _level_spread_section(d: Data, cases: list[CaseRow]) -> list[str]:
    t = _timing(d)
    rounds = (
        f"the samples taken in {t.effective_rounds} rounds over the suite, each case built again in each round and "
        f"sampled until its round's median is within ±{t.round_config().target_rel_ci:.2%}, so the pooled median's "
        f"95% CI is about ±{t.target_rel_ci:.1%}"
        if t is not None
        else "the samples taken in rounds over the suite, each case built again in each round"
    )
    out = [
        "## 4. Case medians and spreads against do_bench",
        "",
        f"{RUNS} independent processes. Ours: `attnprof profile` (events around each iteration, the hold, the clean "
        f"flush; {rounds}). do_bench: "
        "median mode, 25 ms warm-up, 100 ms of repetitions, in the same process right after, with its own `zero_()` "
        "flush and with ours patched in. Spread = (max − min) / median of the five medians.",
        "",
        "| case | ours µs | do_bench clean µs | Δ | do_bench zero_() µs | host µs / iteration | spread ours | "
        "spread do_bench clean | spread do_bench zero_() |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cases:
        flag = " (host-bound under do_bench)" if c.host_bound else ""
        out.append(
            f"| {c.suite}/{c.case.id}{flag} | {fmt_us(c.ours_med)} | {fmt_us(c.clean_med)} | "
            f"{_pct(c.ours_med / c.clean_med - 1, 2)} | {fmt_us(c.zero_med)} | {fmt_us(c.host_us)} | "
            f"{_pct(_spread(c.ours), 2, False)} | {_pct(_spread(c.clean), 2, False)} | {_pct(_spread(c.zero), 2, False)} |"
        )
    device = [c for c in cases if not c.host_bound]
    off = [c for c in device if abs(c.ours_med / c.clean_med - 1) > TOL_LEVEL]
    short = [_spread(c.clean) for c in device if c.ours_med < 50]
    above = [c.ours_med / c.clean_med - 1 for c in device if c.ours_med >= 80 and c.ours_med / c.clean_med - 1 > 0.005]
    block = next((c for c in device if c.case.id == "block"), None)
    above_text = (
        f"From 80 µs up, {len(above)} cases read {_pct(min(above), 1, False)}–{_pct(max(above), 1, False)} above "
        "do_bench (the fused kernels among them)"
        if above
        else "From 80 µs up, no case reads more than 0.5% above do_bench"
    )
    held = d.hold.get("llama7b/block")
    block_text = (
        (
            f"`block` reads {_pct(block.ours_med / block.clean_med - 1, 1)} against do_bench. "
            + (
                f"In the hold experiment below (an earlier lease) the same order as do_bench's (flush, step, no hold) "
                f"read {fmt_us(held['no-hold'])} µs, ours (hold, flush, step) {fmt_us(held['hold-flush'])}, and "
                f"do_bench itself {fmt_us(held['do_bench_clean'])}: its own loop read "
                f"{_pct(held['do_bench_clean'] / held['no-hold'] - 1, 1)} against the same order timed by events, the "
                f"host needing {fmt_us(held['host_us'])} µs per iteration there. "
                if held
                else ""
            )
            + f"In these runs the host needs {fmt_us(block.host_us)} µs per iteration against our "
            f"{fmt_us(block.ours_med)} µs, and do_bench's five medians spread {_pct(_spread(block.clean), 1, False)} "
            f"(clean) and {_pct(_spread(block.zero), 1, False)} (zero_()). "
        )
        if block is not None
        else ""
    )
    flush = _span([c.flush_us for c in cases], lambda x: f"{x:.0f}", "–")
    lengthened = _lengthened(d)
    out += [
        "",
        f"**Level.** {len(device) - len(off)} of {len(device)} device-bound cases are within 1% of do_bench's clean "
        "median. The others: "
        + "; ".join(
            f"{c.suite}/{c.case.id} {_pct(c.ours_med / c.clean_med - 1)} ({fmt_us(c.ours_med)} µs; do_bench's own "
            f"five medians spread {_pct(_spread(c.clean), 1, False)})"
            for c in off
        )
        + ". Under 50 µs do_bench is not a reference on this host: its loop queues the flush and the step from "
        "Python with nothing holding the stream, and where the host needs about as long as the device (`host µs` "
        f"against `ours µs` + {flush} µs of flush) its five medians spread "
        f"{_pct(min(short), 0, False) if short else '-'}–{_pct(max(short), 0, False) if short else '-'} "
        f"(the column above). {above_text}: after the hold (a nearly idle GPU) "
        "the flush is a short read, and a compute-bound kernel that starts on a GPU busy for less time runs "
        "longer; section 1's variants (an earlier lease) measured the shipped one-read flush "
        + (
            "longer than the int64 sum on " + ", ".join(f"{k} ({_pct(v, 1)})" for k, v in lengthened.items())
            if lengthened
            else "no more than 0.5% longer than the int64 sum on any case"
        )
        + ", and the table below the hold's own share. do_bench's loop has no idle gap. "
        + block_text
        + "A host-bound case (the host needs longer to queue one "
        f"iteration than the flush and the step take to run: `host µs` against `ours µs` + {flush} µs) is timed by do_bench "
        "at the host's pace; ours holds the stream with a blocking kernel while the host queues, so it times the device.",
        "",
        "**The hold's place** ("
        + _finding("the-hold-before-the-flush", "the hold before the flush")
        + ", an earlier lease: `hold.json`, int64-sum flush, interleaved blocks of 10, "
        "300 iterations each): "
        "medians in µs.",
        "",
        "| case | flush, hold, step (before) | hold, flush, step (now) | flush, step (do_bench's order) | do_bench clean |",
        "|---|---:|---:|---:|---:|",
    ]
    return out


def _hold_rows(d: Data) -> list[str]:
    return [
        f"| {k} | {fmt_us(v['flush-hold'])} | {fmt_us(v['hold-flush'])} | {fmt_us(v['no-hold'])} | {fmt_us(v['do_bench_clean'])} |"
        for k, v in d.hold.items()
    ]


def _pooling_helps(d: Data) -> str:
    runs = [json.loads(p.read_text()) for p in sorted(d.dir.glob("placement*.json"))]
    keys = [k for k in runs[0] if all(k in r for r in runs)] if runs else []
    helped = sum(
        1 for k in keys if _spread([st.median(r[k]["same"]) for r in runs]) < _spread([r[k]["same"][0] for r in runs])
    )
    return f"{helped} of its {len(keys)} cases"


def _placement_rows(d: Data) -> list[str]:
    runs = [json.loads(p.read_text()) for p in sorted(d.dir.glob("placement*.json"))]
    if not runs:
        return []
    n_rounds = len(next(iter(runs[0].values()))["same"])
    out = [
        "",
        "**Where the spread came from** ("
        + _finding("timing-in-rounds", "timing in rounds")
        + f", an earlier lease: `placement*.json`, {len(runs)} "
        f"processes; in each, per case, {n_rounds} rounds of 150 iterations timed as the profiler times them: `same` one workload back to back, `rebuilt` the "
        "workload built again each round after a pad of random size, `do_bench` once per round). Ranges as "
        "(max − min) / median:",
        "",
        f"| case | µs | range of {n_rounds} round medians in one process: same / rebuilt / do_bench | range of the processes' "
        "pooled medians: same / rebuilt / do_bench | range of the processes' first rounds: same |",
        "|---|---:|---:|---:|---:|",
    ]
    for key in runs[0]:
        if not all(key in r for r in runs):
            continue
        ways = ("same", "rebuilt", "do_bench")
        within = [st.median(_spread(r[key][w]) for r in runs) for w in ways]
        between = [_spread([st.median(r[key][w]) for r in runs]) for w in ways]
        first = _spread([r[key]["same"][0] for r in runs])
        out.append(
            f"| {key} | {fmt_us(st.median(runs[0][key]['same']))} | "
            + " / ".join(_pct(x, 2, False) for x in within)
            + " | "
            + " / ".join(_pct(x, 2, False) for x in between)
            + f" | {_pct(first, 2, False)} |"
        )
    return out


def _spread_words(d: Data, cases: list[CaseRow]) -> list[str]:
    offsets = []
    for i in range(RUNS):
        rel_o = [c.ours[i] / c.ours_med - 1 for c in cases]
        rel_d = [c.clean[i] / c.clean_med - 1 for c in cases]
        offsets.append((i + 1, st.median(rel_o), st.median(rel_d)))
    t = _timing(d)
    ci = t.target_rel_ci if t is not None else None
    largest = max(max(abs(o), abs(x)) for _, o, x in offsets)
    runs = [json.loads(p.read_text()) for p in sorted(d.dir.glob("placement*.json"))]
    keys = [k for k in runs[0] if all(k in r for r in runs)] if runs else []
    placement = ""
    if keys:
        n_rounds = len(runs[0][keys[0]]["same"])
        first = [_spread([r[k]["same"][0] for r in runs]) for k in keys]
        same = [st.median(_spread(r[k]["same"]) for r in runs) for k in keys]
        rebuilt = [st.median(_spread(r[k]["rebuilt"]) for r in runs) for k in keys]
        wide = sum(1 for a, b in zip(same, rebuilt, strict=True) if a >= b)
        placement = (
            f"The placement experiment below (an earlier lease) shows it: one round's medians of the same workload "
            f"range {_pct(st.median(first), 2, False)} apart between its {len(runs)} processes in the median case "
            f"({_upct(first, 2)}); the {n_rounds} round medians of one workload in one process range at least as "
            f"widely as rebuilt workloads' in {wide} of its {len(keys)} cases (medians over the cases "
            f"{_pct(st.median(same), 2, False)} and {_pct(st.median(rebuilt), 2, False)})"
            + (", so where the tensors land is not the cause" if 2 * wide >= len(keys) else "")
            + f", and pooling the {n_rounds} rounds narrows the processes' range below one round's for "
            f"{_pooling_helps(d)}. "
        )
    out = [
        "",
        "**Spread.** Timed in one stretch, a case's median still lands apart between processes: the GPU's speed "
        "wanders over seconds, and the medians of one stretch inherit its level. "
        + placement
        + "The profiler now takes each case's samples in rounds over the whole suite. Per process, the median over "
        "cases of (its median / the five-process median − 1) is "
        + ", ".join(f"run {i} {_pct(o, 2)}" for i, o, _ in offsets)
        + " for ours, and "
        + ", ".join(f"{_pct(x, 2)}" for _, _, x in offsets)
        + " for do_bench in the same processes"
        + (
            f": no process-wide offset beyond the pooled median's ±{ci:.1%} is left."
            if ci is not None and largest <= ci
            else f": the largest is {_pct(largest, 2, False)}."
        ),
    ]
    out.append(
        "More rounds, one process against several, the SM clock over each kernel and where a round's tensors land "
        "were measured against this spread in leases of their own: "
        + _finding("timing-in-rounds", "timing in rounds")
        + ", "
        + _finding("the-spread-between-processes", "the spread between processes")
        + ", "
        + _finding("clock-handling", "clock handling")
        + " and "
        + _finding("where-the-tensors-of-a-round-land", "where the tensors of a round land")
        + "."
    )
    out += _outlier_words(d)
    out += _placement_rows(d)
    out.append("")
    return out


def _lead(d: Data) -> bool:
    """Whether the data folder's provenance says its runs had the lead hold."""
    return "lead hold" in str(d.provenance.get("leases", ""))


def _slow_samples(d: Data) -> tuple[int, int, int, int, list[int]]:
    """(cases marked suspect for a burst, timed cases, slow samples that opened a timing batch of 10, samples over
    twice their case's median, the decode cases' slow samples per case and run), over every case of every run."""
    slow = first = suspect = timed = 0
    decode: list[int] = []
    for docs in d.docs.values():
        for doc in docs:
            for c in doc.cases:
                if c.latency_us is None or not c.latency_us.samples:
                    continue
                timed += 1
                suspect += any("burst" in r for r in c.suspect or [])
                med = c.latency_us.median
                at = [i for i, x in enumerate(c.latency_us.samples) if x > 2 * med]
                slow += len(at)
                first += sum(1 for i in at if i % 10 == 0)
                if c.id.startswith("decode"):
                    decode.append(len(at))
    return suspect, timed, first, slow, decode


def _outlier_words(d: Data) -> list[str]:
    """Slow samples by their place in the timing batches, with the lead hold (the figures before it: findings)."""
    suspect, timed, first, slow, decode = _slow_samples(d)
    words = (
        "**Slow samples at batch starts.** After each batch the profiler synchronises, so the device is idle when "
        "the next batch starts; with only the one-iteration hold ahead of it, the host's first iteration took longer "
        "to queue than the hold ran, and the step started late behind its start event. "
    )
    words += (
        "The figures before the change are in "
        + _finding("a-lead-hold-before-each-batch", "a lead hold before each batch")
        + ". "
    )
    words += (
        "The profiler now queues a lead hold (500 µs plus three iterations' host time) before each batch and pauses "
        f"Python's garbage collector while it queues. In this report's runs{', with it,' if _lead(d) else ''} {suspect} of {timed} timed cases "
        f"were marked suspect, and {first} of {slow} samples over twice their case's median were the first of a batch"
    )
    if decode:
        words += (
            f"; the decode cases had {_span([float(x) for x in decode], lambda x: f'{x:.0f}', '–')} such samples per "
            f"case and run (median {st.median(decode):.0f})"
        )
    words += "."
    after = d.dir / "outliers-after-lead.txt"
    if after.exists():
        text = after.read_text()
        counts = [int(m[1]) for m in re.finditer(r"^decode\S* \d+ \S+ outliers (\d+)", text, re.M)]
        processes = len(re.findall(r"^wall ", text, re.M))
        if counts:
            words += (
                f" In an earlier lease after the change, {processes} processes ("
                + _finding("a-lead-hold-before-each-batch", "a lead hold before each batch")
                + ": "
                f"`{_rel(after)}`) counted {_span([float(x) for x in counts], lambda x: f'{x:.0f}', '–')} per decode "
                "case and run."
            )
    return ["", words]


def _custom_and_decode(d: Data) -> list[str]:
    out = [
        "## 5. Custom kernels and decode",
        "",
        "| case | kernel | phase | µs | FLOPs | bytes | work from | bound | ncu |",
        "|---|---|---|---:|---:|---:|---|---|---|",
    ]
    for r in d.rows:
        if r.heavy and (r.case.target.startswith("bench.") or r.case.name.startswith("decode")):
            k = r.kernel
            out.append(
                f"| {r.suite}/{r.case.id} | `{k.key[:40]}` | {k.phase} | {fmt_us(k.duration_us.median)} | "
                f"{k.flops or 0:.3g} | {k.bytes or 0:.3g} | {k.work_source or '—'} | {k.bound or '—'} | {r.ncu_bound or '—'} |"
            )
    undeclared = next((r for r in d.rows if r.case.id == "triton-undeclared" and r.heavy), None)
    out += [
        "",
        "The Triton kernel declares its FLOPs (4·B·H·pairs·D, halved by its causal mask) and bytes through "
        "`launch_metadata`; the profiler reads them at each launch of the trace pass (`work from: launch_metadata`). "
        + (
            f"The same kernel without the declaration holds {undeclared.share:.0%} of its case and gets the case's "
            f"attention formula (`{undeclared.kernel.work_source or '—'}`). "
            if undeclared is not None
            else ""
        )
        + "Decode runs as a split-KV kernel and a combine step (flash) or a kernel and a reduction (cuDNN), "
        "all attributed to `fused_attention`.",
        "",
    ]
    return out


def _reconcile_section(d: Data) -> list[str]:
    out = [
        "## 6. The kernel table against the case",
        "",
        "| case | kernels µs | case µs | gap | reason |",
        "|---|---:|---:|---:|---|",
    ]
    for s in SUITES:
        for case in d.cases(s):
            rec = case.reconciliation
            if rec is None:
                continue
            out.append(
                f"| {s}/{case.id} | {fmt_us(rec.kernel_sum_us)} | {fmt_us(rec.latency_us)} | {fmt_us(rec.gap_us)} | {rec.reason} |"
            )
    out.append("")
    return out


def _kernel_tables(d: Data) -> list[str]:
    out = [
        "## 7. Every kernel ≥ 5% of a case against ncu",
        "",
        "| case | kernel | share | ours µs | ncu µs | Δ | ncu cache none µs | ours | ncu | SM / tensor / memory / DRAM % | work from |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---|---|",
    ]
    for r in d.rows:
        if not r.heavy:
            continue
        c = r.counters or {}
        out.append(
            f"| {r.suite}/{r.case.id} | `{r.kernel.key[:40]}` | {r.share:.0%} | {fmt_us(r.ours_us)} | {fmt_us(r.ncu_us)} | "
            f"{_pct(r.delta)} | {fmt_us(r.ncu_none_us)} | {r.kernel.bound or '—'} | {r.ncu_bound or '—'} | "
            + (f"{c[SM]:.0f} / {c.get(TENSOR, 0):.0f} / {c[MEM]:.0f} / {c.get(DRAM, 0):.0f}" if c else "—")
            + f" | {r.kernel.work_source or '—'} |"
        )
    out.append("")
    return out


def _plot(d: Data, cases: list[CaseRow], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5.2))
    colors = {"compute": "#d62728", "memory": "#1f77b4", "latency": "#7f7f7f"}
    for cls, color in colors.items():
        rows = [r for r in d.rows if r.heavy and r.ncu_us and r.ncu_bound == cls]
        a.scatter(
            [r.ncu_us for r in rows], [100 * (r.delta or 0) for r in rows], s=18, color=color, label=f"ncu: {cls}"
        )
    a.axhspan(-3, 3, color="#2ca02c", alpha=0.12, label="±3%")
    a.set_xscale("log")
    a.set_xlabel("ncu gpu__time_duration per launch (µs)")
    a.set_ylabel("ours / ncu − 1 (%)")
    a.set_title("Kernels ≥ 5% of a case: our trace against Nsight Compute")
    a.legend(fontsize=8)
    order = sorted(cases, key=lambda c: c.ours_med)
    x = range(len(order))
    b.plot(x, [100 * _spread(c.ours) for c in order], "o-", ms=3, label="ours")
    b.plot(x, [100 * _spread(c.clean) for c in order], "s-", ms=3, label="do_bench, clean flush")
    b.plot(x, [100 * _spread(c.zero) for c in order], "^-", ms=3, alpha=0.6, label="do_bench, zero_() flush")
    b.axhline(0.5, color="k", lw=0.8, ls="--")
    b.set_yscale("log")
    b.set_xlabel(
        f"cases, by median latency ({fmt_duration_us(order[0].ours_med)} … {fmt_duration_us(order[-1].ours_med)})"
        if order
        else "cases, by median latency"
    )
    b.set_ylabel(f"spread of {RUNS} processes' medians (%)")
    b.set_title("Spread across processes")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--again", type=Path, help="a second five-process run of the same lease (runs only), for the spread"
    )
    args = parser.parse_args()
    data = Data(args.data.resolve())
    again = Runs(args.again.resolve()) if args.again else None
    text = render(data, args.out.resolve(), args.out.with_name("h200-truth.png"), again)
    cases = case_rows(data)
    # the hold table and the spread words belong in section 4, after its case table
    marker = "|---|---:|---:|---:|---:|\n"
    head, _, tail = text.partition(
        "| case | flush, hold, step (before) | hold, flush, step (now) | flush, step (do_bench's order) | do_bench clean |\n"
        + marker
    )
    text = (
        head
        + "| case | flush, hold, step (before) | hold, flush, step (now) | flush, step (do_bench's order) | do_bench clean |\n"
        + marker
        + "\n".join(_hold_rows(data))
        + "\n"
        + "\n".join(_spread_words(data, cases))
        + "\n"
        + tail
    )
    args.out.write_text(text)
    print(f"wrote {args.out} and {args.out.with_name('h200-truth.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
