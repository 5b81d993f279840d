"""``analysis-kill``: the analysis worker killed with SIGKILL mid-analysis (held there by
``ATTNPROF_ANALYSIS__PAUSE_S``): the job done within a minute of the kill, exactly one comparison, also once the dead
worker's message is delivered again."""

from __future__ import annotations

import argparse
import contextlib
import json
from functools import partial
from typing import Any

from bench import pipeline_load as pipeline
from bench.reliability.common import now_s, say, wait_for
from bench.reliability.servers import OwnRedis
from bench.reliability.stack import Proc, Stack, analysers, job_row, log_tails, log_time, logged, stack_infra
from bench.reliability.suites import tiny_suite


def _unacked(redis_server: OwnRedis, job_id: str) -> dict[bytes, bytes]:
    """Deliveries of ``analysis.run(job_id)`` in kombu's ``unacked`` hash (a worker took them, none acknowledged)."""
    r = redis_server.client()
    try:
        return {tag: raw for tag, raw in r.hgetall("unacked").items() if job_id.encode() in raw}
    finally:
        r.close()


def _restore_deliveries(redis_server: OwnRedis, job_id: str, worker: Proc) -> int:
    """Each unacknowledged delivery of the job's analysis put back on its queue, as kombu restores it, and given
    30 s to run on ``worker``: how many there were."""
    left = _unacked(redis_server, job_id)
    for tag, raw in left.items():
        message, _exchange, routing_key = json.loads(raw)
        r = redis_server.client()
        try:
            r.lpush(routing_key, json.dumps(message))
            r.hdel("unacked", tag)
        finally:
            r.close()
        task_id = message["headers"]["id"]
        with contextlib.suppress(TimeoutError):
            wait_for("the restored message to run", partial(logged, worker, f"analysis.run[{task_id}] succeeded"), 30)
    return len(left)


def _analysis_kill_try(stack: Stack, redis_server: OwnRedis, index: int) -> dict[str, Any]:
    slow = stack.start_analysis(f"analysis-slow-{index + 1}", ATTNPROF_ANALYSIS__PAUSE_S="600")
    stack.wait_ready(slow.name)
    job_id = stack.submit(tiny_suite(), branch=f"analysis-kill-{index}")
    out: dict[str, Any] = {"job": job_id}
    wait_for("the analysis to be paused mid-way", lambda: f"job {job_id}: pausing" in slow.text(), 90, 0.1)
    run_id = job_row(stack, job_id)["run_id"]
    out["comparisons_before_kill"] = stack.comparisons_of(run_id)
    row = job_row(stack, job_id)
    out["status_at_kill"] = row["status"]
    t_kill = now_s()
    slow.kill9()
    out["lease_left_at_kill_s"] = (
        round(row["lease_expires_at"].timestamp() - t_kill, 3) if row["lease_expires_at"] else None
    )
    out["unacked_after_kill"] = len(_unacked(redis_server, job_id))
    # A supervisor starts the analysis worker again (compose's restart, systemd): a fresh one, no pause.
    fresh = stack.start_analysis(f"analysis-fresh-{index + 1}")
    stack.wait_ready(fresh.name)
    t_ready = now_s()
    final = None
    with contextlib.suppress(TimeoutError):
        final = wait_for(
            "the job to be final",
            lambda: (r := job_row(stack, job_id))["status"] in pipeline.FINAL and r,
            90,
            0.2,
        )
    t_resent = log_time([fresh], f"job {job_id}: sent analysis again")
    out.update(
        status=final["status"] if final else f"not final: {job_row(stack, job_id)['status']}",
        verdict=final["verdict"] if final else None,
        kill_to_fresh_ready_s=round(t_ready - t_kill, 3),
        kill_to_resent_s=round(t_resent - t_kill, 3) if t_resent else None,
        kill_to_done_s=round(final["finished_at"].timestamp() - t_kill, 3) if final and final["finished_at"] else None,
        comparisons=stack.comparisons_of(run_id),
        runs=len(stack.runs_of(job_id)),
    )
    # The dead worker's delivery, restored as kombu restores it after visibility_timeout (3 h): it must change nothing.
    out["restored_deliveries"] = _restore_deliveries(redis_server, job_id, fresh)
    after = job_row(stack, job_id)
    out["after_restore"] = {
        "status": after["status"],
        "verdict": after["verdict"],
        "finished_at_unchanged": bool(final and after["finished_at"] == final["finished_at"]),
        "comparisons": stack.comparisons_of(run_id),
    }
    out["ok"] = bool(
        final
        and final["status"] == "done"
        and out["comparisons"] == 1
        and out["after_restore"]["comparisons"] == 1
        and out["after_restore"]["finished_at_unchanged"]
        and out["kill_to_done_s"] is not None
        and out["kill_to_done_s"] < 60
    )
    say(
        f"  try {index + 1}: {out['status']} {out['verdict']}, comparisons {out['comparisons']} "
        f"(after the restored delivery {out['after_restore']['comparisons']}); kill → fresh worker ready "
        f"{out['kill_to_fresh_ready_s']} s → analysis resent {out['kill_to_resent_s']} s → done "
        f"{out['kill_to_done_s']} s"
    )
    fresh.stop()  # the next try starts its own slow worker
    return out


def scenario_analysis_kill(args: argparse.Namespace) -> dict[str, Any]:
    with stack_infra(args, "analysis-kill") as (stack, _cluster, redis_server):
        stack.start_service()
        stack.start_profile("profile-1")
        stack.wait_ready("profile-1")
        tries = []
        for i in range(args.tries):
            try:
                tries.append(_analysis_kill_try(stack, redis_server, i))
            except (TimeoutError, RuntimeError) as exc:
                tries.append({"ok": False, "error": str(exc), "logs": log_tails(stack)})
                say(f"  try {i + 1}: {exc}")
                for proc in analysers(stack):
                    proc.stop()
        return {"tries": tries, "pause_s": 600}
