"""The isolation probes, as data: project a's tokens of each role against project b's objects, read tokens on write
routes, worker and job tokens where they do not belong. ``isolation.py`` sends them, in this order, as ``probes``
makes them from ``GROUPS``.

A group is a token (a name in the scenario's token table, ``TOKEN_NAMES``; ``None``: no Authorization header) asked
on its routes. A route's path and body are templates over the scenario's objects (``NAMES``). Where a group names
``twin``, each of its probes has a twin: the same request naming an object that does not exist (those names
changed), whose answer must not differ. A probe's name is its group's ``label`` filled with the token's name
(``{role}``), the route's method, the route as shown (``{route}``, a's routes as ``a/...``; ``{path}``: without its
query; ``{head}``: its first part) and its ``note``.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.reliability.common import PARKED, ROLES, TESTBED, filled
from bench.reliability.suites import small_suite

if TYPE_CHECKING:
    from bench.reliability.stack import Stack

# The projects; a's routes; b's run, its comparison and trace, b's queued job, b's read token's id, a case and kernel
# of b's run, b's job's claim secret; a's run, its trace, a's claimed job, a's admin token's id; an id of nothing, a
# claim secret of no job's.
NAMES = (
    "a",
    "b",
    "own",
    "run",
    "comparison",
    "trace",
    "job",
    "token",
    "case",
    "kernel",
    "secret",
    "a_run",
    "a_trace",
    "a_job",
    "a_admin_token",
    "ghost",
    "wrong_secret",
)
# a's tokens of each role, the worker token of the testbed b's job waits on, another testbed's, a's claimed job's.
TOKEN_NAMES = (*ROLES, "worker", "other worker", "a job")
NOWHERE = "rel-nowhere"  # a project that does not exist
UPLOAD = {"result": {"schema": "attnprof.result/v1"}, "branch": "main", "commit": "x"}


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    body: Any = None  # JSON
    form: bool = False  # a job's multipart form: the small suite and a job's fields
    roles: tuple[str, ...] = ()  # asked with these tokens only (none: with every token of its groups)
    note: str = ""


@dataclass(frozen=True)
class Group:
    kind: str  # cross-project, cross-reference, role, worker, job-token, no-token
    token: str | None
    label: str
    routes: tuple[Route, ...]
    prefix: str = ""  # the routes' paths hang under it
    twin: Mapping[str, str] | None = None  # names as for objects that do not exist (templates over NAMES)


# Project b's routes: asked with a's tokens of each role, each must be answered as for a project that does not exist.
PROJECT_ROUTES = (
    Route("GET", "jobs"),
    Route("POST", "jobs", form=True),
    Route("GET", "runs"),
    Route("GET", "runs/{run}"),
    Route("GET", "runs/{run}/traces/{trace}"),
    Route("PUT", "runs/{run}/traces/{trace}"),
    Route("POST", "results", UPLOAD),
    Route("GET", "trends?case={case}"),
    Route("GET", "trends/kernels?case={case}&kernel={kernel}"),
    Route("GET", "baselines"),
    Route("POST", "baselines/pins", {"run_id": "{run}"}),
    Route("POST", "baselines/exclusions", {"run_id": "{run}", "reason": "intruder"}),
    Route("POST", "baselines/accepted", {"run_id": "{run}"}),
    Route("DELETE", "baselines/pins/{run}"),
    Route("GET", "alerts"),
    Route("GET", "comparisons/{comparison}"),
    Route("GET", "tokens"),
    Route("POST", "tokens", {"role": "admin", "name": "intruder"}),
    Route("DELETE", "tokens/{token}"),
    Route("POST", "tokens/{token}/rotate", {"grace": "1h"}),
    Route("GET", "audit"),
)
# b's job by its id alone.
JOB_ROUTES = (Route("GET", ""), Route("GET", "/comparison"), Route("GET", "/comment"), Route("POST", "/cancel"))
# b's objects named through a's own project: asked with the roles a's route admits (the other roles' refusal there is
# a role probe, below).
WRITERS = ("admin", "submit")
REFERENCE_ROUTES = (
    Route("GET", "runs/{run}"),
    Route("GET", "runs/{run}/traces/{trace}"),
    Route("PUT", "runs/{run}/traces/{trace}", roles=WRITERS),
    Route("GET", "comparisons/{comparison}"),
    Route("POST", "baselines/pins", {"run_id": "{run}"}, roles=("admin",)),
    Route("POST", "baselines/exclusions", {"run_id": "{run}", "reason": "intruder"}, roles=("admin",)),
    Route("POST", "baselines/accepted", {"run_id": "{run}"}, roles=("admin",)),
    Route("DELETE", "tokens/{token}", roles=("admin",)),
    Route("POST", "tokens/{token}/rotate", {"grace": "1h"}, roles=("admin",)),
)
# a's own routes that a read token may not use, and those only an admin token may.
WRITES = (
    Route("POST", "{own}/jobs", form=True),
    Route("POST", "{own}/results", UPLOAD),
    Route("PUT", "{own}/runs/{a_run}/traces/{a_trace}"),
    Route("POST", "/api/v1/jobs/{a_job}/cancel"),
)
ADMIN_ONLY = (
    Route("GET", "{own}/tokens"),
    Route("POST", "{own}/tokens", {"role": "admin"}),
    Route("DELETE", "{own}/tokens/{a_admin_token}"),
    Route("POST", "{own}/tokens/{a_admin_token}/rotate", {"grace": "1h"}),
    Route("GET", "{own}/audit"),
    Route("POST", "{own}/baselines/pins", {"run_id": "{a_run}"}),
    Route("POST", "{own}/baselines/exclusions", {"run_id": "{a_run}", "reason": "x"}),
    Route("POST", "{own}/baselines/accepted", {"run_id": "{a_run}"}),
    Route("DELETE", "{own}/baselines/pins/{a_run}"),
    Route("POST", "/api/v1/github/jobs/{a_job}/resend"),
)
# A worker token on project routes.
WORKER_ON_PROJECT = (
    Route("GET", "{own}/runs"),
    Route("GET", "{own}/jobs"),
    Route("GET", "/api/v1/jobs/{a_job}"),
    Route("POST", "{own}/jobs", form=True),
    Route("POST", "{own}/results", UPLOAD),
    Route("GET", "{own}/tokens"),
    Route("GET", "{own}/audit"),
)
# b's job's worker routes, which need the job token of a claim.
CLAIMED_ROUTES = (
    Route("GET", "bundle"),
    Route("POST", "heartbeat", {"attempt": 1}),
    Route("POST", "result", {"attempt": 1, "result": {}}),
    Route("POST", "failure", {"attempt": 1, "reason": "intruder"}),
    Route("PUT", "traces/x.json.gz?attempt=1"),
)
CLAIM = "/internal/jobs/{job}/claim"


def _cross_tenant(role: str) -> tuple[Group, ...]:
    """a's token of ``role`` on b's routes, b's job, and b's objects named through a's routes."""
    return (
        Group(
            "cross-project",
            role,
            "a's {role} token: {method} b/{path}",
            PROJECT_ROUTES,
            prefix="/api/v1/projects/{b}/",
            twin={"b": NOWHERE},
        ),
        Group(
            "cross-project",
            role,
            "a's {role} token: {method} b's job{route}",
            JOB_ROUTES,
            prefix="/api/v1/jobs/{job}",
            twin={"job": "{ghost}"},
        ),
        Group(
            "cross-project",
            role,
            "a's {role} token: resend b's job feedback",
            (Route("POST", "/api/v1/github/jobs/{job}/resend"),),
            twin={"job": "{ghost}"},
        ),
        Group(
            "cross-reference",
            role,
            "a's {role} token: {method} a/{head} naming b's object",
            REFERENCE_ROUTES,
            prefix="{own}/",
            twin={"run": "{ghost}", "comparison": "{ghost}", "token": "2000000000"},
        ),
    )


def _without_claim(route: Route) -> tuple[Group, ...]:
    """One of b's job's worker routes with a worker token and no claim, then with a's job's token."""
    prefix = "/internal/jobs/{job}/"
    return (
        Group("worker", "worker", "worker token without a claim: {method} b's job {route}", (route,), prefix),
        Group("job-token", "a job", "a's job token on b's job: {method} {route}", (route,), prefix),
    )


GROUPS: tuple[Group, ...] = (
    *(group for role in ROLES for group in _cross_tenant(role)),
    Group("role", "read", "a's {role} token: {method} {route}", (*WRITES, *ADMIN_ONLY)),
    Group("role", "submit", "a's {role} token: {method} {route}", ADMIN_ONLY),
    Group("worker", "worker", "worker token: {method} {route}", WORKER_ON_PROJECT),
    Group(
        "worker",
        "worker",
        "worker token + b's job id, {note}: claim",
        (
            Route("POST", CLAIM, {"attempt": 1, "worker": "intruder"}, note="no secret"),
            Route(
                "POST", CLAIM, {"attempt": 1, "worker": "intruder", "secret": "{wrong_secret}"}, note="a wrong secret"
            ),
        ),
    ),
    Group(
        "worker",
        "other worker",
        "another testbed's worker token + b's job id and its secret: claim",
        (Route("POST", CLAIM, {"attempt": 1, "worker": "intruder", "secret": "{secret}"}),),
    ),
    *(group for route in CLAIMED_ROUTES for group in _without_claim(route)),
    Group(
        "job-token",
        "a job",
        "a job token: {method} {route}",
        (Route("GET", "{own}/runs"), Route("GET", "/api/v1/jobs/{a_job}"), Route("GET", "/internal/testbed")),
    ),
    *(
        Group(
            "role",
            role,
            "a's {role} token: claim b's job with its secret",
            (Route("POST", CLAIM, {"attempt": 1, "worker": "x", "secret": "{secret}"}),),
        )
        for role in ROLES
    ),
    Group(
        "no-token",
        None,
        "no token: {method} {route}",
        (
            Route("GET", "/api/v1/projects/{b}/runs"),
            Route("GET", "/api/v1/jobs/{job}"),
            Route("GET", "/internal/testbed"),
        ),
    ),
)


@dataclass(frozen=True)
class Probe:
    what: str
    kind: str
    token: str | None  # the secret sent, if any
    method: str
    path: str
    body: Any = None
    files: Any = None
    data: Any = None
    twin: tuple[str, Any] | None = None  # the path and body of the same request for an object that does not exist


def tables(
    stack: Stack, b_objects: Mapping[str, str], a_objects: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The values of ``NAMES`` and the secrets of ``TOKEN_NAMES`` for this stack, b's objects (run, comparison,
    trace, job, token, case, kernel, secret) and a's (run, trace, job, job_token)."""
    a, b = stack.tenants["a"], stack.tenants["b"]
    names = {
        "a": a.name,
        "b": b.name,
        "own": f"/api/v1/projects/{a.name}",
        **{key: b_objects[key] for key in ("run", "comparison", "trace", "job", "token", "case", "kernel", "secret")},
        **{f"a_{key}": a_objects[key] for key in ("run", "trace", "job")},
        "a_admin_token": str(a.token_ids["admin"]),
        "ghost": str(uuid.uuid4()),
        "wrong_secret": secrets.token_urlsafe(32),
    }
    tokens = {
        **a.tokens,
        "worker": stack.worker_tokens[PARKED],
        "other worker": stack.worker_tokens[TESTBED],
        "a job": a_objects["job_token"],
    }
    return names, tokens


def probes(names: Mapping[str, str], tokens: Mapping[str, str]) -> list[Probe]:
    """Every probe of ``GROUPS``, in order, with ``names`` filled in and the tokens' secrets."""
    spec_files = {"spec": ("attnprof.toml", small_suite(0.1).encode())}
    job_form = {"testbed": PARKED, "branch": "main", "commit": "intruder1"}
    found = []
    for group in GROUPS:
        twin_names = {**names, **{k: v.format_map(names) for k, v in (group.twin or {}).items()}}
        for route in group.routes:
            if route.roles and group.token not in route.roles:
                continue
            shown = route.path.format_map({**names, "own": "a"})
            what = group.label.format(
                role=group.token,
                method=route.method,
                route=shown,
                path=shown.split("?")[0],
                head=shown.split("/")[0],
                note=route.note,
            )
            path = group.prefix + route.path
            twin = (path.format_map(twin_names), filled(route.body, twin_names)) if group.twin is not None else None
            files, data = (spec_files, job_form) if route.form else (None, None)
            token = tokens[group.token] if group.token else None
            body = filled(route.body, names)
            found.append(Probe(what, group.kind, token, route.method, path.format_map(names), body, files, data, twin))
    return found
