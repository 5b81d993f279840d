from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from profiler_core.documents import ResultDocument
from service.comparisons import repository as comparisons
from service.comparisons import service as analysis
from service.comparisons.models import Comparison
from service.config import Analysis
from service.errors import Conflict, InvalidPayload
from service.results.schemas import ResultUpload
from service.runs import documents
from service.runs import repository as run_rows
from service.runs import service as runs
from service.runs.models import Run
from service.testbeds import repository as testbeds


@dataclass(frozen=True)
class Uploaded:
    run: Run
    comparison: Comparison
    created: bool = True  # False: the same upload was stored before, and this is its answer


def upload(session: Session, *, project_id: int, body: ResultUpload, cfg: Analysis, ancestors_max: int) -> Uploaded:
    """Store an uploaded run and compare it, in the caller's transaction.

    Idempotent: the same upload again (the same document and provenance, as a client sends it once more when the
    answer to the first was lost) stores nothing and answers with the stored run and its comparison. The same
    document id with anything else is a ``Conflict`` naming what differs.
    """
    document = runs.validate(body.result)
    if len(body.ancestors) > ancestors_max:
        raise InvalidPayload(f"ancestors: at most {ancestors_max}")
    stored = run_rows.get_by_document_id(session, project_id, document.run.id)
    if stored is not None:
        return _stored_answer(session, stored, document, body)
    # The upload is a provenance (the contract's model) with the document and the testbed beside it.
    run = runs.store_run(session, project_id=project_id, document=document, provenance=body, testbed=body.testbed)
    return Uploaded(run=run, comparison=analysis.analyze(session, run_id=run.id, cfg=cfg))


def _stored_answer(session: Session, run: Run, document: ResultDocument, body: ResultUpload) -> Uploaded:
    """The answer an earlier upload of ``document`` got, if this upload is the same one; else ``Conflict``."""
    differs = [] if run.job_id is None else ["origin (a job's worker stored it)"]
    for name in ("branch", "commit", "repo", "base_commit", "pr"):
        if getattr(run, name) != getattr(body, name):
            differs.append(name)
    if list(run.ancestors) != list(body.ancestors):
        differs.append("ancestors")
    if body.testbed is not None:
        testbed = testbeds.get(session, run.testbed_id)
        if testbed is None or testbed.name != body.testbed:
            differs.append("testbed")
    # The stored document read back through its model, so that JSON's numbers compare as the model holds them.
    if documents.result_of(session, run).model_dump(mode="json", by_alias=True) != document.model_dump(
        mode="json", by_alias=True
    ):
        differs.append("result (the document's content)")
    comparison = comparisons.latest_for_run(session, run.id)
    if differs or comparison is None:
        what = ", ".join(differs) or "no comparison"
        raise Conflict(
            f"run {document.run.id} of this result document is already stored (run {run.id}) with another {what}; "
            "an upload sent again must be the same as the first"
        )
    return Uploaded(run=run, comparison=comparison, created=False)
