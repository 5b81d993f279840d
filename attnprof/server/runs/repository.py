from __future__ import annotations

import struct
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Row, func, insert, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session, defer

from attnprof.server.runs.models import CaseSamples, Run, RunCase, RunKernel, RunTrace


def add(session: Session, run: Run) -> Run:
    session.add(run)
    session.flush()
    return run


def get(session: Session, run_id: str) -> Run | None:
    return session.get(Run, run_id)


def get_in_project(session: Session, project_id: int, run_id: str) -> Run | None:
    return session.scalars(select(Run).where(Run.id == run_id, Run.project_id == project_id)).one_or_none()


RUN_ID_PREFIX_MIN = 6
"""Characters a run id's prefix needs before it is looked up (``fd1a4247``, as comparisons abbreviate)."""
RUN_ID_CHARS = 36
"""A whole run id's length (a UUID's, the service's and the profiler's): a reference this long is never a prefix."""


class AmbiguousRunId(Exception):
    """A run id's prefix that more than one run of the project starts with; ``run_ids`` are some of them."""

    def __init__(self, ref: str, run_ids: Sequence[str]) -> None:
        super().__init__(
            f"run id {ref!r} is ambiguous: {len(run_ids)} or more runs of the project have an id starting with it "
            f"({', '.join(run_ids[:3])}); give more characters or the whole id"
        )
        self.ref = ref
        self.run_ids = tuple(run_ids)


def resolve_run_id(session: Session, project_id: int, ref: str) -> str | None:
    """The service's id of the run of the project that ``ref`` names, or None: no such run in the project.

    A run has two ids: the service's (``runs.id``) and its result document's (``run.id``, which comparisons, their
    notes and ``attnprof compare`` print). ``ref`` may be either, whole, or a unique prefix of at least
    ``RUN_ID_PREFIX_MIN`` characters of either. A prefix that several runs share raises ``AmbiguousRunId``.

    Both whole ids are found through indexes (the primary key, the project's unique document ids): 0.3 ms in a
    project of 50,000 runs on Postgres. Only a shorter reference that misses both scans the project's runs for a
    prefix (13 ms there).
    """
    whole = select(Run.id).where(Run.project_id == project_id, (Run.id == ref) | (Run.document_run_id == ref))
    found = list(session.scalars(whole.limit(2)))
    if ref in found:  # the service's own id wins over another run's document id
        return ref
    if found:
        return found[0]
    if not RUN_ID_PREFIX_MIN <= len(ref) < RUN_ID_CHARS:
        return None  # too short to look up, or as long as a whole id: no prefix then
    prefix = Run.id.startswith(ref, autoescape=True) | Run.document_run_id.startswith(ref, autoescape=True)
    matches = list(session.scalars(select(Run.id).where(Run.project_id == project_id, prefix).limit(5)))
    if len(matches) > 1:
        raise AmbiguousRunId(ref, matches)
    return matches[0] if matches else None


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


def add_samples(session: Session, samples_us: Mapping[int, Sequence[float]]) -> None:
    """Store each case's samples (microseconds, in the order they ran) as one row, keyed by the case row's id.

    On Postgres the rows go in with one binary COPY in the session's transaction: psycopg writes a float8[]
    parameter as text, which took ~0.1 s for the ~22,000 samples of a 100-case document.
    """
    if not samples_us:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        driver = connection.connection.driver_connection
        assert driver is not None
        with driver.cursor() as cursor, cursor.copy(_COPY_SAMPLES) as copy:
            copy.write(_binary_copy(samples_us))
        return
    rows = [{"run_case_id": case_row_id, "values_us": list(values)} for case_row_id, values in samples_us.items()]
    connection.execute(insert(CaseSamples), rows)


_COPY_SAMPLES = f"COPY {CaseSamples.__tablename__} (run_case_id, values_us) FROM STDIN (FORMAT BINARY)"
_FLOAT8_OID = 701
# An element of a binary float8[]: its length, then its big-endian value.
_ELEMENT = np.dtype([("length", ">i4"), ("value", ">f8")])


def _binary_copy(samples_us: Mapping[int, Sequence[float]]) -> bytes:
    """COPY's binary format: a header, then per row the field count and each field as its length and value (the
    array: dimensions, flags, element type, then length and lower bound of its one dimension, then the elements)."""
    parts = [b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)]
    for case_row_id, values in samples_us.items():
        elements = np.empty(len(values), dtype=_ELEMENT)
        elements["length"], elements["value"] = 8, values
        array = struct.pack(">iiIii", 1, 0, _FLOAT8_OID, len(values), 1) + elements.tobytes()
        parts.append(struct.pack(">hiqi", 2, 8, case_row_id, len(array)) + array)
    parts.append(struct.pack(">h", -1))
    return b"".join(parts)


def samples_of_run(session: Session, run_id: str, case_ids: Collection[str] | None = None) -> dict[str, list[float]]:
    """The samples of each case of a run (microseconds), by case id (only ``case_ids``' when given); cases without
    samples are absent.

    On Postgres the arrays come in psycopg's binary format: parsing the text of a 100-case run's ~22,000 float8
    took ~11 ms, the binary ~2 ms (every read of a stored document puts its samples back)."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        params: list[str | list[str]]
        sql, params = _SAMPLES_OF_RUN, [run_id]
        if case_ids is not None:
            sql, params = sql + " AND c.case_id = ANY(%s)", [run_id, list(case_ids)]
        driver = connection.connection.driver_connection
        assert driver is not None
        with driver.cursor(binary=True) as cursor:
            cursor.execute(sql, params)
            return {case_id: values for case_id, values in cursor}
    q = (
        select(RunCase.case_id, CaseSamples.values_us)
        .join(CaseSamples, CaseSamples.run_case_id == RunCase.id)
        .where(RunCase.run_id == run_id)
    )
    if case_ids is not None:
        q = q.where(RunCase.case_id.in_(list(case_ids)))
    return {case_id: [float(v) for v in values] for case_id, values in connection.execute(q)}


_SAMPLES_OF_RUN = (
    f"SELECT c.case_id, s.values_us FROM {RunCase.__tablename__} AS c"
    f" JOIN {CaseSamples.__tablename__} AS s ON s.run_case_id = c.id WHERE c.run_id = %s"
)


def document_of(session: Session, run_id: str) -> Row[tuple[Any]] | None:
    """The stored ``document`` column of a run (its result document without the samples), or None: no such run."""
    return session.execute(select(Run.document).where(Run.id == run_id)).first()


def suite_names(session: Session, run_ids: Collection[str]) -> list[tuple[str, str | None]]:
    """(run id, the suite name in its stored result document) of ``run_ids``. Postgres reads each document whole to
    find the name (some milliseconds for a 100-case document): ask for the few runs whose name is not known yet."""
    if not run_ids:
        return []
    q = select(Run.id, Run.document[("suite", "name")].as_string()).where(Run.id.in_(run_ids))
    return [(run_id, name) for run_id, name in session.execute(q)]


def document_cases(session: Session, run_id: str, case_ids: Collection[str]) -> list[Any]:
    """The cases ``case_ids`` of a run's stored document, as stored (without their samples). On Postgres only those
    cases leave the database: a 100-case document is a megabyte, and a comparison names the few cases that moved."""
    if not case_ids:
        return []
    if session.get_bind().dialect.name == "postgresql":
        case = func.jsonb_array_elements(Run.document["cases"], type_=JSONB).column_valued("c", joins_implicitly=True)
        q = select(case).select_from(Run).where(Run.id == run_id)
        return list(session.scalars(q.where(case["id"].astext.in_(list(case_ids)))))
    found = session.scalars(select(Run.document["cases"]).where(Run.id == run_id)).first()
    wanted = set(case_ids)
    return [c for c in found or [] if isinstance(c, dict) and c.get("id") in wanted]


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


# --- an upload's GitHub feedback (``feedback_due_at``) ----------------------------------------------------------
# A run uploaded from a self-hosted runner that names its repository owes its commit status and pull-request
# comment from the transaction that stores it; a sender delivers them afterwards from the stored rows
# (``attnprof.server.github.outbox``), as it does a job's. These statements lock nothing beyond themselves.


def get_fresh(session: Session, run_id: str) -> Run | None:
    """The run row as committed now, its document left unread (not locked)."""
    q = select(Run).options(defer(Run.document)).where(Run.id == run_id).execution_options(populate_existing=True)
    return session.scalars(q).one_or_none()


def feedback_due(session: Session, *, now: datetime, limit: int) -> list[str]:
    """Ids of the runs whose owed GitHub feedback is due at ``now``, longest owed first (``ix_runs_feedback_due_at``;
    a claimed one is due later: it is not listed)."""
    q = select(Run.id).where(Run.feedback_due_at <= now).order_by(Run.feedback_due_at, Run.id).limit(limit)
    return list(session.scalars(q))


def claim_feedback(session: Session, *, run_id: str, now: datetime, until: datetime) -> bool:
    """Claim the delivery of run ``run_id``'s feedback if it is owed and due at ``now``: ``feedback_due_at`` moves to
    ``until`` in one conditional statement (of two senders only one claims it). False when nothing is due."""
    q = update(Run).where(Run.id == run_id, Run.feedback_due_at <= now).values(feedback_due_at=until)
    return bool(session.execute(q.execution_options(synchronize_session=False)).rowcount)  # type: ignore[attr-defined]


def settle_feedback(
    session: Session, *, seen: Run, claim: datetime, due_at: datetime | None, attempts: int, note: str | None
) -> bool:
    """Record what a delivery did, if the row is still as the sender read it under its claim (the same claim and
    failure count). False when it is not: read it again and decide again."""
    q = (
        update(Run)
        .where(Run.id == seen.id, Run.feedback_due_at == claim, Run.feedback_attempts == seen.feedback_attempts)
        .values(feedback_due_at=due_at, feedback_attempts=attempts, feedback_note=note)
    )
    return bool(session.execute(q.execution_options(synchronize_session=False)).rowcount)  # type: ignore[attr-defined]
