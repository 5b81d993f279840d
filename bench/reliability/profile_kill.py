"""``profile-kill``: a profile worker killed with SIGKILL mid-job: exactly one run stored per job, the takeover
time and its parts (lease, sweep, claim by the other worker)."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from bench import pipeline_load as pipeline
from bench.reliability.common import now_s, say, wait_for
from bench.reliability.stack import Stack, analysers, job_row, log_tails, log_time, stack_infra
from bench.reliability.suites import bundle, small_suite


def _job_processes(pattern: str) -> list[int]:
    """Live processes whose command line holds ``pattern`` (a job's scratch folder name)."""
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found if int(p) != os.getpid()]


def _profile_kill_try(stack: Stack, spec: str, index: int, kill_after_s: float) -> dict[str, Any]:
    job_id = stack.submit(spec, bundle=bundle(), branch=f"kill-{index}")
    out: dict[str, Any] = {"job": job_id}
    row = wait_for("the job to be claimed", lambda: (r := job_row(stack, job_id))["status"] == "running" and r, 60)
    victim = next(p for p in stack.procs.values() if f"/pid{p.pid}" in (row["claimed_by"] or "") and p.alive())
    survivors = [
        p.name for p in stack.procs.values() if p.name.startswith("profile-") and p is not victim and p.alive()
    ]
    line = f"job {job_id} attempt 1: profiling in "
    wait_for("the profiling subprocess to start", lambda: line in victim.text(), 30, 0.05)
    scratch = victim.text().split(line, 1)[1].split()[0]
    time.sleep(kill_after_s)  # well inside the profiling (the subprocess needs ~1 s to import torch)
    children = _job_processes(Path(scratch).name)
    lease = job_row(stack, job_id)["lease_expires_at"]
    t_kill = now_s()
    victim.kill9()
    out.update(victim=victim.name, survivors=survivors, subprocesses_at_kill=len(children), status_at_kill="running")
    out["lease_left_at_kill_s"] = round(lease.timestamp() - t_kill, 3) if lease else None
    t_requeued = t_claimed = t_orphans_gone = None
    final = None
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        row = job_row(stack, job_id)
        t = now_s()
        if t_orphans_gone is None and not _job_processes(Path(scratch).name):
            t_orphans_gone = t
        if t_requeued is None and (row["status"] == "queued" or row["attempts"] >= 2):
            t_requeued = t
        if t_claimed is None and row["attempts"] >= 2 and row["started_at"]:
            t_claimed = row["started_at"].timestamp()
        if row["status"] in pipeline.FINAL:
            final = row
            break
        time.sleep(0.2)
    runs = stack.runs_of(job_id)
    # The sweep's own log says when it re-queued the job (the row's timestamps move on at the next claim).
    t_requeued = log_time(analysers(stack), f"job {job_id}: sent profile again") or t_requeued
    out.update(
        status=final["status"] if final else f"not final: {job_row(stack, job_id)['status']}",
        verdict=final["verdict"] if final else None,
        attempts=final["attempts"] if final else None,
        reason=(final or {}).get("reason"),
        claimed_by_survivor=bool(
            final and any(f"/pid{stack.procs[s].pid}" in (final["claimed_by"] or "") for s in survivors)
        ),
        runs=[{"run": r, "attempt": a} for r, a in runs],
        comparisons=stack.comparisons_of(runs[0][0]) if len(runs) == 1 else None,
        kill_to_orphans_gone_s=round(t_orphans_gone - t_kill, 3) if t_orphans_gone else None,
        kill_to_requeued_s=round(t_requeued - t_kill, 3) if t_requeued else None,
        kill_to_lease_expiry_s=out["lease_left_at_kill_s"],
        kill_to_claimed_s=round(t_claimed - t_kill, 3) if t_claimed else None,
        kill_to_done_s=round(final["finished_at"].timestamp() - t_kill, 3) if final and final["finished_at"] else None,
    )
    out["ok"] = bool(
        out["status"] == "done"
        and len(runs) == 1
        and runs[0][1] == 2
        and out["comparisons"] == 1
        and out["claimed_by_survivor"]
    )
    say(
        f"  try {index + 1}: {out['status']}, runs {[(r[:8], a) for r, a in runs]}, comparisons {out['comparisons']}; "
        f"kill → re-queued {out['kill_to_requeued_s']} s → claimed {out['kill_to_claimed_s']} s → done "
        f"{out['kill_to_done_s']} s; subprocess gone after {out['kill_to_orphans_gone_s']} s"
    )
    # The dead worker comes back, as its supervisor would start it again, before the next try.
    stack.start_profile(victim.name)
    stack.wait_ready(victim.name)
    return out


def scenario_profile_kill(args: argparse.Namespace) -> dict[str, Any]:
    spec = small_suite(1.0)
    with stack_infra(args, "profile-kill") as (stack, _cluster, _redis):
        stack.start_service()
        stack.start_analysis()
        for name in ("profile-1", "profile-2"):
            stack.start_profile(name)
        stack.wait_ready("analysis", "profile-1", "profile-2")
        say("  stack up; a warm-up job first (its analysis has no baseline)")
        warm = stack.submit(small_suite(0.1), bundle=bundle())
        stack.wait_final([warm], 90, "warm-up")
        tries = []
        for i in range(args.tries):
            try:
                tries.append(_profile_kill_try(stack, spec, i, args.kill_after_s))
            except (TimeoutError, RuntimeError, StopIteration) as exc:
                tries.append({"ok": False, "error": str(exc), "logs": log_tails(stack)})
                say(f"  try {i + 1}: {exc}")
        return {
            "tries": tries,
            "suite": "bench/pipeline_load.py's small CPU suite, budget_s = 1.0 per case",
            "kill_after_s": args.kill_after_s,
            "logs": log_tails(stack) if not all(t.get("ok") for t in tries) else {},
        }
