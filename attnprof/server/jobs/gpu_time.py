"""GPU time (docs/service.md, "GPU time"): what each job held its device for (``Job.gpu_seconds``, charged by
``attempts.charge`` when an attempt ends), summed per project and testbed per day, and the optional per-project daily
quota (``Project.gpu_seconds_per_day``, set by the service's admin) past which a project's jobs wait for the next
UTC day: the dispatcher skips the project (``over_quota``), nothing is dropped, and a waiting job's notice says why.

A job's time counts on the UTC day its last attempt started; a running attempt counts up to now."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from attnprof.server.jobs.models import Job
from attnprof.server.projects.models import Project
from attnprof.server.testbeds.models import Testbed


def day_start(now: datetime) -> datetime:
    """Midnight (UTC) of ``now``'s day."""
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def used_since(session: Session, *, project_id: int, since: datetime, now: datetime) -> float:
    """Device seconds the project's jobs held since ``since``: ended attempts, and running ones up to ``now``."""
    ended = session.scalar(
        select(func.coalesce(func.sum(Job.gpu_seconds), 0.0)).where(
            Job.project_id == project_id, Job.started_at >= since
        )
    )
    running = session.scalars(
        select(Job.started_at).where(Job.project_id == project_id, Job.status == "running", Job.started_at >= since)
    )
    return float(ended or 0.0) + sum(max(0.0, (now - s).total_seconds()) for s in running if s is not None)


def over_quota(session: Session, project_ids: Iterable[int], *, now: datetime) -> dict[int, tuple[float, float]]:
    """The projects among ``project_ids`` that used their daily quota today: {project: (used, quota)}."""
    ids = list(project_ids)
    if not ids:
        return {}
    quotas = session.execute(
        select(Project.id, Project.gpu_seconds_per_day).where(
            Project.id.in_(ids), Project.gpu_seconds_per_day.is_not(None)
        )
    )
    out: dict[int, tuple[float, float]] = {}
    since = day_start(now)
    for project_id, quota in quotas:
        assert quota is not None
        used = used_since(session, project_id=project_id, since=since, now=now)
        if used >= quota:
            out[project_id] = (used, quota)
    return out


def quota_notice(session: Session, job: Job, *, now: datetime) -> str | None:
    """Why a queued job waits when its project used its quota today; None otherwise."""
    found = over_quota(session, [job.project_id], now=now).get(job.project_id)
    if found is None:
        return None
    used, quota = found
    resume = day_start(now) + timedelta(days=1)
    return (
        f"the project used its GPU quota for the day ({used:.0f} s of {quota:.0f} s since 00:00 UTC): "
        f"its jobs wait, and start from {resume:%Y-%m-%d %H:%M} UTC"
    )


@dataclass(frozen=True)
class DayUsage:
    day: str
    testbed: str
    jobs: int
    gpu_seconds: float
    paired_seconds: float
    bisection_seconds: float


def usage(session: Session, *, project_id: int, since: datetime) -> list[DayUsage]:
    """The project's GPU time per UTC day and testbed since ``since``, newest day first."""
    day = func.date(Job.started_at)
    q = (
        select(
            day,
            Testbed.name,
            func.count(),
            func.coalesce(func.sum(Job.gpu_seconds), 0.0),
            func.coalesce(func.sum(case((Job.paired, Job.gpu_seconds), else_=0.0)), 0.0),
            func.coalesce(func.sum(case((Job.background, Job.gpu_seconds), else_=0.0)), 0.0),
        )
        .join(Testbed, Testbed.id == Job.testbed_id)
        .where(Job.project_id == project_id, Job.started_at >= since)
        .group_by(day, Testbed.name)
        .order_by(day.desc(), Testbed.name)
    )
    return [
        DayUsage(str(d), str(t), int(n), round(float(s), 3), round(float(p), 3), round(float(b), 3))
        for d, t, n, s, p, b in session.execute(q)
    ]
