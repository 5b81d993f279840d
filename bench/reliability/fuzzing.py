"""``schemathesis``: generated requests against ``/openapi.json`` and ``/internal/openapi.json`` (a claimed job's
token per case) over HTTP: cases and server errors."""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.reliability.common import PARKED, TESTBED, say
from bench.reliability.servers import OwnRedis
from bench.reliability.stack import Stack, Tenant, stack_infra
from bench.reliability.suites import small_suite

# Answers that a schema-valid request may still get: the schema cannot say what a valid suite file, result document
# or bundle holds, which cursor the API gave, or that a named object exists (as tests/server/test_schemathesis.py).
PUBLIC_EXPECTED = ["2xx", "400", "401", "403", "404", "409", "413", "422", "429"]
INTERNAL_EXPECTED = ["2xx", "400", "404", "409", "413", "422"]


def _new_op() -> dict[str, Any]:
    return {"cases": 0, "statuses": {}, "server_errors": 0, "failures": {}}


@dataclass
class _Tally:
    """One document's cases sent over HTTP until ``budget_s`` is spent, ``prepare(case, positive)`` filling in what
    exists (ids, a claim) and giving the request's headers: the answers by operation and in all, the first server
    errors."""

    url: str
    prepare: Callable[[Any, bool], dict[str, str]]
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    totals: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("cases", "server_errors", "check_failures", "skipped_for_time", "transport_errors"), 0
        )
    )
    examples_5xx: list[dict[str, Any]] = field(default_factory=list)

    def over(self) -> bool:
        return time.monotonic() - self.started > self.budget_s

    def send(self, case: Any, positive: bool, name: str) -> None:
        if self.over():
            self.totals["skipped_for_time"] += 1
            return
        op = self.ops.setdefault(name, _new_op())
        try:
            headers = self.prepare(case, positive)
            response = case.call(base_url=self.url, headers=headers, timeout=30)
        except Exception as exc:  # a refused connection, a timeout: counted, never hidden
            self.totals["transport_errors"] += 1
            op["failures"][f"transport: {type(exc).__name__}"] = (
                op["failures"].get(f"transport: {type(exc).__name__}", 0) + 1
            )
            return
        op["cases"] += 1
        self.totals["cases"] += 1
        code = str(response.status_code)
        op["statuses"][code] = op["statuses"].get(code, 0) + 1
        if response.status_code >= 500:
            op["server_errors"] += 1
            self.totals["server_errors"] += 1
            if len(self.examples_5xx) < 10:
                self.examples_5xx.append(
                    {
                        "operation": name,
                        "status": response.status_code,
                        "body": response.text[:300],
                        "curl": case.as_curl_command(headers=headers)[:600],
                    }
                )
        self._check(case, response, headers, op)

    def _check(self, case: Any, response: Any, headers: dict[str, str], op: dict[str, Any]) -> None:
        """Schemathesis' checks on the answer: each failure counted by its title."""
        try:
            case.validate_response(response, headers=headers)
        except BaseExceptionGroup as group:
            failures = list(group.exceptions)
        except AssertionError as failed:
            failures = [failed]
        else:
            return
        for failure in failures:
            title = getattr(failure, "title", type(failure).__name__)
            op["failures"][title] = op["failures"].get(title, 0) + 1
            self.totals["check_failures"] += 1


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
    from schemathesis import GenerationMode

    tally = _Tally(url, prepare, budget_s)
    for result in schema.get_all_operations():
        operation = result.ok()
        name = f"{operation.method.upper()} {operation.path}"
        for mode, n in examples.items():
            if n <= 0 or tally.over():
                continue
            run = _generated(
                operation.as_strategy(generation_mode=mode), n, tally.send, mode == GenerationMode.POSITIVE, name
            )
            try:
                run()
            except Exception as exc:  # hypothesis could not generate: the operation shows fewer cases, and why
                failures = tally.ops.setdefault(name, _new_op())["failures"]
                failures[f"generation: {type(exc).__name__}: {str(exc)[:120]}"] = 1
        found = tally.ops.get(name, {})
        say(f"  [{label}] {name}: {found.get('cases', 0)} cases, {found.get('server_errors', 0)} 5xx")
    return {
        **tally.totals,
        "seconds": round(time.monotonic() - tally.started, 1),
        "operations": tally.ops,
        "server_error_examples": tally.examples_5xx,
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


@dataclass
class _PublicCases:
    """The public API's cases as the admin token of project a sends them: positive cases name what exists (a's
    uploaded run, its comparison, a queued job, a trace, a case and kernel), and a read token is revoked in place of
    the admin token the run is authenticated with."""

    a: Tenant
    known_path: dict[str, Any]
    known_query: dict[str, Any]

    def prepare(self, case: Any, positive: bool) -> dict[str, str]:
        if case.path_parameters is not None and "project" in case.path_parameters and positive:
            case.path_parameters["project"] = self.a.name
        if positive:
            for params, known in ((case.path_parameters, self.known_path), (case.query, self.known_query)):
                for key in set(params or ()) & set(known):
                    params[key] = known[key]
        if case.path_parameters and str(case.path_parameters.get("token_id")) == str(self.a.token_ids["admin"]):
            case.path_parameters["token_id"] = self.a.token_ids["read"]
        return {"Authorization": f"Bearer {self.a.tokens['admin']}"}


def _fuzz_public(stack: Stack, modes: dict[Any, int], budget_s: float) -> dict[str, Any]:
    import schemathesis

    from tests.server import documents as docs

    a = stack.tenants["a"]
    document = docs.h200()
    with stack.http(a.tokens["admin"]) as http:
        uploaded = http.post(f"/api/v1/projects/{a.name}/results", json=docs.upload_body(document))
        uploaded.raise_for_status()
    # On a testbed of its own: with no live worker, a testbed is offered one job at a time (the dispatcher),
    # and the worker routes' cases need each of theirs offered.
    job_id = stack.submit(small_suite(0.1), testbed=TESTBED)
    case0 = document["cases"][0]
    known_path = {
        "project": a.name,
        "run_id": uploaded.json()["run_id"],
        "comparison_id": uploaded.json()["comparison_id"],
        "job_id": job_id,
        "name": case0["trace"],
    }
    cases = _PublicCases(a, known_path, {"case": case0["id"], "kernel": case0["kernels"][0]["key"]})
    config = schemathesis.Config.from_dict(
        {
            "parameters": {"path.project": a.name},
            "checks": {"positive_data_acceptance": {"expected-statuses": PUBLIC_EXPECTED}},
        }
    )
    public = schemathesis.openapi.from_url(f"{stack.url}/openapi.json", config=config)
    say(f"  public API: {budget_s:.0f} s at most")
    return _fuzz(public, cases.prepare, stack.url, modes, budget_s, "public")


@dataclass
class _WorkerCases:
    """The worker routes' cases: the worker token for ``/internal/testbed`` and the claim (positive cases carry a
    fresh job's claim secret); for the job routes, a fresh job is claimed and its job token used."""

    stack: Stack
    redis_server: OwnRedis
    made: list[str] = field(default_factory=list)

    def queued_job(self) -> tuple[str, str]:
        """A new job of project b (its id, the claim secret of its message); the earlier cases' jobs are cancelled
        first, so that this one is offered (as tests/server/test_schemathesis.py does)."""
        from tests.claiming import claim_secret
        from tests.profiling_support import tar_gz

        stack = self.stack
        with stack.http(stack.tenants["b"].tokens["submit"]) as http:
            for earlier in self.made:
                http.post(f"/api/v1/jobs/{earlier}/cancel")  # 409 once it ended
            self.made.clear()
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
        self.made.append(new_id)
        secret = claim_secret(stack.broker_url, PARKED, new_id)
        redis_client = self.redis_server.client()
        try:
            redis_client.delete(f"profile.{PARKED}", "analysis")
        finally:
            redis_client.close()
        return new_id, secret

    def prepare(self, case: Any, positive: bool) -> dict[str, str]:
        worker_token = self.stack.worker_tokens[PARKED]
        token = worker_token
        if "{job_id}" in case.operation.path:
            new_id, secret = self.queued_job()
            if case.operation.path.endswith("/claim"):
                if positive and isinstance(case.body, dict):
                    case.body.update(secret=secret, attempt=1)
            else:
                with self.stack.http(worker_token) as http:
                    claimed = http.post(
                        f"/internal/jobs/{new_id}/claim", json={"attempt": 1, "worker": "fuzz", "secret": secret}
                    )
                claimed.raise_for_status()
                token = claimed.json()["token"]
            if positive:
                case.path_parameters["job_id"] = new_id
        return {"Authorization": f"Bearer {token}"}


def _fuzz_internal(stack: Stack, redis_server: OwnRedis, modes: dict[Any, int], budget_s: float) -> dict[str, Any]:
    import schemathesis

    cases = _WorkerCases(stack, redis_server)
    config = schemathesis.Config.from_dict(
        {"checks": {"positive_data_acceptance": {"expected-statuses": INTERNAL_EXPECTED}}}
    )
    internal = schemathesis.openapi.from_url(f"{stack.url}/internal/openapi.json", config=config)
    say(f"  worker routes: {budget_s:.0f} s at most")
    return _fuzz(internal, cases.prepare, stack.url, modes, budget_s, "internal")


def scenario_schemathesis(args: argparse.Namespace) -> dict[str, Any]:
    import schemathesis
    from schemathesis import GenerationMode

    # Trace uploads are raw gzip bytes: the generated bytes are sent as they are.
    schemathesis.serializer.alias("application/gzip", "application/octet-stream")
    with stack_infra(args, "schemathesis") as (stack, _cluster, redis_server):
        stack.start_service()
        budget = args.schemathesis_s
        modes = {GenerationMode.POSITIVE: args.st_examples, GenerationMode.NEGATIVE: max(1, args.st_examples // 2)}
        found_public = _fuzz_public(stack, modes, budget * 0.7)
        _clear_testbed(stack, PARKED)
        found_internal = _fuzz_internal(stack, redis_server, modes, max(30.0, budget - found_public["seconds"]))
        service_log = stack.procs["service"].text()
        return {
            "public": found_public,
            "internal": found_internal,
            "examples_per_operation": {m.value: n for m, n in modes.items()},
            "budget_s": budget,
            "server_tracebacks": service_log.count("Traceback"),
            "ok": found_public["server_errors"] == 0 and found_internal["server_errors"] == 0,
        }
