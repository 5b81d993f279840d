"""Queries of the trends page: the choices its form offers, the series of a case or a kernel in a window, and
what marks its points (alerts, failed comparisons, baseline rules), the baseline levels and the pull-request runs
drawn over it, and what orders runs by commit. Narrow column selects, never a run's whole document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, Select, String, any_, bindparam, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from attnprof.server.baselines.models import BaselineRule
from attnprof.server.comparisons.models import Alert, Comparison
from attnprof.server.runs.models import Run, RunCase, RunKernel
from attnprof.server.trends import repository as trends
from attnprof.server.trends.repository import TrendQuery


def case_ids(session: Session, project_id: int, limit: int) -> list[str]:
    """The case ids the project's newest run measured (the trend page's default choices)."""
    newest = select(Run.id).where(Run.project_id == project_id).order_by(Run.created_at.desc()).limit(1)
    q = select(RunCase.case_id).where(RunCase.run_id == newest.scalar_subquery()).order_by(RunCase.case_id)
    return list(session.scalars(q.limit(limit)))


def branches(session: Session, project_id: int, limit: int) -> list[str]:
    """The project's branches, the most recently run first."""
    q = (
        select(Run.branch)
        .where(Run.project_id == project_id)
        .group_by(Run.branch)
        .order_by(func.max(Run.created_at).desc())
        .limit(limit)
    )
    return list(session.scalars(q))


def has_branch(session: Session, project_id: int, branch: str) -> bool:
    q = select(Run.id).where(Run.project_id == project_id, Run.branch == branch).limit(1)
    return session.execute(q).first() is not None


def trend_case_ids(session: Session, project_id: int, testbed_id: int, branch: str, limit: int) -> list[str]:
    """The cases of the newest run on ``branch`` and ``testbed_id`` (one ``ix_runs_history`` probe), else of the
    project's newest run."""
    newest = (
        select(Run.id)
        .where(Run.project_id == project_id, Run.testbed_id == testbed_id, Run.branch == branch)
        .order_by(Run.created_at.desc())
        .limit(1)
        .scalar_subquery()
    )
    q = select(RunCase.case_id).where(RunCase.run_id == newest).order_by(RunCase.case_id).limit(limit)
    found = list(session.scalars(q))
    return found or case_ids(session, project_id, limit)


def kernel_keys(
    session: Session, project_id: int, testbed_id: int, branch: str, case_id: str, limit: int
) -> list[Row[tuple[Any, ...]]]:
    """Key and phase of each kernel of the case in its newest run on ``branch`` and ``testbed_id``."""
    newest = (
        select(RunCase.id)
        .where(
            RunCase.project_id == project_id,
            RunCase.testbed_id == testbed_id,
            RunCase.branch == branch,
            RunCase.case_id == case_id,
        )
        .order_by(RunCase.created_at.desc())
        .limit(1)
        .scalar_subquery()
    )
    q = (
        select(RunKernel.key, RunKernel.phase, RunKernel.duration_median_us)
        .where(RunKernel.run_case_id == newest)
        .order_by(RunKernel.duration_median_us.desc())
        .limit(limit)
    )
    return list(session.execute(q))


def case_series(session: Session, tq: TrendQuery, metric: str) -> list[Row[*tuple[Any, ...]]]:
    """(run_id, created_at, median, p25, p75) of a case's metric in the window, oldest first.

    ``attnprof.server.trends.repository.case_points`` without its join to ``runs``: the API needs each point's commit,
    the page only the drawn points' (``run_details``), and the join to 2,800 runs took three quarters of the time of
    a year's history on the benchmark database.
    """
    med, p25, p75 = trends.CASE_METRICS[metric]
    q = select(RunCase.run_id, RunCase.created_at, med, p25 or med, p75 or med).where(
        RunCase.project_id == tq.project_id, RunCase.branch == tq.branch, RunCase.case_id == tq.case_id
    )
    return _window(session, q, tq)


def kernel_series(session: Session, tq: TrendQuery, key: str, metric: str) -> list[Row[*tuple[Any, ...]]]:
    """(run_id, created_at, median, p25, p75) of one kernel of a case in the window, oldest first: the case's rows
    in index order, each joined to its kernel of ``key`` as ``attnprof.server.trends.repository.kernel_points`` joins
    them (``kernels_of_case``), without the join to ``runs``."""
    med, p25, p75 = trends.KERNEL_METRICS[metric]
    kernels, on = trends.kernels_of_case(
        session, key, med.label("median"), (p25 or med).label("p25"), (p75 or med).label("p75")
    )
    q = (
        select(RunCase.run_id, RunCase.created_at, kernels.c.median, kernels.c.p25, kernels.c.p75)
        .select_from(RunCase)
        .join(kernels, on)
        .where(RunCase.project_id == tq.project_id, RunCase.branch == tq.branch, RunCase.case_id == tq.case_id)
    )
    return _window(session, q, tq)


def _window(session: Session, q: Select[*tuple[Any, ...]], tq: TrendQuery) -> list[Row[*tuple[Any, ...]]]:
    if tq.testbed_id is not None:
        q = q.where(RunCase.testbed_id == tq.testbed_id)
    if tq.since is not None:
        q = q.where(RunCase.created_at >= tq.since)
    if tq.until is not None:
        q = q.where(RunCase.created_at < tq.until)
    return list(session.execute(q.order_by(RunCase.created_at, RunCase.run_id).limit(tq.limit)))


def run_details(session: Session, run_ids: Sequence[str]) -> dict[str, Row[*tuple[Any, ...]]]:
    """Commit and PR of the given runs, by id (what a trend point's hover and table row show)."""
    if not run_ids:
        return {}
    if session.get_bind().dialect.name == "postgresql":
        # One array parameter: hundreds of ids in an IN list cost more to send and parse than to look up.
        where = Run.id == any_(bindparam("run_ids", list(run_ids), type_=ARRAY(String(36))))
    else:
        where = Run.id.in_(run_ids)
    q = select(Run.id, Run.commit, Run.pr).where(where)
    return {r.id: r for r in session.execute(q)}


def trend_alerts(session: Session, project_id: int, testbed_id: int, case_id: str, metric: str) -> list[Alert]:
    """The alerts (steps) found on the case's metric on ``testbed_id``, oldest first."""
    q = select(Alert).where(
        Alert.project_id == project_id,
        Alert.testbed_id == testbed_id,
        Alert.case_id == case_id,
        Alert.metric == metric,
    )
    return list(session.scalars(q.order_by(Alert.created_at, Alert.id)))


_among = trends.among
comparisons_of = trends.comparisons_of
values_of = trends.values_of


def comparisons_by_id(session: Session, comparison_ids: Sequence[str]) -> list[Comparison]:
    """Comparisons with their documents (the failed ones a trend marks: few)."""
    if not comparison_ids:
        return []
    return list(session.scalars(select(Comparison).where(Comparison.id.in_(list(comparison_ids)))))


# First-parent ancestors read to order a branch's commits: a commit is placed after the nearest of these that has
# runs too. Reading the whole stored list (up to 50) of thousands of runs cost more than the rest of the page.
NEAREST_ANCESTORS = 3


def _nearest_ancestors() -> list[Any]:
    return [Run.ancestors[i].as_string() for i in range(NEAREST_ANCESTORS)]


def commits_of(session: Session, run_ids: Sequence[str]) -> list[tuple[str, str, list[str]]]:
    """(run id, commit, its nearest ``NEAREST_ANCESTORS`` first-parent ancestors) of each of ``run_ids``: what
    orders a branch's runs by commit."""
    if not run_ids:
        return []
    q = select(Run.id, Run.commit, *_nearest_ancestors()).where(_among(session, Run.id, run_ids))
    return [(r[0], r[1], [a for a in r[2:] if a]) for r in session.execute(q)]


def failed_of(session: Session, run_ids: Sequence[str]) -> dict[str, Row[*tuple[Any, ...]]]:
    """The newest comparison of each of ``run_ids`` whose verdict was fail (id, verdict, baseline run ids)."""
    if not run_ids:
        return {}
    q = select(Comparison.candidate_run_id, Comparison.id, Comparison.verdict, Comparison.baseline_run_ids).where(
        _among(session, Comparison.candidate_run_id, run_ids), Comparison.verdict == "fail"
    )
    return {row.candidate_run_id: row for row in session.execute(q.order_by(Comparison.created_at))}


def pr_series(
    session: Session, tq: TrendQuery, metric: str, branches: Sequence[str], limit: int
) -> list[Row[*tuple[Any, ...]]]:
    """The case's ``metric`` in the runs of ``branches`` (pull requests' branches: a range scan of the trend index
    each, where "not the default branch" would read every branch) on the testbed in the window, oldest
    first, at most ``limit`` (the newest): (run_id, created_at, median, p25, p75, commit, pr, branch, base_commit,
    and its nearest ``NEAREST_ANCESTORS`` first-parent ancestors)."""
    med, p25, p75 = trends.CASE_METRICS[metric]
    q = (
        select(
            RunCase.run_id,
            RunCase.created_at,
            med,
            p25 or med,
            p75 or med,
            Run.commit,
            Run.pr,
            Run.branch,
            Run.base_commit,
            *_nearest_ancestors(),
        )
        .join(Run, Run.id == RunCase.run_id)
        .where(
            RunCase.project_id == tq.project_id,
            RunCase.case_id == tq.case_id,
            RunCase.branch.in_(list(branches)),
            med.is_not(None),
        )
    )
    if tq.testbed_id is not None:
        q = q.where(RunCase.testbed_id == tq.testbed_id)
    if tq.since is not None:
        q = q.where(RunCase.created_at >= tq.since)
    if tq.until is not None:
        q = q.where(RunCase.created_at < tq.until)
    rows = list(session.execute(q.order_by(RunCase.created_at.desc(), RunCase.run_id).limit(limit)))
    rows.reverse()
    return rows


def latest_failed(session: Session, project_id: int, testbed_id: int, branch: str, limit: int) -> list[Comparison]:
    """The newest failed comparisons of runs on ``branch`` and ``testbed_id``, newest first (with documents)."""
    q = (
        select(Comparison)
        .join(Run, Run.id == Comparison.candidate_run_id)
        .where(
            Comparison.project_id == project_id,
            Comparison.verdict == "fail",
            Run.testbed_id == testbed_id,
            Run.branch == branch,
        )
        .order_by(Run.created_at.desc())
        .limit(limit)
    )
    return list(session.scalars(q))


def latest_regression_alert(session: Session, project_id: int, testbed_id: int) -> Row[*tuple[Any, ...]] | None:
    """The case and first bad run's time of the newest regression alert on ``testbed_id``."""
    q = (
        select(Alert.case_id, Run.created_at)
        .join(Run, Run.id == Alert.run_id)
        .where(Alert.project_id == project_id, Alert.testbed_id == testbed_id, Alert.regression.is_(True))
        .order_by(Run.created_at.desc())
        .limit(1)
    )
    return session.execute(q).first()


def run_times(session: Session, run_ids: Sequence[str]) -> dict[str, Any]:
    if not run_ids:
        return {}
    q = select(Run.id, Run.created_at).where(Run.id.in_(list(run_ids)))
    return {r.id: r.created_at for r in session.execute(q)}


def baseline_marks(session: Session, project_id: int) -> list[Row[tuple[Any, ...]]]:
    """The project's baseline rules (pin, exclude, accept): which run each names, and why."""
    q = select(BaselineRule.kind, BaselineRule.run_id, BaselineRule.reason).where(BaselineRule.project_id == project_id)
    return list(session.execute(q.order_by(BaselineRule.id)))
