"""The worker API's routes are built in one place (``attnprof.contract.routes``): the service's router declares exactly
its templates, answers each with the contract model the worker validates the answer with, the worker's paths fill
them in, and the check before a body is read tells a job's routes by them."""

from __future__ import annotations

import uuid

from fastapi.routing import APIRoute

from attnprof.contract import routes
from attnprof.contract.ids import JobId
from attnprof.contract.worker_api import (
    AliveAnswer,
    ClaimAnswer,
    HeartbeatAnswer,
    WorkerDeviceAnswer,
    WorkerResultAnswer,
    WorkerTestbed,
)
from attnprof.server import preauth
from attnprof.server.jobs.internal import router


def _routes() -> dict[tuple[str, str], APIRoute]:
    return {(m, r.path): r for r in router.routes if isinstance(r, APIRoute) for m in r.methods}


def test_the_router_declares_exactly_the_contracts_routes() -> None:
    assert {path for _, path in _routes()} == set(routes.ROUTES.values())
    assert all(path.startswith(routes.PREFIX + "/") for path in routes.ROUTES.values())
    assert all(path.startswith(routes.JOB + "/") for path in (routes.CLAIM, *routes.JOB_TOKEN_ROUTES))


def test_each_answer_the_worker_reads_is_the_routes_contract_model() -> None:
    # attnprof.worker.profile.api validates each of these answers with the same model.
    read = {
        ("GET", routes.TESTBED): WorkerTestbed,
        ("POST", routes.TESTBED_KEY): WorkerDeviceAnswer,
        ("POST", routes.ALIVE): AliveAnswer,
        ("POST", routes.CLAIM): ClaimAnswer,
        ("POST", routes.HEARTBEAT): HeartbeatAnswer,
        ("POST", routes.RESULT): WorkerResultAnswer,
    }
    declared = _routes()
    assert {key: declared[key].response_model for key in read} == read


def test_the_workers_paths_are_the_ones_it_always_sent() -> None:
    job_id = JobId(str(uuid.uuid4()))
    assert routes.testbed() == "/internal/testbed"
    assert routes.testbed_key() == "/internal/testbed/key"
    assert routes.alive() == "/internal/alive"
    for name in ("claim", "heartbeat", "bundle", "result", "failure"):
        assert getattr(routes, name)(job_id) == f"/internal/jobs/{job_id}/{name}"
    assert routes.trace(job_id, "case-1.pt.trace.json.gz") == f"/internal/jobs/{job_id}/traces/case-1.pt.trace.json.gz"
    # A part is always one path segment.
    assert routes.trace(JobId("a/b"), "x?y") == "/internal/jobs/a%2Fb/traces/x%3Fy"


def test_the_body_gate_asks_a_job_token_on_the_job_token_routes_only() -> None:
    job_id = str(uuid.uuid4())

    def job_of(path: str) -> str | None:
        found = preauth._JOB_ROUTE.fullmatch(path)
        return found["job_id"] if found is not None and found["rest"] != preauth._CLAIM else None

    for template in routes.JOB_TOKEN_ROUTES:
        assert job_of(template.format(job_id=job_id, name="t.json.gz")) == job_id, template
    for template in (routes.CLAIM, routes.TESTBED, routes.TESTBED_KEY, routes.ALIVE, routes.OPENAPI):
        assert job_of(template.format(job_id=job_id)) is None, template
