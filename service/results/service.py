from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from service.analysis import service as analysis
from service.analysis.models import Comparison
from service.config import Analysis
from service.errors import InvalidPayload
from service.results.schemas import ResultUpload
from service.runs import service as runs
from service.runs.models import Run


@dataclass(frozen=True)
class Uploaded:
    run: Run
    comparison: Comparison


def upload(session: Session, *, project_id: int, body: ResultUpload, cfg: Analysis, ancestors_max: int) -> Uploaded:
    """Store an uploaded run and compare it, in the caller's transaction."""
    document = runs.validate(body.result)
    if len(body.ancestors) > ancestors_max:
        raise InvalidPayload(f"ancestors: at most {ancestors_max}")
    provenance = runs.Provenance(
        branch=body.branch,
        commit=body.commit,
        repo=body.repo,
        base_commit=body.base_commit,
        ancestors=tuple(body.ancestors),
        pr=body.pr,
        testbed=body.testbed,
    )
    run = runs.store_run(session, project_id=project_id, document=document, provenance=provenance)
    return Uploaded(run=run, comparison=analysis.analyze(session, run_id=run.id, cfg=cfg, document=document))
