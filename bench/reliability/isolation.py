"""``isolation``: the probes sent to the running server: each must be refused, and nothing of project b change."""

from __future__ import annotations

import argparse
import contextlib
import gzip
from typing import Any

import httpx

from bench.reliability.common import PARKED, TESTBED, say
from bench.reliability.probes import Probe, probes, tables
from bench.reliability.stack import Stack, job_row, stack_infra
from bench.reliability.suites import small_suite


def _b_objects(stack: Stack) -> dict[str, str]:
    """Project ``b``'s objects an intruder aims at: a run with a comparison and a trace, a queued job, a pin."""
    from tests.server import documents as docs

    b = stack.tenants["b"]
    document = docs.h200()
    trace = document["cases"][0]["trace"]
    with stack.http(b.tokens["submit"]) as http:
        up = http.post(f"/api/v1/projects/{b.name}/results", json=docs.upload_body(document))
        up.raise_for_status()
        run_id, comparison_id = up.json()["run_id"], up.json()["comparison_id"]
        http.put(
            f"/api/v1/projects/{b.name}/runs/{run_id}/traces/{trace}",
            content=gzip.compress(b'{"traceEvents": []}'),
            headers={"Content-Type": "application/gzip"},
        ).raise_for_status()
    with stack.http(b.tokens["admin"]) as http:
        http.post(f"/api/v1/projects/{b.name}/baselines/pins", json={"run_id": run_id}).raise_for_status()
    job_id = stack.submit(small_suite(0.1), tenant="b", testbed=PARKED)
    return {
        "run": run_id,
        "comparison": comparison_id,
        "trace": trace,
        "job": job_id,
        "token": str(b.token_ids["read"]),
        "case": document["cases"][0]["id"],
        "kernel": document["cases"][0]["kernels"][0]["key"],
    }


def _send_probe(stack: Stack, p: Probe, path: str | None = None, body: Any = None) -> httpx.Response:
    """``p`` sent (to ``path`` with ``body``, for its twin): a PUT with a small gzip body, a job's form, or JSON."""
    headers = {"Authorization": f"Bearer {p.token}"} if p.token else {}
    with httpx.Client(base_url=stack.url, headers=headers, timeout=30) as http:
        target = path or p.path
        if p.method == "PUT":
            return http.put(target, content=gzip.compress(b"{}"), headers={"Content-Type": "application/gzip"})
        if p.files is not None:
            return http.request(p.method, target, files=p.files, data=p.data)
        sent = body if body is not None else p.body
        return http.request(p.method, target, json=sent) if sent is not None else http.request(p.method, target)


def _b_state(stack: Stack) -> dict[str, Any]:
    b = stack.tenants["b"]
    pid = stack.sql("SELECT id FROM projects WHERE name = %s", b.name)[0][0]
    state: dict[str, Any] = {}
    for table in ("jobs", "runs", "comparisons", "baseline_rules", "tokens"):
        state[table] = stack.sql(f"SELECT count(*) FROM {table} WHERE project_id = %s", pid)[0][0]
    state["job_states"] = sorted(str(s) for (s,) in stack.sql("SELECT status FROM jobs WHERE project_id = %s", pid))
    state["token_hashes"] = sorted(
        str(h)
        for (h,) in stack.sql("SELECT secret_sha256 FROM tokens WHERE project_id = %s AND revoked_at IS NULL", pid)
    )
    state["traces"] = stack.sql(
        "SELECT count(*) FROM run_traces t JOIN runs r ON r.id = t.run_id WHERE r.project_id = %s", pid
    )[0][0]
    return state


def _a_objects(stack: Stack) -> dict[str, str]:
    """Project a's own objects the probes name: an uploaded run and its trace, and a job claimed on another testbed
    (b's job holds the one offer a testbed with no live worker gets), with its job token."""
    from tests.claiming import claim_secret
    from tests.server import documents as docs

    a = stack.tenants["a"]
    document = docs.h200()
    with stack.http(a.tokens["submit"]) as http:
        up = http.post(f"/api/v1/projects/{a.name}/results", json=docs.upload_body(document))
        up.raise_for_status()
    a_job = stack.submit(small_suite(0.1), testbed=TESTBED)
    a_secret = claim_secret(stack.broker_url, TESTBED, a_job)
    with stack.http(stack.worker_tokens[TESTBED]) as http:
        claimed = http.post(f"/internal/jobs/{a_job}/claim", json={"attempt": 1, "worker": "a", "secret": a_secret})
    claimed.raise_for_status()
    return {
        "run": up.json()["run_id"],
        "trace": document["cases"][0]["trace"],
        "job": a_job,
        "job_token": claimed.json()["token"],
    }


def _probe_row(stack: Stack, p: Probe, bo: dict[str, str]) -> dict[str, Any]:
    """``p`` and its twin sent: refused as it must be, answered as for a missing object, naming none of b's ids."""
    r = _send_probe(stack, p)
    row: dict[str, Any] = {"probe": p.what, "kind": p.kind, "method": p.method, "status": r.status_code}
    with contextlib.suppress(ValueError):
        row["error"] = r.json().get("error")
        row["detail"] = str(r.json().get("detail", ""))[:200]
    row["refused"] = r.status_code in (401, 403, 404) or (r.status_code in (409, 422) and p.kind == "worker")
    if p.twin:
        t = _send_probe(stack, p, *p.twin)
        same = t.status_code == r.status_code
        with contextlib.suppress(ValueError):
            same = same and t.json().get("error") == r.json().get("error")
        row["twin_status"] = t.status_code
        row["same_as_missing"] = same
    # Something that existed must not be described to an intruder beyond "not found".
    leaked = [k for k in ("run", "comparison", "job") if bo[k] in r.text and p.kind != "no-token"]
    row["mentions_b_ids"] = [k for k in leaked if r.status_code < 400]
    row["ok"] = row["refused"] and not row["mentions_b_ids"] and row.get("same_as_missing", True)
    return row


def _by_kind(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    by_kind: dict[str, dict[str, int]] = {}
    for row in rows:
        k = by_kind.setdefault(row["kind"], {"probes": 0, "refused": 0, "ok": 0})
        k["probes"] += 1
        k["refused"] += int(row["refused"])
        k["ok"] += int(row["ok"])
    return by_kind


def scenario_isolation(args: argparse.Namespace) -> dict[str, Any]:
    from tests.claiming import claim_secret

    with stack_infra(args, "isolation") as (stack, _cluster, _redis):
        stack.start_service()
        bo = _b_objects(stack)
        bo["secret"] = claim_secret(stack.broker_url, PARKED, bo["job"])
        a_objects = _a_objects(stack)
        before = _b_state(stack)
        rows = [_probe_row(stack, p, bo) for p in probes(*tables(stack, bo, a_objects))]
        after = _b_state(stack)
        # Each of b's tokens still works, and b's job still waits for a worker.
        with stack.http() as http:
            b_tokens_work = all(
                http.get("/api/v1/token", headers={"Authorization": f"Bearer {t}"}).status_code == 200
                for t in stack.tenants["b"].tokens.values()
            )
        a_job_state = job_row(stack, a_objects["job"])["status"]
        statuses: dict[str, int] = {}
        for row in rows:
            statuses[str(row["status"])] = statuses.get(str(row["status"]), 0) + 1
        for row in rows:
            if not row["ok"]:
                say(
                    f"  NOT {row['status']} {row['probe']}: {row.get('detail', '')[:100]} "
                    f"(for a missing object: {row.get('twin_status')})"
                )
        say(f"  {sum(r['ok'] for r in rows)} of {len(rows)} refused as they must be; answers {statuses}")
        return {
            "probes": len(rows),
            "refused": sum(r["refused"] for r in rows),
            "ok": all(r["ok"] for r in rows) and before == after and b_tokens_work,
            "refused_as_designed": sum(r["ok"] for r in rows),
            "by_kind": _by_kind(rows),
            "statuses": statuses,
            "not_ok": [r for r in rows if not r["ok"]],
            "b_unchanged": before == after,
            "b_before": {k: v for k, v in before.items() if k != "token_hashes"},
            "b_after": {k: v for k, v in after.items() if k != "token_hashes"},
            "b_tokens_still_work": b_tokens_work,
            "a_claimed_job_state_after": a_job_state,
            "rows": rows,
            "server_tracebacks": stack.procs["service"].text().count("Traceback"),
        }
