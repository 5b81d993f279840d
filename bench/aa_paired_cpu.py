"""A/A of paired runs on a loaded CPU host: the same code as base and head must never fail.

    .venv/bin/python -m bench.aa_paired_cpu --trials 20 [--busy all|none]
    .venv/bin/python -m bench.aa_paired_cpu --quick     # one trial of one case, in a temporary folder: a smoke run

Each trial is one ``python -m attnprof.core ab SUITE --base A --head B --device cpu`` with two empty trees (the
CPU suite's targets are built in, so both sides run the same code from two processes), as a paired job runs on a
CPU worker; ``--case`` (repeatable) passes on to it, to run only those cases. Meanwhile, with ``--busy all``, one
core is kept busy by a busy-loop process (``bench/aa_cpu.py``'s), the way a CI runner shares its cores. Per trial
it keeps the exit code, the verdict, each case's stopping reason, pairs and change, and the run's suspect marks;
writes ``DATA/trials.jsonl`` as it goes and ``--report``.
Target: 0 fails out of ``--trials`` with the CPU's paired minimum effect (``thresholds.paired``, 10%).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import quick
from bench.aa_cpu import BUSY_WORDS, BusyCore, _cpu_model

ROOT = Path(__file__).resolve().parents[1]
# The quick mode's case: the CPU suite's quickest to settle (two sides and the busy loop share two cores: under that
# load a case often spends its whole budget, 16 pairs or more).
QUICK_CASES = ("naive[pass=fwd]",)


def unmarked_verdict(out: Path) -> str:
    """The verdict the same paired comparison reaches with every suspect mark removed: what the marks were worth."""
    from attnprof.core.analysis.paired import compare_paired
    from attnprof.core.documents import load_result
    from attnprof.core.documents.paired import PairedDocument

    docs = [load_result(out / "base.json"), load_result(out / "result.json")]
    for doc in docs:
        doc.run.suspect = None
        for case in doc.cases:
            case.suspect = None
    paired = PairedDocument.model_validate_json((out / "paired.json").read_text())
    return compare_paired(docs[0], docs[1], paired).verdict


def trial(index: int, suite: Path, scratch: Path, cases: list[str]) -> dict[str, Any]:
    base, head, out = scratch / "base", scratch / "head", scratch / f"out{index}"
    base.mkdir(exist_ok=True)
    head.mkdir(exist_ok=True)
    started = time.perf_counter()
    argv = [sys.executable, "-m", "attnprof.core", "ab", str(suite), "--base", str(base), "--head", str(head)]
    argv += ["--out", str(out), "--device", "cpu", "--cache-dir", str(scratch / "peaks"), "--quiet"]
    argv += [arg for case in cases for arg in ("--case", case)]
    # Both sides import this tree's attnprof, as the coordinator does (from its working directory): the two empty
    # trees hold none, and an installed attnprof may be another tree's (a venv shared between worktrees).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - started
    row: dict[str, Any] = {"trial": index, "rc": done.returncode, "wall_s": round(wall, 1)}
    if not (out / "comparison.json").exists():
        row["error"] = done.stderr[-2000:]
        return row
    comparison = json.loads((out / "comparison.json").read_text())
    paired = json.loads((out / "paired.json").read_text())
    row["verdict"] = comparison["verdict"]
    row["suspect"] = comparison["suspect"]
    row["cases"] = [
        {"case": c["case"], "stopped_by": c["stopped_by"], "pairs": len(c["pairs"]), "detail": c["detail"]}
        for c in paired["cases"]
    ]
    row["unmarked"] = unmarked_verdict(out)
    row["findings"] = [
        {
            "case": f["case"],
            "metric": f["metric"],
            "status": f["status"],
            "verdict": f["verdict"],
            "change": f["change"],
        }
        for f in comparison["findings"]
        if f["verdict"] != "pass" or f["status"] not in ("unchanged", "inconclusive")
    ]
    return row


def write_report(
    rows: list[dict[str, Any]], busy: str, suite: Path, path: Path, command: str, cases: list[str]
) -> None:
    fails = sum(r.get("rc") == 1 for r in rows)
    only = " (cases " + ", ".join(f"`{c}`" for c in cases) + ")" if cases else ""
    verdicts = Counter(r.get("verdict", "error") for r in rows)
    stops = Counter(c["stopped_by"] for r in rows for c in r.get("cases", []))
    lines = [
        "# A/A of paired runs on a loaded CPU host",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d}, {_cpu_model()}, 2 cores; {BUSY_WORDS[busy]}. Suite: "
        f"`{suite.relative_to(ROOT)}`{only}; base and head are two empty trees, so both sides run the same built-in "
        "targets.",
        "",
        f"- **Fails: {fails} of {len(rows)}** (target 0). Verdicts: "
        + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items()))
        + ".",
        "- Without the suspect marks (the same comparison, every mark removed): "
        + ", ".join(f"{v} {n}" for v, n in sorted(Counter(r.get("unmarked", "error") for r in rows).items()))
        + ".",
        "- How cases stopped (all trials): " + ", ".join(f"{k} {n}" for k, n in stops.most_common()) + ".",
        f"- Wall time per paired run: {min(r['wall_s'] for r in rows):.0f}–{max(r['wall_s'] for r in rows):.0f} s.",
        "",
        "| trial | exit | verdict | without suspect marks | suspect | findings past pass or unchanged |",
        "|---:|---:|---|---|---|---|",
    ]
    for r in rows:
        found = "; ".join(
            f"{f['case']} {f['metric']} {f['status']} {f['verdict']} {(f['change'] or 0) * 100:+.1f}%"
            for f in r.get("findings", [])
        )
        suspect = "yes" if r.get("suspect") else "no"
        lines.append(
            f"| {r['trial']} | {r['rc']} | {r.get('verdict', 'error')} | {r.get('unmarked', '-')} | {suspect} | "
            f"{found or '-'} |"
        )
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--suite", type=Path, default=ROOT / "examples" / "cpu.toml")
    parser.add_argument("--busy", choices=("all", "none"), default="all")
    parser.add_argument("--case", action="append", default=[], help="only cases whose id matches (glob; repeatable)")
    parser.add_argument("--data", type=Path, help="default: bench/reports/data/aa-paired-cpu")
    parser.add_argument("--report", type=Path, help="default: bench/reports/aa-paired-cpu.md")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"one trial of {', '.join(QUICK_CASES)} (unless --case); --data and --report default to a temporary "
        "folder",
    )
    args = parser.parse_args()
    if args.quick:
        args.trials, args.case = 1, args.case or list(QUICK_CASES)
        args.data, args.report = quick.place(
            parser, "aa-paired-cpu", (args.data, "data"), (args.report, "aa-paired-cpu.md")
        )
    args.data = args.data or ROOT / "bench" / "reports" / "data" / "aa-paired-cpu"
    args.report = args.report or ROOT / "bench" / "reports" / "aa-paired-cpu.md"
    args.data.mkdir(parents=True, exist_ok=True)
    command = "python -m bench.aa_paired_cpu " + " ".join(sys.argv[1:])
    busy = BusyCore()
    if args.busy == "all":
        busy.start()
    rows = []
    try:
        with (
            tempfile.TemporaryDirectory(prefix="attnprof-aa-paired-") as tmp,
            (args.data / "trials.jsonl").open("w") as log,
        ):
            for i in range(1, args.trials + 1):
                row = trial(i, args.suite.resolve(), Path(tmp), args.case)
                rows.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                print(json.dumps({k: row.get(k) for k in ("trial", "rc", "verdict", "wall_s")}), flush=True)
    finally:
        busy.stop()
    write_report(rows, args.busy, args.suite.resolve(), args.report, command, args.case)


if __name__ == "__main__":
    main()
