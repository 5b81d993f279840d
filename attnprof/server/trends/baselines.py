"""The baseline a trend draws: for each run, the level of the runs its comparison was made against, and the case's
minimum effect around it (the band a change must leave to count), as the comparisons resolve it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from attnprof.server.comparisons import alerts
from attnprof.server.runs import documents
from attnprof.server.trends import repository

# The threshold that governs each trend metric in a comparison: a utilisation moves with its rate.
THRESHOLD_OF = {
    "latency": "latency",
    "throughput": "throughput",
    "bandwidth": "bandwidth",
    "compute_util": "throughput",
    "bandwidth_util": "bandwidth",
}


def minimum_effect(session: Session, run_id: str, case_id: str, metric: str) -> float | None:
    """The case's minimum effect for ``metric`` as run ``run_id``'s comparisons resolve it (mode, suite, case)."""
    threshold = THRESHOLD_OF.get(metric)
    if threshold is None:
        return None
    return alerts.minimum_effect(documents.result_of(session, run_id), case_id, threshold)


def levels(session: Session, case_id: str, metric: str, compared: dict[str, Any]) -> dict[str, float]:
    """For each run of ``compared`` (its newest comparison, ``repository.comparisons_of``), the level its baseline
    runs had for the case: the median of their values (the runs a comparison pools; a pinned run or an accepted
    change is one). Runs compared with nothing (the first run of all) have none."""
    wanted = {str(b) for row in compared.values() for b in row.baseline_run_ids}
    values = repository.values_of(session, case_id, metric, sorted(wanted))
    out = {}
    for run_id, row in compared.items():
        found = [values[str(b)] for b in row.baseline_run_ids if str(b) in values]
        if found:
            out[run_id] = statistics.median(found)
    return out


def levels_of(session: Session, case_id: str, metric: str, run_ids: Sequence[str]) -> dict[str, float]:
    """``levels`` of the newest comparison of each of ``run_ids``."""
    return levels(session, case_id, metric, repository.comparisons_of(session, run_ids))
