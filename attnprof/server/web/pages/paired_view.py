"""What the comparison and run pages show of a paired comparison (``mode: paired``; docs/architecture.md, "The
paired job"): that it is a paired run on one GPU, its pairs of rounds, minimum effect and how the cases stopped, each
finding's rounds; the base side's id as text (its result document is evidence for this comparison, never a stored
run); and the comparison of the other mode beside it (a paired job's run has a paired and a stored-history
comparison)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from attnprof.core.analysis.render import stopped_counts, stopping
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.server.web import repository

MODE_WORDS = {
    "paired": "paired comparison (the merge base and the head on one GPU; it gives the verdict)",
    "history": "stored-history comparison (against the stored baseline runs)",
}


def context(
    session: Session, project_id: int, doc: ComparisonDocument, comparison_id: str, run_id: str
) -> dict[str, Any]:
    """The comparison page's paired parts: ``paired`` (the document's PairedInfo, None for history), the cases by
    stopping reason in words, the finding's stopping words (``stopping``), and ``beside``: the newest comparison of
    the other mode of the same candidate run, if there is one."""
    others = repository.comparisons_beside(session, project_id, run_id)
    beside = next((r for r in others if r.id != comparison_id and r.mode != doc.mode), None)
    return {
        "paired": doc.paired,
        "stop_counts": stopped_counts(doc) if doc.paired is not None else "",
        "stopping": stopping,
        "beside": beside,
        "mode_words": MODE_WORDS,
    }
