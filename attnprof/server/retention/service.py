"""Retention of stored artifacts: a project's settings (read, changed, reset to the service's defaults) and the
sweep that enforces them.

The sweep unlinks, per project, the traces of runs older than ``trace_days`` and the bundles of finished jobs last
changed longer ago than ``bundle_days`` (at most ``batch`` of each per project and per sweep; the rest waits for the
next), then deletes the artifacts nothing links to any more. It never touches:

- a bundle of a job that is not finished (queued, running, analyzing: a retry may fetch it again);
- a trace of a run that a baseline rule pins or accepts (a person chose it as the baseline: its traces explain it);
- result documents, samples, comparisons: trends and baselines are made of them, and they are small.

What it removed goes to the log and, per project, to the audit log (``artifacts.swept``). It runs in the caller's
transaction and never commits.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, exists, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.sql import CompoundSelect

from attnprof.server.artifacts.models import Artifact
from attnprof.server.audit import repository as audit
from attnprof.server.audit.address import request_address
from attnprof.server.auth.models import Token
from attnprof.server.auth.service import Principal
from attnprof.server.baselines.models import BaselineRule
from attnprof.server.config import Retention
from attnprof.server.db import utcnow
from attnprof.server.jobs.models import FINAL, Job
from attnprof.server.projects.models import Project
from attnprof.server.projects.retention import Policy, ProjectRetention, human_bytes, policy
from attnprof.server.runs.models import Run, RunTrace

log = logging.getLogger(__name__)

# A baseline rule of these kinds makes its run a baseline a person chose.
KEEP_RULES = ("pin", "accept")
# An artifact nothing links to is deleted only once it is this old: one stored by an upload still in flight (its
# link not yet committed) is left alone.
ORPHAN_GRACE = timedelta(hours=1)
SWEPT = "artifacts.swept"
CHANGED = "retention.changed"


@dataclass
class ProjectSwept:
    project_id: int
    name: str
    traces: int = 0
    bundles: int = 0
    released_bytes: int = 0  # the distinct artifacts it no longer links to
    rules: str = ""  # its retention, in words


@dataclass
class SweepReport:
    projects: list[ProjectSwept] = field(default_factory=list)
    artifacts_deleted: int = 0
    bytes_freed: int = 0

    @property
    def traces(self) -> int:
        return sum(p.traces for p in self.projects)

    @property
    def bundles(self) -> int:
        return sum(p.bundles for p in self.projects)


def _record(session: Session, *, kind: str, project_id: int, principal: Principal | None, detail: str) -> None:
    prefix = session.scalar(select(Token.prefix).where(Token.id == principal.token_id)) if principal else None
    audit.add(
        session,
        kind=kind,
        token_id=principal.token_id if principal else None,
        token_prefix=prefix,
        project_id=project_id,
        testbed_id=None,
        address=request_address(),
        detail=detail,
    )


def _text(p: Policy) -> str:
    def days(d: int | None) -> str:
        return "forever" if d is None else f"{d} days"

    quota = "none" if p.quota_bytes is None else human_bytes(p.quota_bytes)
    return f"traces kept {days(p.trace_days)}, bundles kept {days(p.bundle_days)}, quota {quota}"


def change(
    session: Session, *, project_id: int, values: dict[str, int | None], defaults: Retention, principal: Principal
) -> Policy:
    """Set the fields in ``values`` (validated by the caller); the others keep their current values (the defaults,
    for a project that had none of its own)."""
    before = policy(session, project_id, defaults)
    row = session.get(ProjectRetention, project_id, with_for_update=True)
    if row is None:
        row = ProjectRetention(
            project_id=project_id,
            trace_days=before.trace_days,
            bundle_days=before.bundle_days,
            quota_bytes=before.quota_bytes,
        )
        session.add(row)
    for name, value in values.items():
        setattr(row, name, value)
    row.updated_at = utcnow()
    session.flush()
    after = policy(session, project_id, defaults)
    _record(
        session,
        kind=CHANGED,
        project_id=project_id,
        principal=principal,
        detail=f"{_text(after)} (was {_text(before)})",
    )
    return after


def reset(session: Session, *, project_id: int, defaults: Retention, principal: Principal) -> Policy:
    """Back to the service's defaults."""
    before = policy(session, project_id, defaults)
    session.execute(delete(ProjectRetention).where(ProjectRetention.project_id == project_id))
    after = policy(session, project_id, defaults)
    detail = f"the service's defaults: {_text(after)} (was {_text(before)})"
    _record(session, kind=CHANGED, project_id=project_id, principal=principal, detail=detail)
    return after


def _sweep_project(session: Session, project: ProjectSwept, p: Policy, *, now: datetime, batch: int) -> set[str]:
    unlinked: set[str] = set()
    if p.trace_days is not None:
        kept = select(BaselineRule.run_id).where(
            BaselineRule.project_id == project.project_id, BaselineRule.kind.in_(KEEP_RULES)
        )
        rows = session.execute(
            select(RunTrace.run_id, RunTrace.name, RunTrace.artifact_sha256)
            .join(Run, Run.id == RunTrace.run_id)
            .where(
                Run.project_id == project.project_id,
                Run.created_at < now - timedelta(days=p.trace_days),
                Run.id.not_in(kept),
            )
            .order_by(Run.created_at)
            .limit(batch)
        ).all()
        if rows:
            keys = [(r.run_id, r.name) for r in rows]
            session.execute(delete(RunTrace).where(tuple_(RunTrace.run_id, RunTrace.name).in_(keys)))
            project.traces = len(rows)
            unlinked |= {r.artifact_sha256 for r in rows}
    if p.bundle_days is not None:
        jobs = session.execute(
            select(Job.id, Job.bundle_sha256, Job.base_bundle_sha256)
            .where(
                Job.project_id == project.project_id,
                Job.status.in_(FINAL),
                Job.bundle_sha256.is_not(None) | Job.base_bundle_sha256.is_not(None),
                Job.updated_at < now - timedelta(days=p.bundle_days),
            )
            .order_by(Job.updated_at)
            .limit(batch)
        ).all()
        if jobs:
            # updated_at stays: it says when the job last changed state, which this is not.
            session.execute(
                update(Job)
                .where(Job.id.in_([j.id for j in jobs]), Job.status.in_(FINAL))
                .values(bundle_sha256=None, base_bundle_sha256=None, updated_at=Job.updated_at)
                .execution_options(synchronize_session=False)
            )
            project.bundles = len(jobs)
            unlinked |= {sha for j in jobs for sha in (j.bundle_sha256, j.base_bundle_sha256) if sha is not None}
    if unlinked:
        still = set(session.scalars(_linked_by(project.project_id, unlinked)))
        gone = unlinked - still
        if gone:
            sizes = session.scalars(select(Artifact.size_bytes).where(Artifact.sha256.in_(gone)))
            project.released_bytes = sum(sizes)
    return unlinked


def _linked_by(project_id: int, shas: set[str]) -> CompoundSelect[str]:
    traces = (
        select(RunTrace.artifact_sha256)
        .join(Run, Run.id == RunTrace.run_id)
        .where(Run.project_id == project_id, RunTrace.artifact_sha256.in_(shas))
    )
    bundles = select(Job.bundle_sha256).where(Job.project_id == project_id, Job.bundle_sha256.in_(shas))
    bases = select(Job.base_bundle_sha256).where(Job.project_id == project_id, Job.base_bundle_sha256.in_(shas))
    return traces.union(bundles, bases)


def _delete_orphans(session: Session, report: SweepReport, unlinked: set[str], *, now: datetime, batch: int) -> None:
    """Delete the artifacts nothing links to: those this sweep unlinked, and others old enough (see
    ``ORPHAN_GRACE``). In a savepoint: an upload that links one of them again as this runs makes the delete fail,
    and the artifacts stay (for the next sweep)."""
    orphan = (
        ~exists().where(RunTrace.artifact_sha256 == Artifact.sha256)
        & ~exists().where(Job.bundle_sha256 == Artifact.sha256)
        & ~exists().where(Job.base_bundle_sha256 == Artifact.sha256)
    )
    candidates = Artifact.sha256.in_(unlinked) | (Artifact.created_at < now - ORPHAN_GRACE)
    rows = session.execute(
        select(Artifact.sha256, Artifact.size_bytes).where(orphan, candidates).limit(batch + len(unlinked))
    ).all()
    if not rows:
        return
    try:
        with session.begin_nested():
            session.execute(
                delete(Artifact)
                .where(Artifact.sha256.in_([r.sha256 for r in rows]), orphan)
                .execution_options(synchronize_session=False)
            )
    except IntegrityError:
        log.warning("artifact sweep: an upload linked an artifact being deleted; it is kept, the rest next sweep")
        return
    report.artifacts_deleted = len(rows)
    report.bytes_freed = sum(r.size_bytes for r in rows)


_last_sweep: list[float] = []  # this process's last sweep (time.monotonic), for ``due``


def due(defaults: Retention) -> bool:
    """Whether ``interval_s`` has passed since this process last swept (a sweeper's pass comes every few seconds;
    retention is counted in days). True the first time; the time is taken as the sweep's."""
    now = time.monotonic()
    if _last_sweep and now - _last_sweep[0] < defaults.interval_s:
        return False
    _last_sweep[:] = [now]
    return True


def sweep(session: Session, *, defaults: Retention, now: datetime | None = None) -> SweepReport:
    """One pass over every project (see the module's docstring); the caller commits."""
    now = now or utcnow()
    report = SweepReport()
    unlinked: set[str] = set()
    own = {r.project_id: r for r in session.scalars(select(ProjectRetention))}
    any_default = defaults.trace_days is not None or defaults.bundle_days is not None
    for project_id, name in session.execute(select(Project.id, Project.name).order_by(Project.id)).all():
        if project_id not in own and not any_default:
            continue
        p = policy(session, project_id, defaults)
        if p.trace_days is None and p.bundle_days is None:
            continue
        swept = ProjectSwept(project_id=project_id, name=name, rules=_text(p))
        unlinked |= _sweep_project(session, swept, p, now=now, batch=defaults.batch)
        if swept.traces or swept.bundles:
            report.projects.append(swept)
    session.flush()
    _delete_orphans(session, report, unlinked, now=now, batch=defaults.batch)
    for s in report.projects:
        detail = (
            f"removed {s.traces} traces and {s.bundles} bundles past retention ({s.rules}); "
            f"{human_bytes(s.released_bytes)} no longer counted against the project"
        )
        _record(session, kind=SWEPT, project_id=s.project_id, principal=None, detail=detail)
        log.warning("project %s: %s", s.name, detail)
    if report.artifacts_deleted:
        log.warning(
            "artifact sweep: deleted %d artifacts, %s freed", report.artifacts_deleted, human_bytes(report.bytes_freed)
        )
    return report
