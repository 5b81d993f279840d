from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from service.runs.models import Run, RunCase, RunKernel, RunTrace, Sample


def add(session: Session, run: Run) -> Run:
    session.add(run)
    session.flush()
    return run


def get(session: Session, run_id: str) -> Run | None:
    return session.get(Run, run_id)


def get_in_project(session: Session, project_id: int, run_id: str) -> Run | None:
    return session.scalars(select(Run).where(Run.id == run_id, Run.project_id == project_id)).one_or_none()


def get_by_document_id(session: Session, project_id: int, document_run_id: str) -> Run | None:
    q = select(Run).where(Run.project_id == project_id, Run.document_run_id == document_run_id)
    return session.scalars(q).one_or_none()


def get_for_job_attempt(session: Session, job_id: str, attempt: int) -> Run | None:
    return session.scalars(select(Run).where(Run.job_id == job_id, Run.attempt == attempt)).first()


def add_cases(session: Session, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert run_cases rows; returns their ids in the order given."""
    if not rows:
        return []
    stmt = insert(RunCase).returning(RunCase.id, sort_by_parameter_order=True)
    return list(session.scalars(stmt, list(rows)))


def add_kernels(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        session.execute(insert(RunKernel), list(rows))


def add_samples(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        session.execute(insert(Sample), list(rows))


def list_runs(
    session: Session,
    *,
    project_id: int,
    branch: str | None,
    testbed_id: int | None,
    commit: str | None,
    before: tuple[datetime, str] | None,
    limit: int,
) -> list[Run]:
    q = select(Run).where(Run.project_id == project_id)
    if branch is not None:
        q = q.where(Run.branch == branch)
    if testbed_id is not None:
        q = q.where(Run.testbed_id == testbed_id)
    if commit is not None:
        q = q.where(Run.commit == commit)
    if before is not None:
        q = q.where((Run.created_at < before[0]) | ((Run.created_at == before[0]) & (Run.id < before[1])))
    q = q.order_by(Run.created_at.desc(), Run.id.desc()).limit(limit)
    return list(session.scalars(q))


def case_names_with_trace(session: Session, run_id: str) -> set[str]:
    q = select(RunCase.trace).where(RunCase.run_id == run_id, RunCase.trace.is_not(None))
    return {t for t in session.scalars(q) if t}


def get_trace(session: Session, run_id: str, name: str) -> RunTrace | None:
    return session.get(RunTrace, (run_id, name))


def add_trace(session: Session, *, run_id: str, name: str, artifact_sha256: str) -> None:
    existing = get_trace(session, run_id, name)
    if existing is None:
        session.add(RunTrace(run_id=run_id, name=name, artifact_sha256=artifact_sha256))
    else:
        existing.artifact_sha256 = artifact_sha256
    session.flush()


def list_traces(session: Session, run_id: str) -> list[str]:
    return list(session.scalars(select(RunTrace.name).where(RunTrace.run_id == run_id).order_by(RunTrace.name)))
