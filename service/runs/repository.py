from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
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
        # Core, not the ORM's bulk path: nothing here needs the identity map, and that path costs per row.
        session.connection().execute(insert(RunKernel), list(rows))


def add_samples(
    session: Session, *, run_case_ids: Sequence[int], indexes: Sequence[int], values_us: Sequence[float]
) -> None:
    """Insert sample rows given as three parallel columns.

    On Postgres they go in with one binary COPY, in the session's transaction: a 100-case document holds some
    20,000 samples, and inserting them as an executemany took over a second (row by row in text, 0.2 s).
    """
    if not run_case_ids:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        driver = connection.connection.driver_connection
        assert driver is not None
        payload = _binary_copy(run_case_ids, indexes, values_us)
        with driver.cursor() as cursor, cursor.copy(_COPY_SAMPLES) as copy:
            copy.write(payload)
        return
    rows = [
        {"run_case_id": c, "index": i, "value_us": v} for c, i, v in zip(run_case_ids, indexes, values_us, strict=True)
    ]
    connection.execute(insert(Sample), rows)


_COPY_SAMPLES = f'COPY {Sample.__tablename__} (run_case_id, "index", value_us) FROM STDIN (FORMAT BINARY)'
# COPY's binary tuples: a field count, then each field as its length and its big-endian value.
_SAMPLE_TUPLE = np.dtype(
    [
        ("fields", ">i2"),
        ("n1", ">i4"),
        ("run_case_id", ">i8"),
        ("n2", ">i4"),
        ("index", ">i4"),
        ("n3", ">i4"),
        ("value_us", ">f8"),
    ]
)


def _binary_copy(run_case_ids: Sequence[int], indexes: Sequence[int], values_us: Sequence[float]) -> bytes:
    rows = np.empty(len(run_case_ids), dtype=_SAMPLE_TUPLE)
    rows["fields"], rows["n1"], rows["n2"], rows["n3"] = 3, 8, 4, 8
    rows["run_case_id"], rows["index"], rows["value_us"] = run_case_ids, indexes, values_us
    header = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
    return header + rows.tobytes() + struct.pack(">h", -1)


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
