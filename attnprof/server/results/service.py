from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from attnprof.core.documents import ResultDocument
from attnprof.server.comparisons import documents as comparison_documents
from attnprof.server.comparisons import repository as comparisons
from attnprof.server.comparisons import service as analysis
from attnprof.server.comparisons.models import Comparison
from attnprof.server.config import Analysis
from attnprof.server.errors import Conflict, InvalidPayload
from attnprof.server.github.comment import CommentInput, render
from attnprof.server.projects import service as project_service
from attnprof.server.results.schemas import ResultUpload
from attnprof.server.runs import documents
from attnprof.server.runs import repository as run_rows
from attnprof.server.runs import service as runs
from attnprof.server.runs.models import Run
from attnprof.server.testbeds import repository as testbeds


@dataclass(frozen=True)
class Uploaded:
    run: Run
    comparison: Comparison
    document: ResultDocument  # the run's
    created: bool = True  # False: the same upload was stored before, and this is its answer


def upload(
    session: Session,
    *,
    project_id: int,
    body: ResultUpload,
    cfg: Analysis,
    ancestors_max: int,
    github_feedback: bool = True,
) -> Uploaded:
    """Store an uploaded run and compare it, in the caller's transaction; an upload that names its repository owes
    GitHub its commit status and pull-request comment (``runs.owe_feedback``), which the caller sends once committed.
    One that names a repository its project may not report to is refused before anything is stored
    (``RepoNotAllowed``), as a job is; ``github_feedback`` False (a service with no GitHub token) lets it stand as
    a label, since every delivery checks it again.

    Idempotent: the same upload again (the same document and provenance, as a client sends it once more when the
    answer to the first was lost) stores nothing and answers with the stored run and its comparison. The same
    document id with anything else is a ``Conflict`` naming what differs.
    """
    if github_feedback:
        project_service.check_may_report(session, project_id=project_id, repo=body.repo)
    document = runs.validate(body.result)
    if len(body.ancestors) > ancestors_max:
        raise InvalidPayload(f"ancestors: at most {ancestors_max}")
    stored = run_rows.get_by_document_id(session, project_id, document.run.id)
    if stored is not None:
        return _stored_answer(session, stored, document, body)
    # The upload is a provenance (the contract's model) with the document and the testbed beside it.
    run = runs.store_run(session, project_id=project_id, document=document, provenance=body, testbed=body.testbed)
    compared = analysis.analyze(session, run_id=run.id, cfg=cfg)
    # Its verdict is owed to GitHub like a job's (the run names its repository), sent once this is committed.
    runs.owe_feedback(run)
    return Uploaded(run=run, comparison=compared, document=document)


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
    return Uploaded(run=run, comparison=comparison, document=document, created=False)


def summary(session: Session, done: Uploaded, *, project: str, testbed: str, public_url: str) -> str:
    """The upload's comparison in markdown, as ``attnprof.server.github.comment`` renders a job's pull-request comment
    (with one of the baseline runs beside the candidate), without the comment's marker line."""
    baseline_ids = [str(b) for b in done.comparison.baseline_run_ids]
    baseline = run_rows.get(session, baseline_ids[0]) if baseline_ids else None
    run = done.run
    markdown = render(
        CommentInput(
            project=project,
            job_id="",
            status="done",
            suite_name=done.document.suite.name,
            testbed=testbed,
            branch=run.branch,
            commit=run.commit,
            public_url=public_url,
            pr=run.pr,
            run_id=run.id,
            comparison_id=done.comparison.id,
            comparison=comparison_documents.comparison_of(done.comparison),
            candidate=done.document,
            baseline=documents.result_of(session, baseline) if baseline is not None else None,
        )
    )
    return markdown.split("\n", 1)[1]  # the first line is the marker
