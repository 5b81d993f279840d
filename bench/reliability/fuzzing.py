"""``schemathesis``: generated requests against ``/openapi.json`` and ``/internal/openapi.json`` (a claimed job's
token per case) over HTTP: cases and server errors."""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.reliability.common import PARKED, TESTBED, say
from bench.reliability.stack import Stack, stack_infra
from bench.reliability.suites import small_suite

# Answers that a schema-valid request may still get: the schema cannot say what a valid suite file, result document
# or bundle holds, which cursor the API gave, or that a named object exists (as tests/server/test_schemathesis.py).
PUBLIC_EXPECTED = ["2xx", "400", "401", "403", "404", "409", "413", "422", "429"]


INTERNAL_EXPECTED = ["2xx", "400", "404", "409", "413", "422"]


def _fuzz(
    schema: Any,
    prepare: Callable[[Any, bool], dict[str, str]],
    url: str,
    examples: dict[Any, int],
    budget_s: float,
    label: str,
) -> dict[str, Any]:
    """Every operation of ``schema``, ``examples[mode]`` generated cases per mode, sent over HTTP until ``budget_s``
    is spent; ``prepare(case, positive)`` fills in what exists (ids, a claim) and returns the request's headers.
    Returns the cases sent, the server errors and the other check failures, by operation."""
    started = time.monotonic()
    ops: dict[str, dict[str, Any]] = {}
    totals = {"cases": 0, "server_errors": 0, "check_failures": 0, "skipped_for_time": 0, "transport_errors": 0}
    examples_5xx: list[dict[str, Any]] = []

    def send(case: Any, positive: bool, name: str) -> None:
        if time.monotonic() - started > budget_s:
            totals["skipped_for_time"] += 1
            return
        op = ops.setdefault(name, {"cases": 0, "statuses": {}, "server_errors": 0, "failures": {}})
        try:
            headers = prepare(case, positive)
            response = case.call(base_url=url, headers=headers, timeout=30)
        except Exception as exc:  # a refused connection, a timeout: counted, never hidden
            totals["transport_errors"] += 1
            op["failures"][f"transport: {type(exc).__name__}"] = (
                op["failures"].get(f"transport: {type(exc).__name__}", 0) + 1
            )
            return
        op["cases"] += 1
        totals["cases"] += 1
        code = str(response.status_code)
        op["statuses"][code] = op["statuses"].get(code, 0) + 1
        if response.status_code >= 500:
            op["server_errors"] += 1
            totals["server_errors"] += 1
            if len(examples_5xx) < 10:
                examples_5xx.append(
                    {
                        "operation": name,
                        "status": response.status_code,
                        "body": response.text[:300],
                        "curl": case.as_curl_command(headers=headers)[:600],
                    }
                )
        try:
            case.validate_response(response, headers=headers)
        except BaseExceptionGroup as group:
            for failure in group.exceptions:
                title = getattr(failure, "title", type(failure).__name__)
                op["failures"][title] = op["failures"].get(title, 0) + 1
                totals["check_failures"] += 1
        except AssertionError as failure:
            title = getattr(failure, "title", type(failure).__name__)
            op["failures"][title] = op["failures"].get(title, 0) + 1
            totals["check_failures"] += 1

    from schemathesis import GenerationMode

    for result in schema.get_all_operations():
        operation = result.ok()
        name = f"{operation.method.upper()} {operation.path}"
        for mode, n in examples.items():
            if n <= 0 or time.monotonic() - started > budget_s:
                continue
            run = _generated(
                operation.as_strategy(generation_mode=mode), n, send, mode == GenerationMode.POSITIVE, name
            )
            try:
                run()
            except Exception as exc:  # hypothesis could not generate: the operation shows fewer cases, and why
                ops.setdefault(name, {"cases": 0, "statuses": {}, "server_errors": 0, "failures": {}})
                ops[name]["failures"][f"generation: {type(exc).__name__}: {str(exc)[:120]}"] = 1
        say(
            f"  [{label}] {name}: {ops.get(name, {}).get('cases', 0)} cases, "
            f"{ops.get(name, {}).get('server_errors', 0)} 5xx"
        )
    return {
        **totals,
        "seconds": round(time.monotonic() - started, 1),
        "operations": ops,
        "server_error_examples": examples_5xx,
    }


def _clear_testbed(stack: Stack, testbed: str) -> None:
    """Cancel every open job of ``testbed`` (by its project's submit token): a testbed with no live worker is
    offered one job at a time, so one left offered would hold back the next."""
    tokens = {t.name: t.tokens["submit"] for t in stack.tenants.values()}
    rows = stack.sql(
        "SELECT j.id, p.name FROM jobs j JOIN projects p ON p.id = j.project_id JOIN testbeds t ON t.id = j.testbed_id"
        " WHERE t.name = %s AND j.status IN ('queued', 'running')",
        testbed,
    )
    for job_id, project in rows:
        if project in tokens:
            with stack.http(tokens[project]) as http:
                http.post(f"/api/v1/jobs/{job_id}/cancel")


def _generated(strategy: Any, n: int, send: Callable[[Any, bool, str], None], positive: bool, name: str) -> Any:
    """A hypothesis test sending ``n`` cases of ``strategy`` (derandomized: the same cases each run; no shrinking:
    nothing raises, every answer is counted)."""
    from hypothesis import HealthCheck, Phase, given, settings

    @settings(
        max_examples=n,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        send(case, positive, name)

    return run


def scenario_schemathesis(args: argparse.Namespace) -> dict[str, Any]:
    import schemathesis
    from schemathesis import GenerationMode

    from tests.claiming import claim_secret
    from tests.profiling_support import tar_gz
    from tests.server import documents as docs

    # Trace uploads are raw gzip bytes: the generated bytes are sent as they are.
    schemathesis.serializer.alias("application/gzip", "application/octet-stream")
    with stack_infra(args, "schemathesis") as (stack, _cluster, redis_server):
        stack.start_service()
        a = stack.tenants["a"]
        document = docs.h200()
        with stack.http(a.tokens["admin"]) as http:
            uploaded = http.post(f"/api/v1/projects/{a.name}/results", json=docs.upload_body(document))
            uploaded.raise_for_status()
        # On a testbed of its own: with no live worker, a testbed is offered one job at a time (the dispatcher),
        # and the worker routes' cases below need each of theirs offered.
        job_id = stack.submit(small_suite(0.1), testbed=TESTBED)
        case0 = document["cases"][0]
        known_path = {
            "project": a.name,
            "run_id": uploaded.json()["run_id"],
            "comparison_id": uploaded.json()["comparison_id"],
            "job_id": job_id,
            "name": case0["trace"],
        }
        known_query = {"case": case0["id"], "kernel": case0["kernels"][0]["key"]}
        # A read token to revoke in place of the admin token the run is authenticated with.
        spare = a.token_ids["read"]

        def public_prepare(case: Any, positive: bool) -> dict[str, str]:
            if case.path_parameters is not None and "project" in case.path_parameters and positive:
                case.path_parameters["project"] = a.name
            if positive:
                for params, known in ((case.path_parameters, known_path), (case.query, known_query)):
                    for key in set(params or ()) & set(known):
                        params[key] = known[key]
            if case.path_parameters and str(case.path_parameters.get("token_id")) == str(a.token_ids["admin"]):
                case.path_parameters["token_id"] = spare
            return {"Authorization": f"Bearer {a.tokens['admin']}"}

        config = schemathesis.Config.from_dict(
            {
                "parameters": {"path.project": a.name},
                "checks": {"positive_data_acceptance": {"expected-statuses": PUBLIC_EXPECTED}},
            }
        )
        public = schemathesis.openapi.from_url(f"{stack.url}/openapi.json", config=config)
        budget = args.schemathesis_s
        modes = {GenerationMode.POSITIVE: args.st_examples, GenerationMode.NEGATIVE: max(1, args.st_examples // 2)}
        say(f"  public API: {budget * 0.7:.0f} s at most")
        found_public = _fuzz(public, public_prepare, stack.url, modes, budget * 0.7, "public")

        worker_token = stack.worker_tokens[PARKED]
        submit_token = stack.tenants["b"].tokens["submit"]
        _clear_testbed(stack, PARKED)

        made: list[str] = []

        def queued_job() -> tuple[str, str]:
            """A new job (its id, the claim secret of its message); the earlier cases' jobs are cancelled first, so
            that this one is offered (as tests/server/test_schemathesis.py does)."""
            with stack.http(submit_token) as http:
                for earlier in made:
                    http.post(f"/api/v1/jobs/{earlier}/cancel")  # 409 once it ended
                made.clear()
                r = http.post(
                    f"/api/v1/projects/{stack.tenants['b'].name}/jobs",
                    files={
                        "spec": ("attnprof.toml", small_suite(0.1).encode()),
                        "bundle": ("src.tar.gz", tar_gz({"pkg/m.py": b"x = 1\n"})),
                    },
                    data={"testbed": PARKED, "branch": "main", "commit": uuid.uuid4().hex[:12]},
                )
            r.raise_for_status()
            new_id = str(r.json()["id"])
            made.append(new_id)
            secret = claim_secret(stack.broker_url, PARKED, new_id)
            redis_client = redis_server.client()
            try:
                redis_client.delete(f"profile.{PARKED}", "analysis")
            finally:
                redis_client.close()
            return new_id, secret

        def internal_prepare(case: Any, positive: bool) -> dict[str, str]:
            token = worker_token
            if "{job_id}" in case.operation.path:
                new_id, secret = queued_job()
                if case.operation.path.endswith("/claim"):
                    if positive and isinstance(case.body, dict):
                        case.body.update(secret=secret, attempt=1)
                else:
                    with stack.http(worker_token) as http:
                        claimed = http.post(
                            f"/internal/jobs/{new_id}/claim", json={"attempt": 1, "worker": "fuzz", "secret": secret}
                        )
                    claimed.raise_for_status()
                    token = claimed.json()["token"]
                if positive:
                    case.path_parameters["job_id"] = new_id
            return {"Authorization": f"Bearer {token}"}

        internal_config = schemathesis.Config.from_dict(
            {"checks": {"positive_data_acceptance": {"expected-statuses": INTERNAL_EXPECTED}}}
        )
        internal = schemathesis.openapi.from_url(f"{stack.url}/internal/openapi.json", config=internal_config)
        left = max(30.0, budget - found_public["seconds"])
        say(f"  worker routes: {left:.0f} s at most")
        found_internal = _fuzz(internal, internal_prepare, stack.url, modes, left, "internal")
        service_log = stack.procs["service"].text()
        return {
            "public": found_public,
            "internal": found_internal,
            "examples_per_operation": {m.value: n for m, n in modes.items()},
            "budget_s": budget,
            "server_tracebacks": service_log.count("Traceback"),
            "ok": found_public["server_errors"] == 0 and found_internal["server_errors"] == 0,
        }
