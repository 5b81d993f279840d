from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from service.baselines.repository import shares_a_case
from service.comparisons.models import Alert, Comparison
from service.runs.models import Run, RunCase


def add_comparison(session: Session, comparison: Comparison) -> Comparison:
    session.add(comparison)
    session.flush()
    return comparison


def get_comparison(session: Session, comparison_id: str) -> Comparison | None:
    return session.get(Comparison, comparison_id)


def latest_for_run(session: Session, run_id: str) -> Comparison | None:
    q = select(Comparison).where(Comparison.candidate_run_id == run_id).order_by(Comparison.created_at.desc())
    return session.scalars(q.limit(1)).first()


def history(
    session: Session,
    *,
    project_id: int,
    testbed_key: str,
    branch: str,
    exclude: Sequence[str],
    limit: int,
    cases_of: str | None = None,
) -> list[Run]:
    """The newest non-suspect runs on ``branch`` on ``testbed_key`` (sharing a case with run ``cases_of`` when
    given), newest first (their documents not loaded)."""
    q = (
        select(Run)
        .options(defer(Run.document))
        .where(
            Run.project_id == project_id,
            Run.testbed_key == testbed_key,
            Run.branch == branch,
            Run.suspect.is_(False),
        )
    )
    if exclude:
        q = q.where(Run.id.not_in(exclude))
    if cases_of is not None:
        q = q.where(shares_a_case(cases_of))
    return list(session.scalars(q.order_by(Run.created_at.desc()).limit(limit)))


def medians(session: Session, run_ids: Sequence[str]) -> list[tuple[str, str, float]]:
    q = select(RunCase.run_id, RunCase.case_id, RunCase.latency_median_us).where(
        RunCase.run_id.in_(run_ids), RunCase.status == "ok", RunCase.latency_median_us.is_not(None)
    )
    return [(r, c, float(m or 0.0)) for r, c, m in session.execute(q)]


def alert_exists(session: Session, *, project_id: int, testbed_id: int, case_id: str, metric: str, run_id: str) -> bool:
    q = select(Alert.id).where(
        Alert.project_id == project_id,
        Alert.testbed_id == testbed_id,
        Alert.case_id == case_id,
        Alert.metric == metric,
        Alert.run_id == run_id,
    )
    return session.scalars(q).first() is not None


def add_alert(session: Session, alert: Alert) -> None:
    session.add(alert)
    session.flush()


def list_alerts(
    session: Session, *, project_id: int, regressions_only: bool, after_id: int | None, limit: int
) -> list[Alert]:
    q = select(Alert).where(Alert.project_id == project_id)
    if regressions_only:
        q = q.where(Alert.regression.is_(True))
    if after_id is not None:
        q = q.where(Alert.id < after_id)
    return list(session.scalars(q.order_by(Alert.id.desc()).limit(limit)))
