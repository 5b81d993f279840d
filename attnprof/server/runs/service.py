"""Storing a run: its result document (``documents.stored_form``: all but the samples), its normalised cases and
kernels, and each case's samples (their one copy)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from attnprof.contract.provenance import Provenance
from attnprof.core.documents import ResultDocument, parse_result
from attnprof.core.errors import DocumentError
from attnprof.server.artifacts.store import store
from attnprof.server.config import Retention
from attnprof.server.db import utcnow
from attnprof.server.errors import Conflict, InvalidPayload, NotFound, PayloadTooLarge
from attnprof.server.projects import retention as quota
from attnprof.server.runs import documents, repository
from attnprof.server.runs.models import Run
from attnprof.server.testbeds import service as testbeds


def validate(data: Any) -> ResultDocument:
    """A result document from decoded JSON, or ``InvalidPayload`` naming the first offending fields."""
    try:
        return parse_result(data, source="result")
    except DocumentError as exc:
        raise InvalidPayload(str(exc)) from exc


def store_run(
    session: Session,
    *,
    project_id: int,
    document: ResultDocument,
    provenance: Provenance,
    testbed: str | None = None,
    job_id: str | None = None,
    attempt: int | None = None,
) -> Run:
    """Insert the run and its normalised rows in the caller's transaction (nothing is committed here). ``testbed``:
    the name of the testbed it ran on (None: the one keyed with the document's testbed key, else one named after
    it). A document measured on another key than its testbed's is refused before anything is stored
    (``testbeds.KeyMismatch``); the testbed's key is never changed here (``attnprof.server.testbeds.service``)."""
    if repository.get_by_document_id(session, project_id, document.run.id) is not None:
        raise Conflict(f"run {document.run.id} of this result document is already stored")
    env = document.environment
    ran_on = testbeds.for_run(session, name=testbed, key=env.testbed_key, meaning=dict(env.testbed))
    now = utcnow()
    run = repository.add(
        session,
        Run(
            id=str(uuid.uuid4()),
            project_id=project_id,
            testbed_id=ran_on.id,
            testbed_key=env.testbed_key,
            document_run_id=document.run.id,
            branch=provenance.branch,
            commit=provenance.commit,
            repo=provenance.repo,
            pr=provenance.pr,
            base_commit=provenance.base_commit,
            ancestors=list(provenance.ancestors),
            mode=document.run.mode,
            suspect=bool(document.run.suspect),
            job_id=job_id,
            attempt=attempt,
            created_at=now,
            document=documents.stored_form(document),
        ),
    )
    _store_normalised(session, run, document)
    documents.remember(run.id, document)
    return run


def _store_normalised(session: Session, run: Run, document: ResultDocument) -> None:
    case_rows = []
    for case in document.cases:
        lat, ach = case.latency_us, case.achieved
        case_rows.append(
            {
                "run_id": run.id,
                "project_id": run.project_id,
                "testbed_id": run.testbed_id,
                "branch": run.branch,
                "created_at": run.created_at,
                "case_id": case.id,
                "status": case.status,
                "backend_used": case.backend_used,
                "latency_median_us": lat.median if lat else None,
                "latency_p25_us": lat.p25 if lat else None,
                "latency_p75_us": lat.p75 if lat else None,
                "latency_min_us": lat.min if lat else None,
                "latency_max_us": lat.max if lat else None,
                "latency_cv": lat.cv if lat else None,
                "tflops": ach.tflops if ach else None,
                "gbps": ach.gbps if ach else None,
                "compute_util": ach.compute_util if ach else None,
                "bandwidth_util": ach.bandwidth_util if ach else None,
                "bound": ach.bound if ach else None,
                "samples_count": len(lat.samples) if lat else 0,
                "trace": case.trace,
            }
        )
    ids = repository.add_cases(session, case_rows)
    kernels: list[dict[str, Any]] = []
    samples_us: dict[int, list[float]] = {}
    for case_row_id, case in zip(ids, document.cases, strict=True):
        for k in case.kernels:
            kernels.append(
                {
                    "run_case_id": case_row_id,
                    "key": k.key,
                    "phase": k.phase,
                    "duration_median_us": k.duration_us.median,
                    "duration_p25_us": k.duration_us.p25,
                    "duration_p75_us": k.duration_us.p75,
                    "launches_per_iter": k.launches_per_iter,
                    "tflops": k.tflops,
                    "gbps": k.gbps,
                    "compute_util": k.compute_util,
                    "bandwidth_util": k.bandwidth_util,
                    "theoretical_occupancy": k.theoretical_occupancy,
                    "bound": k.bound,
                }
            )
        if case.latency_us is not None and case.latency_us.samples:
            samples_us[case_row_id] = case.latency_us.samples
    repository.add_kernels(session, kernels)
    repository.add_samples(session, samples_us)


def owe_feedback(run: Run, now: datetime | None = None) -> bool:
    """Say, in the transaction that stores an uploaded ``run``, that GitHub is owed its verdict (the commit status
    and, for a pull request, the project's comment), as a job owes its own
    (``attnprof.server.jobs.service.owe_feedback``): ``attnprof.server.github.outbox`` sends it from the stored rows
    once the transaction is committed, and the sweep retries what is still owed. A run that names no repository owes
    nothing (False). Not committed."""
    if not run.repo:
        return False
    run.feedback_due_at = now or utcnow()
    run.feedback_attempts = 0
    run.feedback_note = None
    return True


def get(session: Session, *, project_id: int, run_id: str) -> Run:
    run = repository.get_in_project(session, project_id, run_id)
    if run is None:
        raise NotFound(f"no run {run_id}")
    return run


def put_trace(
    session: Session, *, run: Run, name: str, data: bytes, limit_bytes: int, retention: Retention | None = None
) -> None:
    """Attach a trace file named in the run's document (gzip Chrome trace) to the run, within the project's quota
    (``retention``: the service's defaults)."""
    if name not in repository.case_names_with_trace(session, run.id):
        raise NotFound(f"run {run.id} names no trace {name!r}")
    if len(data) > limit_bytes:
        raise PayloadTooLarge(f"trace is {len(data)} bytes; the limit is {limit_bytes}")
    if data[:2] != b"\x1f\x8b":
        raise InvalidPayload(f"trace {name!r} is not gzip")
    quota.check_quota(session, project_id=run.project_id, kind="trace", data=data, defaults=retention or Retention())
    repository.add_trace(session, run_id=run.id, name=name, artifact_sha256=store.put(session, kind="trace", data=data))


def get_trace(session: Session, *, run: Run, name: str) -> bytes:
    link = repository.get_trace(session, run.id, name)
    data = store.get(session, link.artifact_sha256) if link else None
    if data is None:
        raise NotFound(f"no trace {name!r} stored for run {run.id}")
    return data


def get_for_job_attempt(session: Session, *, job_id: str, attempt: int) -> Run | None:
    return repository.get_for_job_attempt(session, job_id, attempt)
