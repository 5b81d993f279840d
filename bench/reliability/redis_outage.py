"""``redis``: Redis killed (SIGKILL) with jobs in flight, without and with its append-only file, Redis down 30 s
while jobs are submitted, and Redis killed while the analysis worker holds a message: every job done, none lost or
stored twice."""

from __future__ import annotations

import argparse
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench import pipeline_load as pipeline
from bench.reliability.common import TESTBED, now_s, say, wait_for
from bench.reliability.stack import Stack, analysers, job_row, log_tails, stack_infra
from bench.reliability.suites import tiny_suite


def _audit_jobs(stack: Stack, job_ids: list[str], jobs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the database holds for ``job_ids``: their states, runs per job, comparisons per run, and every job
    that was lost (not done) or stored twice."""
    per_job = []
    for job_id in job_ids:
        runs = stack.runs_of(job_id)
        per_job.append(
            {
                "job": job_id,
                "status": jobs[job_id]["status"],
                "attempts": jobs[job_id].get("attempts"),
                "runs": len(runs),
                "comparisons": [stack.comparisons_of(r) for r, _ in runs],
                "reason": jobs[job_id].get("reason"),
            }
        )
    sweeps = analysers(stack)
    return {
        "jobs": len(job_ids),
        "done": sum(1 for j in per_job if j["status"] == "done"),
        "not_done": [j for j in per_job if j["status"] != "done"],
        "stored_twice": [j for j in per_job if j["runs"] > 1 or any(c > 1 for c in j["comparisons"])],
        "without_run": [j["job"] for j in per_job if j["runs"] == 0],
        "attempts": sorted(j["attempts"] or 0 for j in per_job),
        "profile_resent": sum(p.text().count(": sent profile again") for p in sweeps),
        "analysis_resent": sum(p.text().count(": sent analysis again") for p in sweeps),
        "per_job": per_job,
    }


def _in_flight(stack: Stack, job_ids: list[str]) -> dict[str, int]:
    states = [s for (s,) in stack.sql("SELECT status FROM jobs WHERE id = ANY(%s)", job_ids)]
    return {k: states.count(k) for k in sorted(set(states))}


def _final_s(t_end: str | None, since: float) -> float | None:
    """Seconds from ``since`` (epoch) to ``t_end`` (an ISO timestamp of the API)."""
    moment = pipeline.utc(t_end)
    return round(moment.timestamp() - since, 2) if moment else None


def _redis_kill_case(args: argparse.Namespace, aof: bool, down_s: float) -> dict[str, Any]:
    label = "with AOF" if aof else "without AOF"
    with stack_infra(args, f"redis-{'aof' if aof else 'noaof'}", aof=aof) as (stack, _cluster, redis_server):
        stack.start_service()
        stack.start_analysis()
        for name in ("profile-1", "profile-2"):
            stack.start_profile(name)
        stack.wait_ready("analysis", "profile-1", "profile-2")
        ids = [stack.submit(tiny_suite(), branch=f"redis-{i}") for i in range(args.redis_jobs)]
        wait_for("two jobs running", lambda: _in_flight(stack, ids).get("running", 0) >= 2, 60, 0.1)
        time.sleep(1.0)
        at_kill = _in_flight(stack, ids)
        queue_len = int(redis_server.client().llen(f"profile.{TESTBED}"))
        t_kill = now_s()
        redis_server.kill9()
        say(f"  [{label}] Redis killed with {at_kill} ({queue_len} messages waiting); down {down_s:.0f} s")
        time.sleep(down_s)
        redis_server.start()
        t_back = now_s()
        restored = int(redis_server.client().llen(f"profile.{TESTBED}"))
        jobs = stack.wait_final(ids, args.redis_wait_s, label)
        t_end = max((j["finished_at"] for j in jobs.values() if j.get("finished_at")), default=None)
        audit = _audit_jobs(stack, ids, jobs)
        alive = {name: p.alive() for name, p in stack.procs.items()}
        out = {
            "aof": aof,
            "down_s": down_s,
            "at_kill": at_kill,
            "messages_waiting_at_kill": queue_len,
            "messages_after_restart": restored,
            "back_to_all_final_s": _final_s(t_end, t_back),
            "kill_to_all_final_s": _final_s(t_end, t_kill),
            "processes_alive_after": alive,
            "restarts": stack.restarts,
            **audit,
        }
        # The figure: every job done, none stored twice. A worker that exited on its own is reported beside it.
        out["ok"] = audit["done"] == len(ids) and not audit["stored_twice"]
        if not out["ok"]:
            out["logs"] = log_tails(stack)
        say(
            f"  [{label}] {audit['done']}/{len(ids)} done, stored twice {len(audit['stored_twice'])}, "
            f"profile resent {audit['profile_resent']}, analysis resent {audit['analysis_resent']}; "
            f"all final {out['back_to_all_final_s']} s after Redis was back"
        )
        return out


def _redis_down_during_submissions(args: argparse.Namespace, down_s: float) -> dict[str, Any]:
    with stack_infra(args, "redis-down", aof=True) as (stack, _cluster, redis_server):
        stack.start_service()
        stack.start_analysis()
        for name in ("profile-1", "profile-2"):
            stack.start_profile(name)
        stack.wait_ready("analysis", "profile-1", "profile-2")
        spec = tiny_suite()
        ids = [stack.submit(spec, branch="before") for _ in range(2)]
        redis_server.kill9()
        t_kill = now_s()
        say(f"  [down {down_s:.0f} s] Redis killed; submitting while it is down")
        answers = []
        readyz = []
        tenant = stack.tenants["a"]
        while now_s() - t_kill < down_s:
            t0 = time.perf_counter()
            with stack.http(tenant.tokens["submit"]) as http:
                r = http.post(
                    f"/api/v1/projects/{tenant.name}/jobs",
                    data={"testbed": TESTBED, "branch": "during", "commit": uuid.uuid4().hex[:12]},
                    files={"spec": ("attnprof.toml", spec.encode())},
                )
                answers.append({"status": r.status_code, "seconds": round(time.perf_counter() - t0, 3)})
                if r.status_code == 202:
                    ids.append(str(r.json()["id"]))
                ready = http.get("/readyz")
                readyz.append({"status": ready.status_code, "body": ready.text[:200]})
            time.sleep(max(0.0, 4.0 - (time.perf_counter() - t0)))
        redis_server.start()
        t_back = now_s()
        say(f"  [down {down_s:.0f} s] Redis back after {t_back - t_kill:.1f} s; {len(answers)} submissions while down")
        ids += [stack.submit(spec, branch="after") for _ in range(2)]
        jobs = stack.wait_final(ids, args.redis_wait_s, f"down {down_s:.0f} s")
        t_end = max((j["finished_at"] for j in jobs.values() if j.get("finished_at")), default=None)
        audit = _audit_jobs(stack, ids, jobs)
        alive = {name: p.alive() for name, p in stack.procs.items()}
        out = {
            "aof": True,
            "down_s": round(t_back - t_kill, 1),
            "submissions_while_down": answers,
            "readyz_while_down": readyz[:3],
            "back_to_all_final_s": _final_s(t_end, t_back),
            "processes_alive_after": alive,
            "restarts": stack.restarts,
            **audit,
        }
        accepted = sum(1 for a in answers if a["status"] == 202)
        out["ok"] = audit["done"] == len(ids) and not audit["stored_twice"] and accepted == len(answers)
        if not out["ok"]:
            out["logs"] = log_tails(stack)
        say(
            f"  [down {down_s:.0f} s] {accepted}/{len(answers)} submissions accepted while down; {audit['done']}/"
            f"{len(ids)} done, stored twice {len(audit['stored_twice'])}; all final {out['back_to_all_final_s']} s "
            "after Redis was back"
        )
        return out


def _redis_kill_mid_analysis(args: argparse.Namespace) -> dict[str, Any]:
    """Redis killed while the analysis worker holds a message (an analysis held mid-way for a few seconds by the
    pause knob): does the worker ride out the outage, and does the job end?"""
    with stack_infra(args, "redis-mid-analysis", aof=True) as (stack, _cluster, redis_server):
        stack.start_service()
        analysis = stack.start_analysis(ATTNPROF_ANALYSIS__PAUSE_S="8")
        stack.start_profile("profile-1")
        stack.wait_ready("analysis", "profile-1")
        job_id = stack.submit(tiny_suite(), branch="mid-analysis")
        wait_for("the analysis to be paused mid-way", lambda: f"job {job_id}: pausing" in analysis.text(), 90, 0.1)
        redis_server.kill9()
        time.sleep(3.0)
        alive_while_down = analysis.alive()
        redis_server.start()
        t_back = now_s()
        # The held analysis ends 8 s after it paused; a worker that is going away exits soon after.
        with contextlib.suppress(TimeoutError):
            wait_for("the worker to exit", lambda: not analysis.alive(), 25, 0.5)
        exit_line = next((ln for ln in analysis.text().splitlines() if "Unrecoverable" in ln), None)
        out: dict[str, Any] = {
            "alive_while_down": alive_while_down,
            "worker_exited": not analysis.alive(),
            "exit_code": analysis.popen.returncode if analysis.popen and not analysis.alive() else None,
            "unrecoverable_error": exit_line[:300] if exit_line else None,
            "status_when_worker_gone": job_row(stack, job_id)["status"],
        }
        # With the supervisor starting it again (as compose does), a second job goes through.
        stack.supervise()
        stack.wait_ready("analysis")
        second = stack.submit(tiny_suite(), branch="mid-analysis")
        jobs = stack.wait_final([job_id, second], 90, "mid-analysis")
        audit = _audit_jobs(stack, [job_id, second], jobs)
        out.update(restarts=stack.restarts, back_to_check_s=round(now_s() - t_back, 1), **audit)
        out["ok"] = audit["done"] == 2 and not audit["stored_twice"]
        say(
            f"  [mid-analysis] worker alive while Redis was down: {alive_while_down}; exited after: "
            f"{out['worker_exited']} ({out['unrecoverable_error'] or 'no error'}); {audit['done']}/2 done"
        )
        return out


def scenario_redis(args: argparse.Namespace) -> dict[str, Any]:
    cases: dict[str, Any] = {}
    runs: tuple[tuple[str, Callable[[], dict[str, Any]]], ...] = (
        ("kill_without_aof", lambda: _redis_kill_case(args, aof=False, down_s=3.0)),
        ("kill_with_aof", lambda: _redis_kill_case(args, aof=True, down_s=3.0)),
        ("down_30s_during_submissions", lambda: _redis_down_during_submissions(args, down_s=30.0)),
        ("kill_mid_analysis", lambda: _redis_kill_mid_analysis(args)),
    )
    for key, run in runs:
        try:
            cases[key] = run()
        except (TimeoutError, RuntimeError) as exc:
            cases[key] = {"ok": False, "error": str(exc)}
            say(f"  [{key}] {exc}")
    return {"cases": cases, "jobs_per_kill": args.redis_jobs}
