"""The isolation probes: project a's tokens of each role against project b's objects, read tokens on write routes,
worker and job tokens where they do not belong."""

from __future__ import annotations

import json
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from bench.reliability.common import PARKED, ROLES, TESTBED
from bench.reliability.stack import Stack
from bench.reliability.suites import small_suite


@dataclass
class Probe:
    what: str
    kind: str  # cross-project, cross-reference, role, worker, job-token, no-token
    token: str | None
    method: str
    path: str
    body: Any = None
    files: Any = None
    data: Any = None
    twin: str | None = None  # the same request for an object that does not exist: the answer must not differ


def probes(stack: Stack, bo: dict[str, str], a_objects: dict[str, str]) -> list[Probe]:
    a, b = stack.tenants["a"], stack.tenants["b"]
    body: Any  # a request's JSON body, its files and form fields: each loop below binds them
    files: Any
    data: Any
    nowhere = "rel-nowhere"
    ghost = str(uuid.uuid4())
    spec_files = {"spec": ("attnprof.toml", small_suite(0.1).encode())}
    job_form = {"testbed": PARKED, "branch": "main", "commit": "intruder1"}
    upload = {"result": {"schema": "attnprof.result/v1"}, "branch": "main", "commit": "x"}
    out: list[Probe] = []
    # Project b's routes with project a's tokens of each role: each as for a project that does not exist.
    project_routes: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "jobs", {}),
        ("POST", "jobs", {"files": spec_files, "data": job_form}),
        ("GET", "runs", {}),
        ("GET", f"runs/{bo['run']}", {}),
        ("GET", f"runs/{bo['run']}/traces/{bo['trace']}", {}),
        ("PUT", f"runs/{bo['run']}/traces/{bo['trace']}", {}),
        ("POST", "results", {"body": upload}),
        ("GET", f"trends?case={bo['case']}", {}),
        ("GET", f"trends/kernels?case={bo['case']}&kernel={bo['kernel']}", {}),
        ("GET", "baselines", {}),
        ("POST", "baselines/pins", {"body": {"run_id": bo["run"]}}),
        ("POST", "baselines/exclusions", {"body": {"run_id": bo["run"], "reason": "intruder"}}),
        ("POST", "baselines/accepted", {"body": {"run_id": bo["run"]}}),
        ("DELETE", f"baselines/pins/{bo['run']}", {}),
        ("GET", "alerts", {}),
        ("GET", f"comparisons/{bo['comparison']}", {}),
        ("GET", "tokens", {}),
        ("POST", "tokens", {"body": {"role": "admin", "name": "intruder"}}),
        ("DELETE", f"tokens/{bo['token']}", {}),
        ("POST", f"tokens/{bo['token']}/rotate", {"body": {"grace": "1h"}}),
        ("GET", "audit", {}),
    ]
    for role in ROLES:
        for method, route, kw in project_routes:
            out.append(
                Probe(
                    f"a's {role} token: {method} b/{route.split('?')[0]}",
                    "cross-project",
                    a.tokens[role],
                    method,
                    f"/api/v1/projects/{b.name}/{route}",
                    kw.get("body"),
                    kw.get("files"),
                    kw.get("data"),
                    twin=f"/api/v1/projects/{nowhere}/{route}",
                )
            )
        # b's jobs by id alone
        for method, route in (("GET", ""), ("GET", "/comparison"), ("GET", "/comment"), ("POST", "/cancel")):
            out.append(
                Probe(
                    f"a's {role} token: {method} b's job{route}",
                    "cross-project",
                    a.tokens[role],
                    method,
                    f"/api/v1/jobs/{bo['job']}{route}",
                    twin=f"/api/v1/jobs/{ghost}{route}",
                )
            )
        out.append(
            Probe(
                f"a's {role} token: resend b's job feedback",
                "cross-project",
                a.tokens[role],
                "POST",
                f"/api/v1/github/jobs/{bo['job']}/resend",
                twin=f"/api/v1/github/jobs/{ghost}/resend",
            )
        )
        # b's objects named through a's own project
        for method, route, body in (
            ("GET", f"runs/{bo['run']}", None),
            ("GET", f"runs/{bo['run']}/traces/{bo['trace']}", None),
            ("PUT", f"runs/{bo['run']}/traces/{bo['trace']}", None),
            ("GET", f"comparisons/{bo['comparison']}", None),
            ("POST", "baselines/pins", {"run_id": bo["run"]}),
            ("POST", "baselines/exclusions", {"run_id": bo["run"], "reason": "intruder"}),
            ("POST", "baselines/accepted", {"run_id": bo["run"]}),
            ("DELETE", f"tokens/{bo['token']}", None),
            ("POST", f"tokens/{bo['token']}/rotate", {"grace": "1h"}),
        ):
            twin_route = (
                route.replace(bo["run"], ghost)
                .replace(bo["comparison"], ghost)
                .replace(f"tokens/{bo['token']}", "tokens/2000000000")
            )
            twin_body = {k: (ghost if v == bo["run"] else v) for k, v in (body or {}).items()} or None
            if (role == "read" and method != "GET") or (role == "submit" and route.startswith(("baselines", "tokens"))):
                continue  # a role refusal at a's own route: counted below
            out.append(
                Probe(
                    f"a's {role} token: {method} a/{route.split('/')[0]} naming b's object",
                    "cross-reference",
                    a.tokens[role],
                    method,
                    f"/api/v1/projects/{a.name}/{route}",
                    body,
                    twin=f"/api/v1/projects/{a.name}/{twin_route}" + ("|" + json.dumps(twin_body) if twin_body else ""),
                )
            )
    # Roles on a's own project.
    own = f"/api/v1/projects/{a.name}"
    writes = [
        ("POST", f"{own}/jobs", None, spec_files, job_form),
        ("POST", f"{own}/results", upload, None, None),
        ("PUT", f"{own}/runs/{a_objects['run']}/traces/{a_objects['trace']}", None, None, None),
        ("POST", f"/api/v1/jobs/{a_objects['job']}/cancel", None, None, None),
    ]
    admin_only = [
        ("GET", f"{own}/tokens", None, None, None),
        ("POST", f"{own}/tokens", {"role": "admin"}, None, None),
        ("DELETE", f"{own}/tokens/{a.token_ids['admin']}", None, None, None),
        ("POST", f"{own}/tokens/{a.token_ids['admin']}/rotate", {"grace": "1h"}, None, None),
        ("GET", f"{own}/audit", None, None, None),
        ("POST", f"{own}/baselines/pins", {"run_id": a_objects["run"]}, None, None),
        ("POST", f"{own}/baselines/exclusions", {"run_id": a_objects["run"], "reason": "x"}, None, None),
        ("POST", f"{own}/baselines/accepted", {"run_id": a_objects["run"]}, None, None),
        ("DELETE", f"{own}/baselines/pins/{a_objects['run']}", None, None, None),
        ("POST", f"/api/v1/github/jobs/{a_objects['job']}/resend", None, None, None),
    ]
    for method, path, body, files, data in [*writes, *admin_only]:
        out.append(
            Probe(
                f"a's read token: {method} {path.replace(own, 'a')}",
                "role",
                a.tokens["read"],
                method,
                path,
                body,
                files,
                data,
            )
        )
    for method, path, body, files, data in admin_only:
        out.append(
            Probe(
                f"a's submit token: {method} {path.replace(own, 'a')}",
                "role",
                a.tokens["submit"],
                method,
                path,
                body,
                files,
                data,
            )
        )
    # Worker tokens on project routes, and on job routes without a claim.
    worker = stack.worker_tokens[PARKED]
    for method, path, body, files, data in [
        ("GET", f"{own}/runs", None, None, None),
        ("GET", f"{own}/jobs", None, None, None),
        ("GET", f"/api/v1/jobs/{a_objects['job']}", None, None, None),
        ("POST", f"{own}/jobs", None, spec_files, job_form),
        ("POST", f"{own}/results", upload, None, None),
        ("GET", f"{own}/tokens", None, None, None),
        ("GET", f"{own}/audit", None, None, None),
    ]:
        out.append(
            Probe(f"worker token: {method} {path.replace(own, 'a')}", "worker", worker, method, path, body, files, data)
        )
    job = bo["job"]
    for what, body in (
        ("no secret", {"attempt": 1, "worker": "intruder"}),
        ("a wrong secret", {"attempt": 1, "worker": "intruder", "secret": secrets.token_urlsafe(32)}),
    ):
        out.append(
            Probe(
                f"worker token + b's job id, {what}: claim",
                "worker",
                worker,
                "POST",
                f"/internal/jobs/{job}/claim",
                body,
            )
        )
    out.append(
        Probe(
            "another testbed's worker token + b's job id and its secret: claim",
            "worker",
            stack.worker_tokens[TESTBED],
            "POST",
            f"/internal/jobs/{job}/claim",
            {"attempt": 1, "worker": "intruder", "secret": bo["secret"]},
        )
    )
    for method, route, body in (
        ("GET", "bundle", None),
        ("POST", "heartbeat", {"attempt": 1}),
        ("POST", "result", {"attempt": 1, "result": {}}),
        ("POST", "failure", {"attempt": 1, "reason": "intruder"}),
        ("PUT", "traces/x.json.gz?attempt=1", None),
    ):
        out.append(
            Probe(
                f"worker token without a claim: {method} b's job {route}",
                "worker",
                worker,
                method,
                f"/internal/jobs/{job}/{route}",
                body,
            )
        )
        out.append(
            Probe(
                f"a's job token on b's job: {method} {route}",
                "job-token",
                a_objects["job_token"],
                method,
                f"/internal/jobs/{job}/{route}",
                body,
            )
        )
    for method, path in (
        ("GET", f"{own}/runs"),
        ("GET", f"/api/v1/jobs/{a_objects['job']}"),
        ("GET", "/internal/testbed"),
    ):
        out.append(
            Probe(f"a job token: {method} {path.replace(own, 'a')}", "job-token", a_objects["job_token"], method, path)
        )
    for role in ROLES:
        out.append(
            Probe(
                f"a's {role} token: claim b's job with its secret",
                "role",
                a.tokens[role],
                "POST",
                f"/internal/jobs/{job}/claim",
                {"attempt": 1, "worker": "x", "secret": bo["secret"]},
            )
        )
    for method, path in (
        ("GET", f"/api/v1/projects/{b.name}/runs"),
        ("GET", f"/api/v1/jobs/{job}"),
        ("GET", "/internal/testbed"),
    ):
        out.append(Probe(f"no token: {method} {path}", "no-token", None, method, path))
    return out
