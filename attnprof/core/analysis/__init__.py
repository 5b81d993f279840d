"""Regression analysis: compare runs to a verdict, find change points in a history. Torch-free.

``compare`` decides whether a candidate run regressed against pooled baseline runs (docs/architecture.md, "Deciding
a regression") and returns an ``attnprof.comparison/v1`` document; ``paired.compare_paired`` decides the same for a
candidate (the head) against one baseline (the merge base) profiled interleaved with it (``mode: paired``);
``render_table`` prints either for a CI log. ``changepoints`` runs ``e_divisive`` over a chronological series of
result documents. Bad input raises ``AnalysisError``, a ``DocumentError``. The method and its defaults are described
in docs/regression-method.md.
"""

from attnprof.core.analysis.changepoints import (
    CaseChangepoints,
    ChangePointRecord,
    ChangepointReport,
    changepoints,
)
from attnprof.core.analysis.compare import compare
from attnprof.core.analysis.config import (
    DEFAULT_NOISE_FLOOR,
    DEFAULT_THRESHOLDS,
    PRECEDENCE,
    load_config,
    parse_config,
)
from attnprof.core.analysis.edivisive import ChangePoint, e_divisive
from attnprof.core.analysis.errors import AnalysisError
from attnprof.core.analysis.render import render_changepoints, render_table

__all__ = [
    "DEFAULT_NOISE_FLOOR",
    "DEFAULT_THRESHOLDS",
    "PRECEDENCE",
    "AnalysisError",
    "CaseChangepoints",
    "ChangePoint",
    "ChangePointRecord",
    "ChangepointReport",
    "changepoints",
    "compare",
    "e_divisive",
    "load_config",
    "parse_config",
    "render_changepoints",
    "render_table",
]
