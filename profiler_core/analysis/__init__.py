"""Regression analysis: compare runs to a verdict, find change points in a history. Torch-free.

``compare`` decides whether a candidate run regressed against pooled baseline runs (DESIGN 5) and returns
an ``attnprof.comparison/v1`` document; ``render_table`` prints it for a CI log. ``changepoints`` runs
``e_divisive`` over a chronological series of result documents. Bad input raises ``AnalysisError``, a
``DocumentError``. The method and its defaults are described in docs/regression-method.md.

The names below are imported on first use: a module of this package (the burst check a profile run uses, the
paired rule) is then imported without SciPy, which the statistics need and which takes a second to import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profiler_core.analysis.changepoints import (
        CaseChangepoints,
        ChangePointRecord,
        ChangepointReport,
        changepoints,
    )
    from profiler_core.analysis.compare import compare
    from profiler_core.analysis.config import (
        DEFAULT_NOISE_FLOOR,
        DEFAULT_THRESHOLDS,
        PRECEDENCE,
        load_config,
        parse_config,
    )
    from profiler_core.analysis.edivisive import ChangePoint, e_divisive
    from profiler_core.analysis.errors import AnalysisError
    from profiler_core.analysis.render import render_changepoints, render_table

_WHERE = {
    "CaseChangepoints": "changepoints",
    "ChangePointRecord": "changepoints",
    "ChangepointReport": "changepoints",
    "changepoints": "changepoints",
    "compare": "compare",
    "DEFAULT_NOISE_FLOOR": "config",
    "DEFAULT_THRESHOLDS": "config",
    "PRECEDENCE": "config",
    "load_config": "config",
    "parse_config": "config",
    "ChangePoint": "edivisive",
    "e_divisive": "edivisive",
    "AnalysisError": "errors",
    "render_changepoints": "render",
    "render_table": "render",
}

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
