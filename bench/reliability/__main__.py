"""The command line: ``python -m bench.reliability all|SCENARIO|report`` (``--help`` for the options)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bench.reliability
from bench import pipeline_load as pipeline
from bench.reliability.analysis_kill import scenario_analysis_kill
from bench.reliability.bad_inputs import scenario_bad_inputs
from bench.reliability.common import OUT, REPORT, ROOT, SCENARIOS, SWEEP, say
from bench.reliability.fuzzing import scenario_schemathesis
from bench.reliability.hostile_jobs import scenario_hostile_jobs
from bench.reliability.isolation import scenario_isolation
from bench.reliability.postgres_outage import scenario_postgres
from bench.reliability.profile_kill import scenario_profile_kill
from bench.reliability.redis_outage import scenario_redis
from bench.reliability.report import write_report
from tests.pgcluster import _bindir

# How this benchmark is started (from the repository root), as each scenario's JSON records it.
COMMAND = (pipeline._interpreter(), "-m", "bench.reliability")

RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "profile-kill": scenario_profile_kill,
    "analysis-kill": scenario_analysis_kill,
    "redis": scenario_redis,
    "postgres": scenario_postgres,
    "schemathesis": scenario_schemathesis,
    "bad-inputs": scenario_bad_inputs,
    "isolation": scenario_isolation,
    "hostile-jobs": scenario_hostile_jobs,
}


def host() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": pipeline._cpu_model(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "load": pipeline.load_average(),
        "platform": platform.platform(),
    }


def versions() -> dict[str, str]:
    """The pipeline benchmark's list (Python, the platform, Celery, kombu, FastAPI, ...), the fuzzers, and the
    servers this benchmark starts."""
    import importlib.metadata as md

    found = pipeline.versions()
    for name in ("schemathesis", "hypothesis", "httpx", "redis"):
        with contextlib.suppress(md.PackageNotFoundError):
            found[name] = md.version(name)
    for key, argv in (
        ("redis-server", ["redis-server", "--version"]),
        ("postgres", [str(_bindir() / "postgres"), "--version"]),
        ("bubblewrap", ["bwrap", "--version"]),
    ):
        with contextlib.suppress(OSError):
            found[key] = subprocess.run(argv, capture_output=True, text=True).stdout.strip()
    return found


def code_commit() -> dict[str, Any]:
    """The commit of the code measured: the checkout's HEAD (and whether its code folders had edits), or, for an
    export of one commit (``git archive``), the hash written beside it in ``.commit``."""
    marker = ROOT / ".commit"
    if marker.is_file():
        return {"commit": marker.read_text().strip(), "tree": "export of the commit"}
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "service", "worker", "attnprof.core", "attnprof"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {"commit": head, "tree": "checkout with uncommitted edits" if dirty else "clean checkout"}


def run_scenario(name: str, args: argparse.Namespace) -> dict[str, Any]:
    say(f"[{name}] start; load average {pipeline.load_average()}")
    started = time.monotonic()
    data: dict[str, Any] = {
        "scenario": name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([*COMMAND, name, *_passed_options()]),
        "invoked_as": " ".join([*COMMAND, *sys.argv[1:]]),
        "code": code_commit(),
        "versions": versions(),
        "host_before": host(),
        "settings": SWEEP,
    }
    try:
        data["result"] = RUNNERS[name](args)
    except Exception as exc:  # a scenario that broke is recorded as such; the others still run
        data["result"] = {"error": f"{type(exc).__name__}: {exc}"}
        say(f"[{name}] broke: {type(exc).__name__}: {exc}")
    data["wall_s"] = round(time.monotonic() - started, 1)
    data["host_after"] = host()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, default=str))
    say(f"[{name}] done in {data['wall_s']} s: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return data


def _passed_options() -> list[str]:
    """The options this run was given (``all`` runs each scenario with them): the scenario alone, run again."""
    return sys.argv[2:]


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.reliability", description=(bench.reliability.__doc__ or "").split("\n\n")[0]
    )
    ap.add_argument("scenario", choices=(*SCENARIOS, "all", "report"))
    ap.add_argument("--tries", type=int, default=3, help="kills per kill scenario")
    ap.add_argument("--kill-after-s", type=float, default=2.0, help="profile-kill: seconds into the profiling")
    ap.add_argument("--redis-jobs", type=int, default=8, help="redis: jobs in flight when Redis is killed")
    ap.add_argument("--redis-wait-s", type=float, default=180.0, help="redis: the longest wait for the jobs")
    ap.add_argument("--pg-submissions", type=int, default=200, help="postgres: submissions under the restart")
    ap.add_argument("--pg-down-s", type=float, default=5.0, help="postgres: seconds the database stays stopped")
    ap.add_argument("--schemathesis-s", type=float, default=150.0, help="schemathesis: the time budget, both documents")
    ap.add_argument("--st-examples", type=int, default=30, help="schemathesis: positive cases per operation")
    ap.add_argument("--hostile-s", type=float, default=420.0, help="hostile-jobs: the longest the tests may run")
    ap.add_argument("--out", type=Path, default=OUT, help="raw JSON, one file per scenario")
    ap.add_argument("--report", type=Path, default=REPORT)
    ap.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=None,
        help="report: the results to read, a folder of raw JSON (default: --out) or a summary.json a report wrote",
    )
    ap.add_argument("--cache-dir", type=Path, default=None, help="the profile workers' peaks cache (default: --out's)")
    ap.add_argument("--keep", action="store_true", help="keep each scenario's work folder (logs, database files)")
    return ap


def main() -> None:
    # SIGTERM stops the benchmark as Ctrl-C does: its processes, clusters and folders are removed on the way out.
    signal.signal(signal.SIGTERM, _interrupt)
    args = parser().parse_args()
    args.cache_dir = (args.cache_dir or args.out / "peaks-cache").resolve()
    if args.scenario == "report":
        write_report(args)
        return
    names = SCENARIOS if args.scenario == "all" else (args.scenario,)
    for name in names:
        run_scenario(name, args)
    if args.scenario == "all":
        write_report(args)


if __name__ == "__main__":
    main()
