"""The analysis's error: bad input to a comparison or a change-point search."""

from __future__ import annotations

from attnprof.core.errors import DocumentError


class AnalysisError(DocumentError):
    """Input the analysis cannot work with (no common cases, an unknown metric, a bad noise floor).

    A subclass of ``DocumentError`` so that callers mapping bad documents to exit status 2 or HTTP 4xx
    catch it too. A regression is never an error: it is a verdict.
    """
