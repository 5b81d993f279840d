"""Every router of the API, in the order they appear in the OpenAPI document."""

from fastapi import APIRouter

from service.auth.audit_router import router as audit
from service.auth.router import router as tokens
from service.auth.router import whoami_router as whoami
from service.baselines.router import router as baselines
from service.comparisons.router import router as alerts
from service.github.router import router as github
from service.health.router import router as health
from service.jobs.internal import router as internal
from service.jobs.router import router as jobs
from service.results.router import router as results
from service.retention.router import router as retention
from service.runs.router import router as runs
from service.trends.router import router as trends

ROUTERS: list[APIRouter] = [
    results,
    jobs,
    runs,
    trends,
    baselines,
    alerts,
    retention,
    tokens,
    audit,
    whoami,
    github,
    internal,
    health,
]
