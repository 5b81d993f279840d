"""A paired job's two documents beside its run (docs/architecture.md, "The paired job"): the base tree's result
document and the paired document of the interleaved rounds, as the worker uploads them with the head's result.

They are stored in ``paired_results`` (one row per job, written in the transaction that stores the head's run, so
a result is never half stored), never as a run: the base's samples join no history, no trend, no baseline. This
is the one way in to them: ``validate`` on arrival, ``documents_of`` for the analysis (validated once per process
and job, like a run's document).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError
from sqlalchemy.orm import Session

from attnprof.core.documents import ResultDocument, parse_result
from attnprof.core.documents.paired import PAIRED_SCHEMA, PairedDocument
from attnprof.core.errors import DocumentError
from attnprof.server.errors import InvalidPayload, StoredDocumentInvalid
from attnprof.server.jobs import repository
from attnprof.server.jobs.models import PairedResult
from attnprof.server.runs.documents import Kept

KEPT_PAIRED: Final = 16


@dataclass(frozen=True)
class PairedSides:
    base: ResultDocument
    paired: PairedDocument


kept: Kept[PairedSides] = Kept(KEPT_PAIRED)


def _paired(data: Any, source: str) -> PairedDocument:
    if not isinstance(data, dict) or data.get("schema") != PAIRED_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise DocumentError(f"{source}: schema is {found!r}, expected {PAIRED_SCHEMA!r}")
    try:
        return PairedDocument.model_validate(data)
    except ValidationError as exc:
        shown = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        raise DocumentError(f"{source}: invalid paired document: {shown}") from exc


def validate(*, paired_job: bool, head: ResultDocument, base: Any, paired: Any) -> PairedSides | None:
    """The base and paired documents that came with a result (``InvalidPayload`` naming the field otherwise):
    required for a paired job, refused for another, and joined to the head's document and each other by run id."""
    if not paired_job:
        sent = [name for name, value in (("base", base), ("paired", paired)) if value is not None]
        if sent:
            raise InvalidPayload(f"{' and '.join(sent)}: this job is not paired; send the result alone")
        return None
    missing = [name for name, value in (("base", base), ("paired", paired)) if value is None]
    if missing:
        raise InvalidPayload(
            f"{' and '.join(missing)}: a paired job's result comes with the base's result document and the paired "
            "document"
        )
    try:
        base_doc = parse_result(base, source="base")
        paired_doc = _paired(paired, "paired")
    except DocumentError as exc:
        raise InvalidPayload(str(exc)) from exc
    if base_doc.run.id == head.run.id:
        raise InvalidPayload(f"base: its run id {base_doc.run.id} is the head's: the two sides are two runs")
    if (paired_doc.base_run, paired_doc.head_run) != (base_doc.run.id, head.run.id):
        raise InvalidPayload(
            f"paired: it joins base {paired_doc.base_run} and head {paired_doc.head_run}, not the base "
            f"{base_doc.run.id} and the result {head.run.id} sent with it"
        )
    return PairedSides(base=base_doc, paired=paired_doc)


def store(session: Session, *, job_id: str, attempt: int, run_id: str, sides: PairedSides) -> None:
    """Store ``sides`` as job ``job_id``'s, beside its run ``run_id`` of ``attempt`` (not committed)."""
    repository.add_paired(
        session,
        PairedResult(
            job_id=job_id,
            attempt=attempt,
            run_id=run_id,
            base_document=sides.base.model_dump(mode="json", by_alias=True),
            paired_document=sides.paired.model_dump(mode="json", by_alias=True),
        ),
    )


def documents_of(session: Session, job_id: str) -> PairedSides | None:
    """The stored base and paired documents of job ``job_id`` (None: none stored), validated once per process."""
    found = kept.get(job_id)
    if found is not None:
        return found
    row = repository.paired_of(session, job_id)
    if row is None:
        return None
    try:
        sides = PairedSides(
            base=parse_result(row.base_document, source=f"the stored base document of job {job_id}"),
            paired=_paired(row.paired_document, f"the stored paired document of job {job_id}"),
        )
    except DocumentError as exc:
        raise StoredDocumentInvalid(str(exc)) from exc
    kept.put(job_id, sides)
    return sides
