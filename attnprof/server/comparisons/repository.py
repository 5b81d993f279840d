from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer

from attnprof.server.baselines.repository import shares_a_case
from attnprof.server.comparisons.models import Alert, AlertWebhook, Comparison
from attnprof.server.runs.models import Run, RunCase
from attnprof.server.testbeds.models import HostNotice


def add_comparison(session: Session, comparison: Comparison) -> Comparison:
    session.add(comparison)
    session.flush()
    return comparison


def get_comparison(session: Session, comparison_id: str) -> Comparison | None:
    return session.get(Comparison, comparison_id)


def latest_for_run(session: Session, run_id: str, mode: str | None = None) -> Comparison | None:
    """The newest comparison of run ``run_id``: the one that gave its verdict (a paired job's paired comparison is
    stored after its stored-history one); ``mode`` (history, paired): the newest of that mode."""
    q = select(Comparison).where(Comparison.candidate_run_id == run_id)
    if mode is not None:
        q = q.where(Comparison.mode == mode)
    q = q.order_by(Comparison.created_at.desc(), (Comparison.mode == "paired").desc())
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


# --- alerts ------------------------------------------------------------------------------------------------


def case_alerts(session: Session, *, project_id: int, testbed_id: int, case_id: str, metric: str) -> list[Alert]:
    """The alerts recorded on one case's metric on a testbed, oldest first."""
    q = select(Alert).where(
        Alert.project_id == project_id, Alert.testbed_id == testbed_id, Alert.case_id == case_id, Alert.metric == metric
    )
    return list(session.scalars(q.order_by(Alert.id)))


def step_taken(session: Session, alert: Alert, *, before_run_id: str, run_id: str) -> bool:
    """Whether another alert of ``alert``'s case already holds the step between these two runs."""
    q = select(Alert.id).where(
        Alert.project_id == alert.project_id,
        Alert.testbed_id == alert.testbed_id,
        Alert.case_id == alert.case_id,
        Alert.metric == alert.metric,
        Alert.before_run_id == before_run_id,
        Alert.run_id == run_id,
        Alert.id != alert.id,
    )
    return session.scalars(q).first() is not None


def add_alert_once(session: Session, alert: Alert) -> bool:
    """Add ``alert`` unless its step is recorded already (by a concurrent analysis, say): True when added. A
    savepoint keeps the caller's transaction whole when the step's unique key refuses it."""
    try:
        with session.begin_nested():
            session.add(alert)
            session.flush()
    except IntegrityError:
        return False
    return True


def get_alert_by_id(session: Session, alert_id: int) -> Alert | None:
    return session.get(Alert, alert_id)


def get_alert(session: Session, project_id: int, alert_id: int) -> Alert | None:
    found = session.get(Alert, alert_id)
    return found if found is not None and found.project_id == project_id else None


def list_alerts(
    session: Session,
    *,
    project_id: int,
    regressions_only: bool,
    unacknowledged_only: bool = False,
    after_id: int | None,
    limit: int,
) -> list[Alert]:
    q = select(Alert).where(Alert.project_id == project_id)
    if regressions_only:
        q = q.where(Alert.regression.is_(True))
    if unacknowledged_only:
        q = q.where(Alert.acknowledged_at.is_(None))
    if after_id is not None:
        q = q.where(Alert.id < after_id)
    return list(session.scalars(q.order_by(Alert.id.desc()).limit(limit)))


def commits_of(session: Session, run_ids: Sequence[str]) -> dict[str, tuple[str, datetime]]:
    """Commit and time of each of ``run_ids``, by id."""
    if not run_ids:
        return {}
    q = select(Run.id, Run.commit, Run.created_at).where(Run.id.in_(set(run_ids)))
    return {r.id: (r.commit, r.created_at) for r in session.execute(q)}


# --- the webhook and its outbox ----------------------------------------------------------------------------------


def webhook_of(session: Session, project_id: int) -> AlertWebhook | None:
    return session.get(AlertWebhook, project_id)


def save_webhook(session: Session, hook: AlertWebhook) -> AlertWebhook:
    merged = session.merge(hook)
    session.flush()
    return merged


def delete_webhook(session: Session, project_id: int) -> bool:
    found = session.get(AlertWebhook, project_id)
    if found is None:
        return False
    session.delete(found)
    session.flush()
    return True


OwedModel = type[Alert] | type[HostNotice]
"""A table whose rows are owed to a project's webhook: its ``notify_*`` columns are the outbox
(``attnprof.server.comparisons.alert_outbox``)."""


def due_deliveries(session: Session, model: OwedModel, *, now: datetime, limit: int) -> list[int]:
    """Ids of ``model``'s rows whose webhook delivery is due at ``now``, the longest owed first."""
    q = select(model.id).where(model.notify_due_at.is_not(None), model.notify_due_at <= now)
    return [int(i) for i in session.scalars(q.order_by(model.notify_due_at, model.id).limit(limit))]


def claim_delivery(session: Session, model: OwedModel, row_id: int, *, now: datetime, until: datetime) -> bool:
    """Move a due delivery's ``notify_due_at`` to ``until`` in one conditional statement: True for the one sender
    that did it (another sender then finds it due later and skips it)."""
    q = (
        update(model)
        .where(model.id == row_id, model.notify_due_at.is_not(None), model.notify_due_at <= now)
        .values(notify_due_at=until)
        .execution_options(synchronize_session=False)
    )
    return bool(session.execute(q).rowcount)  # type: ignore[attr-defined]


def settle_delivery(
    session: Session,
    model: OwedModel,
    row_id: int,
    *,
    claim: datetime,
    due_at: datetime | None,
    attempts: int,
    notified_at: datetime | None,
    error: str | None,
) -> bool:
    """Record a delivery made under ``claim``; False when the claim was no longer this sender's."""
    q = (
        update(model)
        .where(model.id == row_id, model.notify_due_at == claim)
        .values(notify_due_at=due_at, notify_attempts=attempts, notified_at=notified_at, notify_error=error)
        .execution_options(synchronize_session=False)
    )
    return bool(session.execute(q).rowcount)  # type: ignore[attr-defined]
