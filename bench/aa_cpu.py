"""A/A on a loaded CPU host: unchanged code, profiled three times in separate processes, must never fail.

    .venv/bin/python -m bench.aa_cpu --triples 20
    .venv/bin/python -m bench.aa_cpu --quick        # one triple of three cases, in a temporary folder: a smoke run
    .venv/bin/python -m bench.aa_cpu --source /tmp/aa-src --source-commit f58fb1e   # another tree's profiler

Each triple is two baseline runs and one candidate run of ``--suite`` (``examples/cpu.toml``; ``--case``, repeatable,
only those cases), each a separate ``python -m attnprof.core profile SUITE --device cpu --out ...`` process, then
``python -m attnprof.core compare base1.json base2.json cand.json --json``; all run with ``--source`` as the working
directory, so its ``attnprof.core`` is the one measured. Meanwhile one core is kept busy by a busy-loop process that
this script starts and stops: on a 2-core host the profiler's two threads then share a core with it, the way a CI
runner shares its cores with other jobs. ``--busy all`` keeps it running from the first triple to the last (every
run shares the host alike); ``--busy candidate`` runs it only while each candidate is profiled, a transient
disturbance that hits one side of the comparison; ``--busy none`` is a quiet control.

Per triple it keeps a summary (not the documents): the exit codes, the verdict and the notes of the comparison, the
findings that failed or warned, each run's ``suspect`` and each case's sample count, median and ``suspect`` reasons;
and the verdict the same comparison would have reached with every ``suspect`` mark removed (computed in this
process with ``attnprof.core.analysis.compare`` from ``--source``), which says what the marks were worth. Writes
``DATA/triples.jsonl`` as it goes (a line per triple, also printed), ``DATA/summary.json`` and ``--report``;
``--report-only`` also reads ``triples.jsonl.gz``, as the committed data keep it.
Target: 0 fails (exit code 1 of ``compare``) out of ``--triples``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import quick

ROOT = Path(__file__).resolve().parents[1]
BUSY_LOOP = "while True:\n    pass\n"
BUSY_WORDS = {
    "all": "one core kept busy by a busy-loop process for the whole run",
    "candidate": "one core kept busy by a busy-loop process while each candidate was profiled, and only then",
    "none": "no busy loop (a quiet control)",
}
# The quick mode's cases: three of the CPU suite's, quick to time.
QUICK_CASES = ("naive[pass=fwd]", "cross", "block")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _versions(python: str, source: Path) -> dict[str, str]:
    code = (
        "import platform, torch, numpy, scipy, attnprof.core; "
        "print(platform.python_version(), torch.__version__, numpy.__version__, scipy.__version__, "
        "attnprof.core.__version__)"
    )
    out = subprocess.run([python, "-c", code], cwd=source, capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(("python", "torch", "numpy", "scipy", "attnprof"), out, strict=True))


def _profile(python: str, source: Path, suite: Path, out: Path, cases: Sequence[str] = ()) -> tuple[int, float]:
    started = time.perf_counter()
    cmd = [python, "-m", "attnprof.core", "profile", str(suite), "--device", "cpu", "--out", str(out), "--quiet"]
    cmd += [arg for case in cases for arg in ("--case", case)]
    done = subprocess.run(cmd, cwd=source, capture_output=True, text=True)
    return done.returncode, time.perf_counter() - started


def _run_summary(path: Path, rc: int, wall_s: float) -> dict[str, Any]:
    if not path.exists():
        return {"rc": rc, "wall_s": round(wall_s, 1), "document": None}
    doc = json.loads(path.read_text())
    cases = []
    for c in doc["cases"]:
        lat = c.get("latency_us") or {}
        cases.append(
            {
                "id": c["id"],
                "status": c["status"],
                "samples": len(lat.get("samples") or []),
                "median_us": round(lat["median"], 1) if lat.get("median") is not None else None,
                "stopped_by": lat.get("stopped_by"),
                "suspect": c.get("suspect"),
            }
        )
    run = doc["run"]
    return {"rc": rc, "wall_s": round(wall_s, 1), "id": run["id"], "suspect": run["suspect"], "cases": cases}


def _unmarked_verdict(paths: list[Path]) -> str | None:
    """The verdict with every suspect mark removed, from the source tree's attnprof.core (imported lazily)."""
    from attnprof.core.analysis import compare
    from attnprof.core.documents import load_result

    docs = [load_result(p) for p in paths]
    for d in docs:
        d.run.suspect = None
        for c in d.cases:
            c.suspect = None
    return compare(docs[:-1], docs[-1]).verdict


class BusyCore:
    """One process spinning on a core, started and stopped by this script (by its own handle, nothing else)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.process is None:
            self.process = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait()
            self.process = None


def run_triple(
    index: int,
    python: str,
    source: Path,
    suite: Path,
    scratch: Path,
    busy: BusyCore,
    mode: str,
    cases: Sequence[str] = (),
) -> dict[str, Any]:
    names = ("base1", "base2", "cand")
    paths = [scratch / f"t{index:02d}-{n}.json" for n in names]
    runs: dict[str, Any] = {}
    load_before = os.getloadavg()[0]
    for name, path in zip(names, paths, strict=True):
        if mode == "candidate" and name == "cand":
            busy.start()
        try:
            rc, wall_s = _profile(python, source, suite, path, cases)
        finally:
            if mode == "candidate":
                busy.stop()
        runs[name] = _run_summary(path, rc, wall_s)
    cmd = [python, "-m", "attnprof.core", "compare", *map(str, paths), "--json"]
    done = subprocess.run(cmd, cwd=source, capture_output=True, text=True)
    comparison: dict[str, Any] = {"rc": done.returncode}
    if done.returncode in (0, 1) and done.stdout.strip():
        doc = json.loads(done.stdout)
        comparison.update(
            verdict=doc["verdict"],
            notes=doc["notes"],
            findings=[
                {k: f.get(k) for k in ("case", "metric", "status", "verdict", "change", "q", "detail")}
                for f in doc["findings"]
                if f["verdict"] != "pass"
            ],
        )
        comparison["verdict_without_marks"] = _unmarked_verdict(paths)
    else:
        comparison["stderr"] = done.stderr[-2000:]
    for p in paths:
        p.unlink(missing_ok=True)
    return {
        "triple": index,
        "load1_before": round(load_before, 2),
        "load1_after": round(os.getloadavg()[0], 2),
        "runs": runs,
        "compare": comparison,
    }


def _reason_kind(reason: str) -> str:
    if reason.startswith("a burst of"):
        return "burst"
    if "waited for a core" in reason:
        return "host busy (run-queue wait)"
    return "other"


def write_report(summary: dict[str, Any], path: Path) -> None:
    triples = summary["triples"]
    rcs = Counter(t["compare"]["rc"] for t in triples)
    verdicts = Counter(t["compare"].get("verdict") for t in triples)
    unmarked = Counter(t["compare"].get("verdict_without_marks") for t in triples)
    timed = suspect = 0
    kinds: Counter[str] = Counter()
    combos: Counter[str] = Counter()
    runs_suspect = 0
    for t in triples:
        for run in t["runs"].values():
            if run.get("suspect"):
                runs_suspect += 1
            for c in run.get("cases", []):
                if c["status"] != "ok":
                    continue
                timed += 1
                if c["suspect"]:
                    suspect += 1
                    found = sorted({_reason_kind(r) for r in c["suspect"]})
                    kinds.update(found)
                    combos[" + ".join(found)] += 1
    fails = rcs.get(1, 0)
    cases = summary.get("cases") or []
    only = " (cases " + ", ".join(f"`{c}`" for c in cases) + ")" if cases else ""
    lines = [
        "# A/A on a loaded CPU host",
        "",
        f"Date: {summary['date']}. Machine: {summary['machine']['cpu']} ({summary['machine']['cores']} cores), "
        f"{summary['machine']['os']}; {BUSY_WORDS[summary['busy']]}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in summary["versions"].items())
        + f". Profiler source: {summary['source_commit']}.",
        "",
        "Command:",
        "",
        "```",
        summary["command"],
        "```",
        "",
        f"Each triple: two baseline runs and one candidate run of `{summary['suite']}`{only} (unchanged code), each "
        "`python -m attnprof.core profile ... --device cpu` in a process of its own, then "
        "`python -m attnprof.core compare base1.json base2.json cand.json`. The raw summaries (exit codes, "
        "verdicts, notes, non-passing findings, each case's sample count, median and suspect reasons) are in "
        f"`{summary['data_dir']}/`.",
        "",
        "## Result",
        "",
        f"- **Fails: {fails} of {len(triples)}** (target 0). `compare` exit codes: "
        + ", ".join(f"{k}: {v}" for k, v in sorted(rcs.items()))
        + ". Verdicts: "
        + ", ".join(f"{k}: {v}" for k, v in sorted(verdicts.items(), key=str))
        + ".",
        "- With every suspect mark removed, the same comparisons would have been: "
        + ", ".join(f"{k}: {v}" for k, v in sorted(unmarked.items(), key=str))
        + ".",
        f"- Cases marked suspect: {suspect} of {timed} timed cases ({suspect / timed:.0%}); runs marked suspect: "
        f"{runs_suspect} of {3 * len(triples)}."
        if timed
        else "- No case was timed.",
        "- Why (a case can have both reasons): "
        + (", ".join(f"{k}: {v}" for k, v in kinds.most_common()) or "none")
        + "; as combinations: "
        + (", ".join(f"{k}: {v}" for k, v in combos.most_common()) or "none")
        + ".",
        "",
        "## Per triple",
        "",
        "| triple | load 1 min | profile rc | base1 / base2 / cand suspect cases | compare rc | verdict | "
        "without marks | non-passing findings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in triples:
        runs = t["runs"]
        marked = " / ".join(
            f"{sum(1 for c in runs[n].get('cases', []) if c['suspect'])}"
            f"/{sum(1 for c in runs[n].get('cases', []) if c['status'] == 'ok')}"
            for n in ("base1", "base2", "cand")
        )
        cmp_ = t["compare"]
        findings = Counter(f"{f['verdict']} {f['metric']}" for f in cmp_.get("findings", []))
        lines.append(
            f"| {t['triple']} | {t['load1_before']} → {t['load1_after']} | "
            f"{','.join(str(runs[n]['rc']) for n in ('base1', 'base2', 'cand'))} | {marked} | {cmp_['rc']} | "
            f"{cmp_.get('verdict', '-')} | {cmp_.get('verdict_without_marks', '-')} | "
            f"{', '.join(f'{v} {k}' for k, v in sorted(findings.items())) or '-'} |"
        )
    lines += ["", summary.get("notes", "").strip(), ""]
    path.write_text("\n".join(lines).rstrip() + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--triples", type=int, default=20)
    parser.add_argument("--suite", type=Path, default=Path("examples/cpu.toml"), help="relative to --source")
    parser.add_argument("--case", action="append", default=[], help="only cases whose id matches (glob; repeatable)")
    parser.add_argument("--source", type=Path, default=ROOT, help="the tree whose attnprof.core runs")
    parser.add_argument("--source-commit", default=None, help="what --source is (default: its git HEAD)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--data", type=Path, help="default: bench/reports/data/aa-cpu-DATE")
    parser.add_argument("--report", type=Path, help="default: bench/reports/aa-cpu.md")
    parser.add_argument("--busy", choices=sorted(BUSY_WORDS), default="all", help="when a core is kept busy")
    parser.add_argument("--report-only", action="store_true", help="write --report from what --data holds; run nothing")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"one triple of {', '.join(QUICK_CASES)} (unless --case); --data and --report default to a temporary "
        "folder",
    )
    args = parser.parse_args()
    if args.quick:
        args.triples, args.case = 1, args.case or list(QUICK_CASES)
        args.data, args.report = quick.place(parser, "aa-cpu", (args.data, "data"), (args.report, "aa-cpu.md"))
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    args.data = args.data or ROOT / "bench" / "reports" / "data" / f"aa-cpu-{date}"
    args.report = args.report or ROOT / "bench" / "reports" / "aa-cpu.md"
    if args.report_only:
        kept = json.loads((args.data / "summary.json").read_text())
        log = args.data / "triples.jsonl"  # as a run writes it; the committed data keep it gzip'd
        text = log.read_text() if log.exists() else gzip.decompress(log.with_suffix(".jsonl.gz").read_bytes()).decode()
        kept["triples"] = [json.loads(line) for line in text.splitlines() if line]
        write_report(kept, args.report)
        print(f"wrote {args.report}")
        return

    source = args.source.resolve()
    # On purpose: the in-process unmarked verdict must come from --source's attnprof.core, the tree being measured
    # (imported lazily, after this), not from the one this script was started from.
    sys.path.insert(0, str(source))
    commit = args.source_commit
    if commit is None:
        git = ["git", "-C", str(source), "rev-parse", "--short", "HEAD"]
        done = subprocess.run(git, capture_output=True, text=True)
        commit = done.stdout.strip() or "unknown"
    args.data.mkdir(parents=True, exist_ok=True)
    log = args.data / "triples.jsonl"
    log.write_text("")
    summary: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join([".venv/bin/python", *sys.argv]),
        "suite": str(args.suite),
        "cases": args.case,
        "source_commit": commit,
        "data_dir": os.path.relpath(args.data, ROOT),
        "busy": args.busy,
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "os": platform.platform()},
        "versions": _versions(args.python, source),
        "triples": [],
    }
    busy = BusyCore()
    if args.busy == "all":
        busy.start()
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="aa-cpu-") as scratch:
            for i in range(1, args.triples + 1):
                t = run_triple(i, args.python, source, args.suite, Path(scratch), busy, args.busy, args.case)
                summary["triples"].append(t)
                with log.open("a") as fh:
                    fh.write(json.dumps(t) + "\n")
                marked = sum(1 for r in t["runs"].values() for c in r.get("cases", []) if c["suspect"])
                cmp_ = t["compare"]
                print(
                    f"triple {i}/{args.triples}: compare rc {cmp_['rc']} {cmp_.get('verdict', '?')} "
                    f"(without marks: {cmp_.get('verdict_without_marks', '?')}); {marked} suspect case(s) in the "
                    f"3 runs; load {t['load1_after']}; {time.perf_counter() - started:.0f} s so far",
                    flush=True,
                )
    finally:
        busy.stop()
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    # The triples themselves are in triples.jsonl; summary.json is the run's description and its totals.
    meta = {k: v for k, v in summary.items() if k != "triples"}
    meta["triples"] = len(summary["triples"])
    meta["compare_rc"] = dict(Counter(str(t["compare"]["rc"]) for t in summary["triples"]))
    (args.data / "summary.json").write_text(json.dumps(meta, indent=1) + "\n")
    write_report(summary, args.report)
    print(f"wrote {args.report} and {args.data}/")


if __name__ == "__main__":
    main()
