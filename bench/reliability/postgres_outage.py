"""``postgres``: Postgres stopped and started again under 200 submissions: no accepted job lost, none stored that
was refused, the answers by kind (the 503 JSON error, anything else); ``attnprof submit --wait`` across a restart
ends with a verdict."""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import subprocess
import threading
import time
import uuid
from typing import Any

import httpx

from bench import pipeline_load as pipeline
from bench.reliability.common import PARKED, SWEEP, TESTBED, now_s, say, wait_for
from bench.reliability.stack import Stack, stack_infra
from bench.reliability.suites import small_suite
from tests.pgcluster import Cluster


def _answer_kind(r: httpx.Response) -> str:
    """How an answer reads: ``accepted``, ``503 json`` (the unavailable error with Retry-After), or what else."""
    if r.status_code == 202:
        return "accepted"
    ctype = r.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        try:
            body = r.json()
        except ValueError:
            return f"{r.status_code} bad json"
        if r.status_code == 503 and body.get("error") == "unavailable" and r.headers.get("Retry-After", "").isdigit():
            return "503 json"
        return f"{r.status_code} json {body.get('error')}"
    return f"{r.status_code} {ctype.split(';')[0] or 'no content-type'}"


def _post_storm_job(http: httpx.Client, stack: Stack, commit: str, key: str) -> httpx.Response:
    """One storm submission: the small suite to the testbed with no worker, its own commit and Idempotency-Key."""
    return http.post(
        f"/api/v1/projects/{stack.tenants['a'].name}/jobs",
        data={"testbed": PARKED, "branch": "storm", "commit": commit},
        files={"spec": ("attnprof.toml", small_suite(0.1).encode())},
        headers={"Idempotency-Key": key},
    )


def _submit_one(stack: Stack, http: httpx.Client, i: int) -> dict[str, Any]:
    """Submission ``i``: when it was sent, how it was answered, and how long that took."""
    commit = f"storm{i:04d}"
    t0 = now_s()
    row: dict[str, Any] = {"i": i, "commit": commit, "key": f"storm-{i}-{uuid.uuid4().hex[:8]}", "t": t0}
    try:
        r = _post_storm_job(http, stack, commit, row["key"])
        row.update(status=r.status_code, kind=_answer_kind(r), body=r.text[:200])
        if r.status_code == 202:
            row["job"] = r.json()["id"]
    except httpx.HTTPError as exc:
        row.update(status=None, kind=f"transport {type(exc).__name__}", body=str(exc)[:200])
    row["seconds"] = round(now_s() - t0, 3)
    return row


def _submit_under_restart(
    stack: Stack, cluster: Cluster, n: int, restart_after: int, down_s: float
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """``n`` submissions from 4 threads (each pausing 0.25 s between its own), Postgres stopped once
    ``restart_after`` have been answered and started again ``down_s`` later: the answers, in order, and the
    outage's moments."""
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()
    todo = list(range(n))
    outage: dict[str, float] = {}

    def sender() -> None:
        with stack.http(stack.tenants["a"].tokens["submit"], timeout_s=30) as http:
            while True:
                with lock:
                    if not todo:
                        return
                    i = todo.pop(0)
                row = _submit_one(stack, http, i)
                with lock:
                    answers.append(row)
                time.sleep(0.25)

    def restarter() -> None:
        wait_for("submissions before the restart", lambda: len(answers) >= restart_after, 120, 0.05)
        outage["stop"] = now_s()
        cluster.stop("fast")
        outage["stopped"] = now_s()
        time.sleep(down_s)
        cluster.start()
        outage["started"] = now_s()

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(4)]
    pg = threading.Thread(target=restarter, daemon=True)
    pg.start()
    for t in threads:
        t.start()
    for t in [*threads, pg]:
        t.join(timeout=240)
    answers.sort(key=lambda a: a["i"])
    return answers, outage


def _retry_refused(stack: Stack, refused: list[dict[str, Any]]) -> dict[str, int]:
    """The client's way out: each refused submission sent again with its Idempotency-Key (``retry_job`` added to
    those accepted); the answers by status."""
    retried: dict[str, int] = {}
    with stack.http(stack.tenants["a"].tokens["submit"]) as http:
        for a in refused:
            r = _post_storm_job(http, stack, a["commit"], a["key"])
            retried[str(r.status_code)] = retried.get(str(r.status_code), 0) + 1
            if r.status_code in (200, 202):
                a["retry_job"] = r.json()["id"]
    return retried


def _on_their_way(stack: Stack, accepted_ids: set[str]) -> tuple[dict[str, int], set[str]]:
    """Every accepted job must still be on its way to a worker: queued, and either waiting in the database for the
    dispatcher (a testbed with no live worker is offered one job at a time) or offered with its message in the
    broker. An offered job without a message is the sweep's to send again (queued_stale_s): it is given that long.
    The accepted jobs by state, and those stranded."""
    stranded: set[str] = set()
    states: dict[str, int] = {}

    def check() -> bool:
        in_broker = _offered(stack, PARKED)
        rows = stack.sql("SELECT id, status, offered_at FROM jobs WHERE id = ANY(%s)", sorted(accepted_ids))
        stranded.clear()
        states.clear()
        for job_id, status, offered_at in rows:
            kind = "offered" if offered_at else "waiting"
            states[f"{status}, {kind}"] = states.get(f"{status}, {kind}", 0) + 1
            if status != "queued" or (offered_at and str(job_id) not in in_broker):
                stranded.add(str(job_id))
        stranded.update(accepted_ids - {str(r[0]) for r in rows})
        return not stranded

    with contextlib.suppress(TimeoutError):
        wait_for("every accepted job on its way", check, float(SWEEP["ATTNPROF_SWEEP__QUEUED_STALE_S"]) * 3 + 10, 1.0)
    return states, stranded


def _storm(stack: Stack, cluster: Cluster, n: int, restart_after: int, down_s: float) -> dict[str, Any]:
    """``n`` submissions under a restart of Postgres (``_submit_under_restart``), every answer recorded, nothing
    retried; then what the database holds, once it is back: each accepted job, and nothing of a refused one."""
    answers, outage = _submit_under_restart(stack, cluster, n, restart_after, down_s)
    during = [a for a in answers if outage and outage["stop"] <= a["t"] <= outage.get("started", 0) + 1]
    kinds: dict[str, int] = {}
    for a in answers:
        kinds[a["kind"]] = kinds.get(a["kind"], 0) + 1
    commits = [a["commit"] for a in answers]
    stored = _stored_by_commit(stack, commits)
    accepted = [a for a in answers if a["kind"] == "accepted"]
    refused = [a for a in answers if a["kind"] != "accepted"]
    lost = [a["commit"] for a in accepted if a["job"] not in stored.get(a["commit"], [])]
    stored_refused = [{"commit": a["commit"], "kind": a["kind"]} for a in refused if a["commit"] in stored]
    doubled = [c for c, ids in stored.items() if len(ids) > 1]
    retried = _retry_refused(stack, refused)
    after_retry = {c: len(ids) for c, ids in _stored_by_commit(stack, commits).items()}
    accepted_ids = {a["job"] for a in accepted} | {a["retry_job"] for a in refused if a.get("retry_job")}
    states, stranded = _on_their_way(stack, accepted_ids)
    return {
        "submissions": n,
        "threads": 4,
        "outage": {k: round(v - answers[0]["t"], 2) for k, v in outage.items()} if answers else outage,
        "down_s": round(outage.get("started", 0) - outage.get("stop", 0), 2) if outage else None,
        "answers_by_kind": kinds,
        "answers_during_outage_by_kind": {
            k: sum(1 for a in during if a["kind"] == k) for k in {a["kind"] for a in during}
        },
        "accepted": len(accepted),
        "refused": len(refused),
        "accepted_lost": lost,
        "refused_but_stored": stored_refused,
        "stored_twice": doubled,
        "retries_of_refused_by_status": retried,
        "rows_per_commit_after_retries": sorted(set(after_retry.values())),
        "commits_without_row_after_retries": [c for c in commits if c not in after_retry],
        "accepted_by_state": states,
        "accepted_stranded": sorted(stranded),
        "plain_text_500": [a for a in answers if a["status"] == 500 and not a["kind"].startswith("500 json")],
        "not_503_json_refusals": [a for a in refused if a["kind"] != "503 json"][:20],
        "slowest_answer_s": max((a["seconds"] for a in answers), default=None),
    }


def _stored_by_commit(stack: Stack, commits: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for job_id, commit in stack.sql("SELECT id, commit FROM jobs WHERE commit = ANY(%s)", commits):
        found.setdefault(commit, []).append(str(job_id))
    return found


def _offered(stack: Stack, testbed: str) -> set[str]:
    """Job ids with a ``profile.run`` message waiting on the testbed's queue."""
    import redis

    r = redis.Redis.from_url(stack.broker_url)
    try:
        raw = r.lrange(f"profile.{testbed}", 0, -1)
    finally:
        r.close()
    return {str(json.loads(base64.b64decode(json.loads(m)["body"]))[0][0]) for m in raw}


def _submit_wait_across_restart(stack: Stack, cluster: Cluster, when: str, down_s: float) -> dict[str, Any]:
    """``attnprof submit --wait`` with Postgres stopped for ``down_s``: ``when`` = ``submit`` (stopped before the
    command starts: its POST meets the outage) or ``wait`` (stopped once the job runs: its polls meet it)."""
    suite = stack.workdir / "attnprof.toml"
    suite.write_text(small_suite(0.1))
    argv = [*pipeline.attnprof_command(), "submit", str(suite), "--server", stack.url]
    argv += [
        "--token",
        stack.tenants["a"].tokens["submit"],
        "--testbed",
        TESTBED,
        "--source",
        str(pipeline.BUNDLE_SOURCE),
    ]
    commit = f"wait-{when}-{uuid.uuid4().hex[:6]}"
    argv += ["--branch", "main", "--commit", commit, "--base-commit", commit, "--wait", "--timeout", "240"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNPROF_")}
    t0 = now_s()
    outage: dict[str, float] = {}
    if when == "submit":
        outage["stop"] = now_s() - t0
        cluster.stop("fast")
    with (stack.workdir / f"submit-{when}.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=env, cwd=stack.workdir, stdout=log, stderr=subprocess.STDOUT)
    try:
        if when == "submit":
            time.sleep(down_s)
        else:
            wait_for(
                "the job to run",
                lambda: stack.sql("SELECT status FROM jobs WHERE commit = %s", commit) in ([("running",)],),
                120,
                0.1,
            )
            outage["stop"] = now_s() - t0
            cluster.stop("fast")
            time.sleep(down_s)
        cluster.start()
        outage["start"] = now_s() - t0
        code = proc.wait(timeout=300)
    except (subprocess.TimeoutExpired, TimeoutError) as exc:
        proc.kill()
        proc.wait()
        if not cluster.running():
            cluster.start()
        code = None
        outage["error"] = str(exc)  # type: ignore[assignment]
    text = (stack.workdir / f"submit-{when}.log").read_text(errors="replace")
    rows = stack.sql("SELECT id, status, verdict FROM jobs WHERE commit = %s", commit)
    return {
        "when": when,
        "exit_code": code,
        "seconds": round(now_s() - t0, 1),
        "outage": {k: round(v, 2) if isinstance(v, float) else v for k, v in outage.items()},
        "jobs_stored": len(rows),
        "job_status": [f"{r[1]} {r[2]}" for r in rows],
        "output_tail": text[-1200:],
        "ok": code in (0, 1) and len(rows) == 1,
    }


def scenario_postgres(args: argparse.Namespace) -> dict[str, Any]:
    with stack_infra(args, "postgres") as (stack, cluster, _redis):
        stack.start_service()
        stack.start_analysis()
        stack.start_profile("profile-1")
        stack.wait_ready("analysis", "profile-1")
        say(f"  {args.pg_submissions} submissions, Postgres stopped after {args.pg_submissions // 4} answers")
        storm = _storm(stack, cluster, args.pg_submissions, args.pg_submissions // 4, args.pg_down_s)
        say(
            f"  answers {storm['answers_by_kind']} (during the outage {storm['answers_during_outage_by_kind']}); "
            f"accepted lost {len(storm['accepted_lost'])}, refused but stored {len(storm['refused_but_stored'])}, "
            f"stored twice {len(storm['stored_twice'])}, accepted but stranded (offered, no message) "
            f"{len(storm['accepted_stranded'])}"
        )
        waits = []
        for when in ("submit", "wait"):
            found = _submit_wait_across_restart(stack, cluster, when, args.pg_down_s)
            waits.append(found)
            say(f"  submit --wait, Postgres stopped at its {when}: exit {found['exit_code']} in {found['seconds']} s")
        storm["ok"] = not (
            storm["accepted_lost"]
            or storm["refused_but_stored"]
            or storm["stored_twice"]
            or storm["plain_text_500"]
            or storm["accepted_stranded"]
        )
        return {
            "storm": storm,
            "submit_wait": waits,
            "server_tracebacks": stack.procs["service"].text().count("Traceback"),
        }
