"""``bad-inputs``: the catalogue of hand-made hostile inputs (``catalogue.py``) sent to the running server: each must
get a 4xx that names the field, and no row change."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.reliability.catalogue import CASES, Answer, Case, Target, made_up_tokens, sender
from bench.reliability.common import PARKED, say
from bench.reliability.servers import OwnRedis
from bench.reliability.stack import Stack, stack_infra
from bench.reliability.suites import small_suite


def _special_tokens(stack: Stack) -> dict[str, str]:
    """A revoked token and an expired one of project ``a``, made by the service's own code."""
    from datetime import timedelta

    from attnprof.server.auth import service as auth
    from attnprof.server.db import make_engine, make_sessionmaker
    from attnprof.server.projects import repository as projects

    engine = make_engine(stack.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            project = projects.get_by_name(session, stack.tenants["a"].name)
            assert project is not None
            revoked, revoked_secret = auth.create_project_token(session, project_id=project.id, role="read")
            expiring = auth.create_project_token(
                session, project_id=project.id, role="read", expires_in=timedelta(seconds=1)
            )[1]
            session.flush()
            auth.revoke(session, project_id=project.id, token_id=revoked.id)
            session.commit()
    finally:
        engine.dispose()
    time.sleep(1.2)
    return {"revoked": revoked_secret, "expired": expiring}


def _queued(stack: Stack) -> int:
    import redis

    r = redis.Redis.from_url(stack.broker_url)
    try:
        return int(r.llen(f"profile.{PARKED}"))
    finally:
        r.close()


def _target(stack: Stack, redis_server: OwnRedis) -> Target:
    """What the catalogue's requests name: a's uploaded run and its trace, a job claimed the way a worker claims it
    (for the worker routes; its message then taken off the queue), a's tokens and the special ones."""
    from tests.claiming import claim_secret
    from tests.server import documents as docs

    a = stack.tenants["a"]
    document = docs.h200()
    with stack.http(a.tokens["submit"]) as http:
        uploaded = http.post(f"/api/v1/projects/{a.name}/results", json=docs.upload_body(document))
        uploaded.raise_for_status()
    job_id = stack.submit(small_suite(0.1), testbed=PARKED)
    with stack.http(stack.worker_tokens[PARKED]) as http:
        claimed = http.post(
            f"/internal/jobs/{job_id}/claim",
            json={"attempt": 1, "worker": "bench", "secret": claim_secret(stack.broker_url, PARKED, job_id)},
        )
    claimed.raise_for_status()
    r = redis_server.client()
    r.delete(f"profile.{PARKED}")
    r.close()
    names = {
        "base": f"/api/v1/projects/{a.name}",
        "run_id": uploaded.json()["run_id"],
        "trace": document["cases"][0]["trace"],
        "job_id": job_id,
        "read_token_id": str(a.token_ids["read"]),
    }
    tokens = {**a.tokens, "job": claimed.json()["token"], **_special_tokens(stack), **made_up_tokens()}
    return Target(stack.url, names, tokens)


def _measure(stack: Stack, case: Case, send: Callable[[], Answer]) -> dict[str, Any]:
    """``case`` sent: its answer, and what changed in the database and the queue."""
    before, queued_before = stack.counts(), _queued(stack)
    t0 = time.perf_counter()
    try:
        answer = send()
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
        "input": case.name,
        "group": case.group,
        "status": answer["status"],
        "error": error,
        "detail": detail[:400],
        "seconds": seconds,
        "sent_bytes": answer.get("sent_bytes"),
        "expected": list(case.statuses),
        "words": list(case.words),
        "refused": answer["status"] is not None and 400 <= answer["status"] < 500,
        "expected_status": answer["status"] in case.statuses,
        "names_the_field": any(w.lower() in detail.lower() for w in case.words),
        "changed": changed,
    }
    if not row["detail"] and answer["body"]:
        row["body"] = answer["body"][:300]
    row["clear"] = row["refused"] and row["names_the_field"]
    row["ok"] = row["refused"] and row["names_the_field"] and not changed
    mark = "ok " if row["ok"] else "NOT"
    say(
        f"  {mark} {answer['status']} {case.name}: {detail[:110] or answer['body'][:110]}"
        + (f" CHANGED {changed}" if changed else "")
    )
    return row


def scenario_bad_inputs(args: argparse.Namespace) -> dict[str, Any]:
    with stack_infra(args, "bad-inputs") as (stack, _cluster, redis_server):
        stack.start_service()
        target = _target(stack, redis_server)
        say("  building the catalogue (the gzip bomb and the 60 MB bundle take a few seconds)")
        ready = [(case, sender(case.request, target)) for case in CASES]
        results = [_measure(stack, case, send) for case, send in ready]
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
