from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, FromClause, Row, Select, String, any_, bindparam, select, true
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from attnprof.server.comparisons.models import Comparison
from attnprof.server.runs.models import Run, RunCase, RunKernel

# metric -> (median column, p25 column, p75 column)
CASE_METRICS = {
    "latency": (RunCase.latency_median_us, RunCase.latency_p25_us, RunCase.latency_p75_us),
    "throughput": (RunCase.tflops, None, None),
    "bandwidth": (RunCase.gbps, None, None),
    "compute_util": (RunCase.compute_util, None, None),
    "bandwidth_util": (RunCase.bandwidth_util, None, None),
}
KERNEL_METRICS = {
    "latency": (RunKernel.duration_median_us, RunKernel.duration_p25_us, RunKernel.duration_p75_us),
    "throughput": (RunKernel.tflops, None, None),
    "bandwidth": (RunKernel.gbps, None, None),
    "compute_util": (RunKernel.compute_util, None, None),
    "bandwidth_util": (RunKernel.bandwidth_util, None, None),
    "occupancy": (RunKernel.theoretical_occupancy, None, None),
}


@dataclass(frozen=True)
class TrendQuery:
    project_id: int
    testbed_id: int | None
    branch: str
    case_id: str
    since: datetime | None
    until: datetime | None
    after: tuple[datetime, str] | None
    limit: int


def case_points(session: Session, tq: TrendQuery, metric: str) -> list[Row[tuple[object, ...]]]:
    """Oldest first. One index range scan of ``ix_run_cases_trend``, then the run's commit by primary key."""
    med, p25, p75 = CASE_METRICS[metric]
    cols = [
        RunCase.run_id,
        Run.commit,
        RunCase.created_at,
        med,
        p25 or med,
        p75 or med,
        RunCase.status,
        RunCase.backend_used,
        RunCase.bound,
        RunCase.testbed_id,
    ]
    q = (
        select(*cols)
        .join(Run, Run.id == RunCase.run_id)
        .where(RunCase.project_id == tq.project_id, RunCase.branch == tq.branch, RunCase.case_id == tq.case_id)
    )
    return _page(session, q, tq)


def kernels_of_case(session: Session, key: str, *columns: Any) -> tuple[FromClause, ColumnElement[bool]]:
    """``columns`` of the kernels of ``key`` (labelled), to join to ``run_cases``: (the kernels, the join's ON).

    On Postgres a lateral subquery kept from being flattened into a join (``OFFSET 0``): joined, Postgres takes a
    key to match a case's kernels as rarely as it matches anyone's, expects a handful of points, and sorts every
    row of the case (~50 ms on 10,000 runs) instead of reading the first page in index order (~2 ms). SQLite has
    no LATERAL: there it is a derived table joined on the case, which gives the same rows.
    """
    if session.get_bind().dialect.name == "postgresql":
        lateral = select(*columns).where(RunKernel.run_case_id == RunCase.id, RunKernel.key == key).offset(0)
        return lateral.lateral("kernels"), true()
    derived = select(RunKernel.run_case_id, *columns).where(RunKernel.key == key).subquery("kernels")
    return derived, derived.c.run_case_id == RunCase.id


def kernel_points(session: Session, tq: TrendQuery, key: str, metric: str) -> list[Row[tuple[object, ...]]]:
    """Oldest first: the case's rows in the order of ``ix_run_cases_trend``, each joined to its kernels of ``key``
    (``kernels_of_case``)."""
    med, p25, p75 = KERNEL_METRICS[metric]
    kernels, on = kernels_of_case(
        session,
        key,
        med.label("median"),
        (p25 or med).label("p25"),
        (p75 or med).label("p75"),
        RunKernel.phase,
        RunKernel.launches_per_iter,
        RunKernel.bound,
    )
    k = kernels.c
    cols = [
        RunCase.run_id,
        Run.commit,
        RunCase.created_at,
        k.median,
        k.p25,
        k.p75,
        k.phase,
        k.launches_per_iter,
        k.bound,
        RunCase.testbed_id,
    ]
    q = (
        select(*cols)
        .select_from(RunCase)
        .join(kernels, on)
        .join(Run, Run.id == RunCase.run_id)
        .where(RunCase.project_id == tq.project_id, RunCase.branch == tq.branch, RunCase.case_id == tq.case_id)
    )
    return _page(session, q, tq)


def _page(session: Session, q: Select[*tuple[Any, ...]], tq: TrendQuery) -> list[Row[tuple[object, ...]]]:
    """One page of ``q`` in the trend's window: testbed, time range and cursor applied, oldest first."""
    if tq.testbed_id is not None:
        q = q.where(RunCase.testbed_id == tq.testbed_id)
    if tq.since is not None:
        q = q.where(RunCase.created_at >= tq.since)
    if tq.until is not None:
        q = q.where(RunCase.created_at < tq.until)
    if tq.after is not None:
        at, rid = tq.after
        q = q.where((RunCase.created_at > at) | ((RunCase.created_at == at) & (RunCase.run_id > rid)))
    return list(session.execute(q.order_by(RunCase.created_at, RunCase.run_id).limit(tq.limit)))


def among(session: Session, column: Any, ids: Sequence[str]) -> Any:
    """``column`` is one of ``ids``: one array parameter on Postgres (thousands of ids cost no long IN list)."""
    if session.get_bind().dialect.name == "postgresql":
        return column == any_(bindparam("ids", list(ids), type_=ARRAY(String(36))))
    return column.in_(list(ids))


def comparisons_of(session: Session, run_ids: Sequence[str]) -> dict[str, Row[*tuple[Any, ...]]]:
    """The newest comparison of each of ``run_ids`` (id, verdict, baseline run ids), by run id; no documents."""
    if not run_ids:
        return {}
    q = select(Comparison.candidate_run_id, Comparison.id, Comparison.verdict, Comparison.baseline_run_ids).where(
        among(session, Comparison.candidate_run_id, run_ids)
    )
    found: dict[str, Row[*tuple[Any, ...]]] = {}
    for row in session.execute(q.order_by(Comparison.created_at)):
        found[row.candidate_run_id] = row  # the newest last
    return found


def values_of(session: Session, case_id: str, metric: str, run_ids: Sequence[str]) -> dict[str, float]:
    """The case's ``metric`` in each of ``run_ids`` that measured it, by run id."""
    if not run_ids:
        return {}
    med = CASE_METRICS[metric][0]
    q = select(RunCase.run_id, med).where(
        RunCase.case_id == case_id, among(session, RunCase.run_id, run_ids), med.is_not(None)
    )
    return {r[0]: float(r[1]) for r in session.execute(q) if r[1] is not None}
