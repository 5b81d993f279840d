"""Every router of the API, in the order they appear in the OpenAPI document."""

from fastapi import APIRouter

from attnprof.server.auth.audit_router import router as audit
from attnprof.server.auth.router import router as tokens
from attnprof.server.auth.router import whoami_router as whoami
from attnprof.server.baselines.router import router as baselines
from attnprof.server.bisections.router import router as bisections
from attnprof.server.comparisons.router import router as alerts
from attnprof.server.github.router import router as github
from attnprof.server.health.router import router as health
from attnprof.server.hosts.router import router as hosts
from attnprof.server.jobs.internal import router as internal
from attnprof.server.jobs.router import router as jobs
from attnprof.server.results.router import router as results
from attnprof.server.retention.router import router as retention
from attnprof.server.runs.router import router as runs
from attnprof.server.trends.router import router as trends

ROUTERS: list[APIRouter] = [
    results,
    jobs,
    runs,
    trends,
    baselines,
    alerts,
    bisections,
    hosts,
    retention,
    tokens,
    audit,
    whoami,
    github,
    internal,
    health,
]
