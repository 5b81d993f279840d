"""Bisection on the CPU through real processes: how many paired jobs and how much time finding a culprit takes.

    python -m bench.bisect_cpu run --out DIR [--culprits 3,8,11,16]   # here: runs.json in DIR (about 90 s a culprit)
    python -m bench.bisect_cpu report DIR --out bench/reports/bisection-cpu.md   # the page and its plot

The stack is the end-to-end test's (``tests/server/github/bisectstack.py``): ``attnprof serve``, the analysis worker
with beat and a CPU profile worker on Postgres and Redis, with the GitHub stand-in serving a real git history of
sixteen commits, one of which makes the project's attention three times slower (``tests/core/test_bisect_local.py``'s
history). For each culprit the project's suite is profiled once at the good commit (the job a bisection takes its
suite from), then a bisection is asked for through the API with the step's size, and followed until it ends. Each
probe's paired job is read back: its wait in the queue and its run on the worker (the device time it held).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = "acme/history-{culprit}"


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def run(out: Path, culprits: list[int]) -> None:
    from tests.core.test_bisect_local import SUITE, make_history
    from tests.profiling_support import tar_gz
    from tests.server.github.bisectstack import TESTBED, bisect_stack
    from tests.server.github.fakegithub import FakeGitHub
    from tests.server.github.test_bisection_e2e import _archive, _files
    from tests.worker.stack import wait_for

    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch, FakeGitHub() as fake:
        histories = {}
        for culprit in culprits:
            repo_dir = Path(scratch) / f"repo-{culprit}"
            shas = make_history(repo_dir, culprit=culprit)
            name = REPO.format(culprit=culprit)
            for i, sha in enumerate(shas):
                fake.add_commit(name, sha, (shas[i - 1],) if i else (), f"change {i}", _archive(repo_dir, sha))
            histories[culprit] = (name, shas, repo_dir)
        with bisect_stack(Path(scratch) / "stack", fake, *(h[0] for h in histories.values())) as stack:
            for culprit, (name, shas, repo_dir) in histories.items():
                print(f"culprit {culprit}: profiling the good commit", flush=True)
                with stack.http() as http:
                    r = http.post(
                        f"/api/v1/projects/{stack.project}/jobs",
                        data={"testbed": TESTBED, "branch": "main", "commit": shas[0], "repo": name},
                        files={
                            "spec": ("perf.toml", SUITE.encode()),
                            "bundle": ("src.tar.gz", tar_gz(_files(_archive(repo_dir, shas[0])))),
                        },
                    )
                r.raise_for_status()
                seed = stack.wait_status(r.json()["id"], ("done", "failed", "timed_out"), 400)
                url = f"/api/v1/projects/{stack.project}/bisections"
                step = {"effect": 2.0, "low": 1.0, "high": 3.0}
                started = time.monotonic()
                with stack.http() as http:
                    r = http.post(
                        url, json={"testbed": TESTBED, "good": shas[0], "bad": shas[-1], "cases": ["step"], **step}
                    )
                r.raise_for_status()
                bisection_id = r.json()["id"]

                def ended(where: str = f"{url}/{bisection_id}") -> dict[str, Any] | None:
                    with stack.http() as http:
                        found: dict[str, Any] = http.get(where).json()
                    return found if found["status"] not in ("pending", "running") else None

                done = wait_for("the bisection to end", ended, 1200, every_s=1, logs=stack.logs)
                wall = time.monotonic() - started
                jobs = []
                with stack.http() as http:
                    for p in done["probes"]:
                        job = http.get(f"/api/v1/jobs/{p['job_id']}").json()
                        jobs.append(
                            {
                                "candidate": shas.index(p["candidate"]),
                                "good": shas.index(p["good"]),
                                "outcome": p["outcome"],
                                "effect": p["effect"],
                                "low": p["low"],
                                "high": p["high"],
                                "waited_s": _seconds(job["created_at"], job["started_at"]),
                                "ran_s": _seconds(job["started_at"], job["finished_at"]),
                            }
                        )
                record = {
                    "culprit": culprit,
                    "commits": len(shas) - 1,
                    "status": done["status"],
                    "found": shas.index(done["culprit"]) if done["culprit"] else None,
                    "budget": done["budget"],
                    "probes": jobs,
                    "wall_s": round(wall, 1),
                    "seed_ran_s": _seconds(seed.get("started_at"), seed.get("finished_at")),
                }
                runs.append(record)
                print(
                    f"culprit {culprit}: {done['status']} {record['found']} in {len(jobs)} probe(s), {wall:.0f} s",
                    flush=True,
                )
                (out / "runs.json").write_text(json.dumps(_meta(runs), indent=1))


def _meta(runs: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo"], capture_output=True, text=True).stdout
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "command": "python -m bench.bisect_cpu run --out DIR",
        "host": {
            "cpu": cpu.split(":", 1)[-1].strip(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "runs": runs,
    }


def plot(runs: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(runs), figsize=(3.2 * len(runs), 3.4), sharey=True, squeeze=False)
    colour = {"bad": "#D55E00", "good": "#009E73", "skip": "#999999"}
    for ax, r in zip(axes[0], runs, strict=True):
        for k, p in enumerate(r["probes"], start=1):
            ax.errorbar(
                k,
                100 * p["effect"],
                yerr=[[100 * (p["effect"] - p["low"])], [100 * (p["high"] - p["effect"])]],
                fmt="o",
                color=colour.get(p["outcome"], "#0072B2"),
            )
            ax.annotate(
                f"c{p['candidate']}", (k, 100 * p["effect"]), textcoords="offset points", xytext=(4, 4), fontsize=7
            )
        ax.axhspan(100, 300, color="#D55E00", alpha=0.08)
        ax.set_title(f"culprit c{r['culprit']}: {r['status']} c{r['found']}", fontsize=9)
        ax.set_xlabel("probe (paired job)")
        ax.set_xticks(range(1, len(r["probes"]) + 1))
    axes[0][0].set_ylabel("slowdown against the last good (%)")
    fig.suptitle("Each probe's effect with its 95% interval (orange: holds the step; green: before it)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def report(data: Path, out: Path) -> None:
    meta = json.loads((data / "runs.json").read_text())
    runs = meta["runs"]
    plotted = plot(runs, out.with_suffix(".png"))
    cores = f" ({meta['host']['cores']} cores)" if meta["host"].get("cores") else ""
    lines = [
        "# Bisection on the CPU, through real workers",
        "",
        "A history of 16 commits in which one commit makes the project's attention three times slower "
        "(`tests/core/test_bisect_local.py`'s history), served by the GitHub stand-in; a bisection asked for "
        "through the API with the step's size (+200%, interval +100% to +300%) on a CPU testbed, run by "
        "`attnprof serve`, the analysis worker with beat and one CPU profile worker "
        "(`tests/server/github/bisectstack.py`). Each probe is a paired job at background priority.",
        "",
        f"Measured {meta['date']} on {meta['host']['cpu']}{cores}, Python {meta['host']['python']}, "
        f"torch {meta['host']['torch']}, with `{meta['command']}`; this page: "
        f"`python -m bench.bisect_cpu report {data} --out {out}`.",
        "",
        "| culprit | found | status | paired jobs | budget ⌈log₂ 16⌉ + 1 | each job ran (median s) "
        "| job run time (s) | wall, request to answer (s) |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        ran = [p["ran_s"] for p in r["probes"] if p["ran_s"] is not None]
        lines.append(
            f"| c{r['culprit']} | c{r['found']} | {r['status']} | {len(r['probes'])} | {r['budget']} | "
            f"{statistics.median(ran):.1f} | {sum(ran):.1f} | {r['wall_s']:.0f} |"
        )
    worst = max(len(r["probes"]) for r in runs)
    right = sum(1 for r in runs if r["status"] == "confirmed" and r["found"] == r["culprit"])
    lines += [
        "",
        f"Found and confirmed: {right} of {len(runs)}; the most paired jobs any took: {worst} (the target: at most 5). "
        "The job run time is what the profile worker held the testbed for (claim to result, the jail and both "
        "trees' interleaved rounds included); the wall time adds the sweeps that advance the bisection (every 2 s "
        "here, `ATTNPROF_SWEEP__INTERVAL_S`), the queue and the analysis. The host is shared (other work ran beside "
        "these runs), so the times are upper bounds; the counts of jobs are not affected.",
        "",
    ]
    if plotted:
        lines += [f"![probes]({out.with_suffix('.png').name})", ""]
    lines += [
        "Each probe:",
        "",
        "| culprit | probe | candidate | against | outcome | effect | 95% interval |",
        "|---|---:|---|---|---|---:|---|",
    ]
    for r in runs:
        for k, p in enumerate(r["probes"], start=1):
            lines.append(
                f"| c{r['culprit']} | {k} | c{p['candidate']} | c{p['good']} | {p['outcome']} "
                f"| {100 * p['effect']:+.1f}% | {100 * p['low']:+.1f}% to {100 * p['high']:+.1f}% |"
            )
    out.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bisect_cpu")
    sub = parser.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--culprits", default="3,8,11,16")
    p = sub.add_parser("report")
    p.add_argument("data", type=Path)
    p.add_argument("--out", type=Path, default=Path("bench/reports/bisection-cpu.md"))
    args = parser.parse_args(argv)
    if args.verb == "run":
        run(args.out, [int(c) for c in args.culprits.split(",")])
    else:
        report(args.data, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
