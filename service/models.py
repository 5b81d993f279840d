"""Every table, imported in one place so that Alembic and the tests see the whole schema."""

from service.artifacts.models import Artifact
from service.audit.models import AuditEvent
from service.auth.models import Token
from service.baselines.models import BaselineRule
from service.comparisons.models import Alert, AlertWebhook, Comparison
from service.db import Base
from service.jobs.models import Job, PairedResult
from service.projects.models import Project
from service.projects.retention import ProjectRetention
from service.runs.models import CaseSamples, Run, RunCase, RunKernel, RunTrace
from service.testbeds.models import Testbed, Worker

__all__ = [
    "Alert",
    "AlertWebhook",
    "Artifact",
    "AuditEvent",
    "Base",
    "BaselineRule",
    "CaseSamples",
    "Comparison",
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
