"""The worker API's routes (``/internal/...``), built in one place: the templates the service's router declares, and
the paths a profile worker requests.

Full paths, as ``attnprof.contract.links.API_ROUTES`` holds the public API's: the service's router
(``attnprof.server.jobs.internal``) decorates each route with its template here (``@router.post(routes.CLAIM)``), the
worker (``attnprof.worker.profile.api``) builds each request's path with the function of the same name
(``routes.claim(job_id)``), and the service's check before a body is read (``attnprof.server.preauth``) tells a job's
routes by ``JOBS``. Path parts are percent-quoted, so an id or a name is always one path segment (a job id, a UUID,
and a trace name, letters, digits, ``.``, ``_`` and ``-``, are left as they are). Framework-free (the standard
library only); a test checks these templates against the service's routes.
"""

from __future__ import annotations

from urllib.parse import quote

from attnprof.contract.ids import JobId

PREFIX = "/internal"
OPENAPI = "/internal/openapi.json"
# A worker token opens these (and the claim, with the message's claim secret).
TESTBED = "/internal/testbed"
TESTBED_KEY = "/internal/testbed/key"
ALIVE = "/internal/alive"
CANARY = "/internal/canary"
# A job's routes, under ``JOB``; all but the claim are opened by the attempt's job token.
JOBS = "/internal/jobs"
JOB = "/internal/jobs/{job_id}"
CLAIM = "/internal/jobs/{job_id}/claim"
HEARTBEAT = "/internal/jobs/{job_id}/heartbeat"
BUNDLE = "/internal/jobs/{job_id}/bundle"
RESULT = "/internal/jobs/{job_id}/result"
TRACE = "/internal/jobs/{job_id}/traces/{name}"
FAILURE = "/internal/jobs/{job_id}/failure"

ROUTES: dict[str, str] = {
    "openapi": OPENAPI,
    "testbed": TESTBED,
    "testbed_key": TESTBED_KEY,
    "alive": ALIVE,
    "canary": CANARY,
    "claim": CLAIM,
    "heartbeat": HEARTBEAT,
    "bundle": BUNDLE,
    "result": RESULT,
    "trace": TRACE,
    "failure": FAILURE,
}
"""Every worker route's template by name: the service's router has exactly these."""

JOB_TOKEN_ROUTES = (HEARTBEAT, BUNDLE, RESULT, TRACE, FAILURE)
"""The routes the attempt's job token opens (the claim is the worker token's)."""


def _path(template: str, **parts: str) -> str:
    return template.format(**{name: quote(value, safe="") for name, value in parts.items()})


def testbed() -> str:
    return TESTBED


def testbed_key() -> str:
    return TESTBED_KEY


def alive() -> str:
    return ALIVE


def canary() -> str:
    return CANARY


def claim(job_id: JobId) -> str:
    return _path(CLAIM, job_id=job_id)


def heartbeat(job_id: JobId) -> str:
    return _path(HEARTBEAT, job_id=job_id)


def bundle(job_id: JobId) -> str:
    return _path(BUNDLE, job_id=job_id)


def result(job_id: JobId) -> str:
    return _path(RESULT, job_id=job_id)


def trace(job_id: JobId, name: str) -> str:
    return _path(TRACE, job_id=job_id, name=name)


def failure(job_id: JobId) -> str:
    return _path(FAILURE, job_id=job_id)
