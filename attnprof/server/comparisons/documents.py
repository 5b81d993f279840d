"""The one way in to a stored comparison document: ``comparison_of`` gives it as the typed ``ComparisonDocument``,
validated once per process and kept by comparison id for the ``KEPT_COMPARISONS`` most recently used (a stored
comparison never changes). The models are shared by every caller: read them, never change them.

A stored document that its model refuses raises ``StoredDocumentInvalid`` naming the comparison and the first
offending fields.
"""

from __future__ import annotations

from typing import Final

from attnprof.core.documents import parse_comparison
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.core.errors import DocumentError
from attnprof.server.comparisons.models import Comparison
from attnprof.server.errors import StoredDocumentInvalid
from attnprof.server.runs.documents import Kept

KEPT_COMPARISONS: Final = 32

comparisons: Kept[ComparisonDocument] = Kept(KEPT_COMPARISONS)


def remember(comparison_id: str, document: ComparisonDocument) -> None:
    """Keep ``document``, just made and stored as comparison ``comparison_id``: reading it back validates nothing."""
    comparisons.put(comparison_id, document)


def comparison_of(found: Comparison) -> ComparisonDocument:
    """The comparison document of stored comparison ``found``, validated once per process."""
    kept = comparisons.get(found.id)
    if kept is not None:
        return kept
    try:
        doc = parse_comparison(found.document, source=f"the stored comparison document {found.id}")
    except DocumentError as exc:
        raise StoredDocumentInvalid(str(exc)) from exc
    comparisons.put(found.id, doc)
    return doc
