"""Every table, imported in one place so that Alembic and the tests see the whole schema."""

from attnprof.server.artifacts.models import Artifact
from attnprof.server.audit.models import AuditEvent
from attnprof.server.auth.models import Token
from attnprof.server.baselines.models import BaselineRule
from attnprof.server.bisections.models import Bisection, BisectionProbe
from attnprof.server.comparisons.models import Alert, AlertWebhook, Comparison
from attnprof.server.db import Base
from attnprof.server.jobs.models import Job, PairedResult
from attnprof.server.projects.models import Project
from attnprof.server.projects.retention import ProjectRetention
from attnprof.server.runs.models import CaseSamples, Run, RunCase, RunKernel, RunTrace
from attnprof.server.testbeds.models import Canary, Host, HostNotice, Testbed, Worker

__all__ = [
    "Alert",
    "AlertWebhook",
    "Artifact",
    "AuditEvent",
    "Base",
    "BaselineRule",
    "Bisection",
    "BisectionProbe",
    "Canary",
    "CaseSamples",
    "Comparison",
    "Host",
    "HostNotice",
    "Job",
    "PairedResult",
    "Project",
    "ProjectRetention",
    "Run",
    "RunCase",
    "RunKernel",
    "RunTrace",
    "Testbed",
    "Token",
    "Worker",
]
