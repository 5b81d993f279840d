"""``bad-inputs``: the catalogue of hand-made hostile inputs sent to the running server: each must get a 4xx that
names the field, and no row change."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from typing import Any

import httpx

from bench.reliability.catalogue import catalogue
from bench.reliability.common import PARKED, say
from bench.reliability.stack import Stack, stack_infra
from bench.reliability.suites import small_suite


def _queued(stack: Stack) -> int:
    import redis

    r = redis.Redis.from_url(stack.broker_url)
    try:
        return int(r.llen(f"profile.{PARKED}"))
    finally:
        r.close()


def scenario_bad_inputs(args: argparse.Namespace) -> dict[str, Any]:
    from tests.claiming import claim_secret
    from tests.server import documents as docs

    with stack_infra(args, "bad-inputs") as (stack, _cluster, _redis):
        stack.start_service()
        a = stack.tenants["a"]
        document = docs.h200()
        with stack.http(a.tokens["submit"]) as http:
            uploaded = http.post(f"/api/v1/projects/{a.name}/results", json=docs.upload_body(document))
            uploaded.raise_for_status()
        run_id = uploaded.json()["run_id"]
        trace_name = document["cases"][0]["trace"]
        # A job claimed the way a worker claims it, for the worker routes; its message then taken off the queue.
        job_id = stack.submit(small_suite(0.1), testbed=PARKED)
        with stack.http(stack.worker_tokens[PARKED]) as http:
            claimed = http.post(
                f"/internal/jobs/{job_id}/claim",
                json={"attempt": 1, "worker": "bench", "secret": claim_secret(stack.broker_url, PARKED, job_id)},
            )
        claimed.raise_for_status()
        r = _redis.client()
        r.delete(f"profile.{PARKED}")
        r.close()
        say("  building the catalogue (the gzip bomb and the 60 MB bundle take a few seconds)")
        items = catalogue(stack, run_id, trace_name, (job_id, claimed.json()["token"]))
        results = []
        for item in items:
            before, queued_before = stack.counts(), _queued(stack)
            t0 = time.perf_counter()
            try:
                answer = item.send()
            except httpx.HTTPError as exc:
                answer = {"status": None, "ctype": "", "body": f"{type(exc).__name__}: {exc}"}
            seconds = round(time.perf_counter() - t0, 3)
            after, queued_after = stack.counts(), _queued(stack)
            detail = ""
            error = None
            if answer["ctype"].startswith("application/json"):
                with contextlib.suppress(ValueError):
                    body = json.loads(answer["body"]) if answer["body"].startswith("{") else {}
                    detail, error = str(body.get("detail", "")), body.get("error")
            changed = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
            if queued_after != queued_before:
                changed["queued messages"] = queued_after - queued_before
            row = {
                "input": item.name,
                "group": item.group,
                "status": answer["status"],
                "error": error,
                "detail": detail[:400],
                "seconds": seconds,
                "sent_bytes": answer.get("sent_bytes"),
                "expected": list(item.statuses),
                "words": list(item.words),
                "refused": answer["status"] is not None and 400 <= answer["status"] < 500,
                "expected_status": answer["status"] in item.statuses,
                "names_the_field": any(w.lower() in detail.lower() for w in item.words),
                "changed": changed,
            }
            if not row["detail"] and answer["body"]:
                row["body"] = answer["body"][:300]
            row["clear"] = row["refused"] and row["names_the_field"]
            row["ok"] = row["refused"] and row["names_the_field"] and not changed
            results.append(row)
            mark = "ok " if row["ok"] else "NOT"
            say(
                f"  {mark} {answer['status']} {item.name}: {detail[:110] or answer['body'][:110]}"
                + (f" CHANGED {changed}" if changed else "")
            )
        service_log = stack.procs["service"].text()
        return {
            "inputs": len(results),
            "refused_clearly": sum(r["ok"] for r in results),
            "refused": sum(r["refused"] for r in results),
            "refused_unclear": [r["input"] for r in results if r["refused"] and not r["clear"]],
            "not_refused": [r["input"] for r in results if not r["refused"]],
            "changed_something": [r["input"] for r in results if r["changed"]],
            "unexpected_status": [r["input"] for r in results if not r["expected_status"]],
            "not_ok": [r for r in results if not r["ok"]],
            "rows": results,
            "server_tracebacks": service_log.count("Traceback"),
            "ok": all(r["ok"] for r in results),
        }
