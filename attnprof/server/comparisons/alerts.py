"""Alerts: the steps that change-point detection finds on the default branch, kept when they matter.

A change point is an alert only when its size reaches the case's minimum effect for the metric, the same one its
comparisons use (``attnprof.core.analysis.config.resolve``: the mode's default, 2% on CUDA and 30% on CPU for
latency, then the suite's and the case's thresholds): e-divisive on 40 runs finds wiggles of under 1% that a
comparison would call unchanged, and a person should not hear about them twice over.

One step is one alert. It is keyed on the step (case, metric, testbed, and the two runs it lies between: the last
of the old level and the first of the new), not on the run whose analysis revealed it; detection run again as the
history grows finds the same step again, maybe a run earlier or later as more points settle its place, and
updates that alert (its levels, spreads, interval and p) instead of adding one. Plain code: nothing here commits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from scipy import stats as sps
from sqlalchemy.orm import Session

from attnprof.core.analysis import e_divisive
from attnprof.core.analysis.config import resolve
from attnprof.core.documents import ResultDocument
from attnprof.server.audit import service as audit_log
from attnprof.server.auth import repository as tokens
from attnprof.server.baselines import repository as baseline_rules
from attnprof.server.baselines import suites
from attnprof.server.comparisons import repository
from attnprof.server.comparisons.models import Alert
from attnprof.server.config import Analysis
from attnprof.server.db import utcnow
from attnprof.server.errors import Conflict, NotFound
from attnprof.server.runs.models import Run

METRIC = "latency"
UNIT = "us"
ALPHA = 0.01
MIN_SIZE = 5
# Two change points of one case within this many runs of each other, in the same direction, are one step whose
# place moved as the history grew.
SAME_STEP_RUNS = MIN_SIZE
CI_LEVEL = 0.95


@dataclass(frozen=True)
class Step:
    """One step of a case's series: where it lies and how big it is (levels in ``UNIT``)."""

    case_id: str
    index: int
    before_run_id: str
    run_id: str
    before: float
    after: float
    before_sd: float
    after_sd: float
    before_runs: int
    after_runs: int
    change: float
    ci_low: float | None
    ci_high: float | None
    p: float
    min_effect: float

    @property
    def regression(self) -> bool:
        return self.after > self.before  # latency: higher is worse


def minimum_effect(document: ResultDocument, case_id: str, metric: str = METRIC) -> float:
    """The case's minimum relative effect for ``metric``, as its comparisons resolve it."""
    case = document.case(case_id)
    return resolve(document.run.mode, document.suite.thresholds, case.thresholds if case else None).minimum(metric)


def change_interval(before: Sequence[float], after: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float]:
    """A ``level`` interval of ``mean(after) / mean(before) - 1`` (Welch's t on the difference of the means, over
    the mean before): how sure the size of a step is, from the spread of the runs on each side."""
    a, b = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    mean_a, mean_b = float(a.mean()), float(b.mean())
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        change = mean_b / mean_a - 1
        return change, change
    dof = (va + vb) ** 2 / ((va**2 / (a.size - 1) if va else 0.0) + (vb**2 / (b.size - 1) if vb else 0.0))
    t = float(sps.t.ppf(0.5 + level / 2, dof))
    diff = mean_b - mean_a
    return (diff - t * se) / mean_a, (diff + t * se) / mean_a


def _settled_split(segment: np.ndarray) -> int | None:
    """Where the mean of ``segment`` (two levels, as e-divisive cut them) changes: the split with the least squared
    error, allowed anywhere. None when it leaves fewer than ``MIN_SIZE`` runs on a side: a new level with fewer
    runs than that is not settled yet (e-divisive, held to ``MIN_SIZE`` runs a side, cuts such a series early,
    with the first runs of the new level in the old one), and the next runs place the step."""
    m = segment.size
    centred = segment - segment.mean()  # keeps the sums of squares accurate for values of any size
    total = np.cumsum(centred)
    squares = np.cumsum(centred**2)
    t = np.arange(1, m)
    left_sse = squares[t - 1] - total[t - 1] ** 2 / t
    right_sse = (squares[-1] - squares[t - 1]) - (total[-1] - total[t - 1]) ** 2 / (m - t)
    best = int(t[np.argmin(left_sse + right_sse)])
    return best if MIN_SIZE <= best <= m - MIN_SIZE else None


def steps_of(case_id: str, points: Sequence[tuple[str, float]], *, min_effect: float, seed: int = 0) -> list[Step]:
    """The steps of one case's series (``points``: (run id, value), oldest first) at least ``min_effect`` big.

    Each change point's place is settled within the two segments around it (``_settled_split``), and its levels are
    the means of the runs on either side, up to the neighbouring change points."""
    values = np.array([v for _, v in points], dtype=float)
    if values.size < 2 * MIN_SIZE:
        return []
    found = e_divisive(values, alpha=ALPHA, min_size=MIN_SIZE, seed=seed)
    cuts = sorted(cp.index for cp in found)
    edges = [0, *cuts, values.size]
    out: list[Step] = []
    for cp in found:
        k = edges.index(cp.index)
        lo, hi = edges[k - 1], edges[k + 1]
        at = _settled_split(values[lo:hi])
        if at is None:
            continue
        index = lo + at
        if any(step.index == index for step in out):
            continue
        left, right = values[lo:index], values[index:hi]
        before, after = float(left.mean()), float(right.mean())
        if before <= 0:
            continue
        change = after / before - 1
        if abs(change) < min_effect:
            continue
        low, high = change_interval(left.tolist(), right.tolist())
        out.append(
            Step(
                case_id=case_id,
                index=index,
                before_run_id=points[index - 1][0],
                run_id=points[index][0],
                before=before,
                after=after,
                before_sd=float(left.std(ddof=1)),
                after_sd=float(right.std(ddof=1)),
                before_runs=int(left.size),
                after_runs=int(right.size),
                change=change,
                ci_low=low,
                ci_high=high,
                p=cp.p,
                min_effect=min_effect,
            )
        )
    return out


def detect(session: Session, *, run: Run, document: ResultDocument, cfg: Analysis, seed: int = 0) -> list[Alert]:
    """Find the steps in each case's median latency over the default branch's recent history of the run's suite
    (another suite's runs of the same case ids are not its history), and record each as an alert, or update the
    alert of a step found before. Returns the alerts added (not those updated). ``document`` is the run's: it
    gives each case's minimum effect."""
    excluded = [r.run_id for r in baseline_rules.rules(session, project_id=run.project_id) if r.kind == "exclude"]
    history = suites.first_of_suite(
        session,
        suites.name_of(session, run.id),
        lambda n: repository.history(
            session,
            project_id=run.project_id,
            testbed_key=run.testbed_key,
            branch=run.branch,
            exclude=excluded,
            limit=n,
            cases_of=run.id,
        ),
        cfg.alert_history_runs,
    )
    history.reverse()  # oldest first
    if len(history) < 2 * MIN_SIZE:
        return []
    order = {r.id: i for i, r in enumerate(history)}
    series: dict[str, list[tuple[int, str, float]]] = {}
    for run_id, case_id, median in repository.medians(session, list(order)):
        if math.isfinite(median):
            series.setdefault(case_id, []).append((order[run_id], run_id, median))
    now = utcnow()
    notify = repository.webhook_of(session, run.project_id) is not None
    added: list[Alert] = []
    for case_id, rows in series.items():
        rows.sort()
        points = [(run_id, median) for _, run_id, median in rows]
        steps = steps_of(case_id, points, min_effect=minimum_effect(document, case_id), seed=seed)
        if not steps:
            continue
        place = {run_id: i for i, (run_id, _) in enumerate(points)}
        known = repository.case_alerts(
            session, project_id=run.project_id, testbed_id=run.testbed_id, case_id=case_id, metric=METRIC
        )
        for step in steps:
            same = _same_step(step, known, place)
            if same is not None:
                _update(session, same, step, now)
                continue
            alert = _new(run, step, now, notify=notify)
            if repository.add_alert_once(session, alert):
                added.append(alert)
                known.append(alert)
    return added


def _same_step(step: Step, known: Sequence[Alert], place: dict[str, int]) -> Alert | None:
    """The recorded alert that is this step: the same pair of runs, else one in the same direction whose first run
    of the new level lies within ``SAME_STEP_RUNS`` runs of this one's in the history."""
    for alert in known:
        if alert.before_run_id == step.before_run_id and alert.run_id == step.run_id:
            return alert
    near = [
        (abs(place[a.run_id] - step.index), a)
        for a in known
        if a.run_id in place and a.regression == step.regression and abs(place[a.run_id] - step.index) <= SAME_STEP_RUNS
    ]
    return min(near, key=lambda found: found[0])[1] if near else None


def _update(session: Session, alert: Alert, step: Step, now: datetime) -> None:
    if (alert.before_run_id, alert.run_id) != (step.before_run_id, step.run_id) and not repository.step_taken(
        session, alert, before_run_id=step.before_run_id, run_id=step.run_id
    ):
        alert.before_run_id, alert.run_id = step.before_run_id, step.run_id
    alert.before, alert.after, alert.change = step.before, step.after, step.change
    alert.before_sd, alert.after_sd = step.before_sd, step.after_sd
    alert.before_runs, alert.after_runs = step.before_runs, step.after_runs
    alert.ci_low, alert.ci_high, alert.p, alert.min_effect = step.ci_low, step.ci_high, step.p, step.min_effect
    alert.updated_at = now
    session.flush()


def _new(run: Run, step: Step, now: datetime, *, notify: bool) -> Alert:
    return Alert(
        project_id=run.project_id,
        testbed_id=run.testbed_id,
        case_id=step.case_id,
        metric=METRIC,
        unit=UNIT,
        before_run_id=step.before_run_id,
        run_id=step.run_id,
        before=step.before,
        after=step.after,
        before_sd=step.before_sd,
        after_sd=step.after_sd,
        before_runs=step.before_runs,
        after_runs=step.after_runs,
        change=step.change,
        ci_low=step.ci_low,
        ci_high=step.ci_high,
        min_effect=step.min_effect,
        p=step.p,
        regression=step.regression,
        created_at=now,
        updated_at=now,
        notify_due_at=now if notify else None,
        notify_attempts=0,
    )


def who(session: Session, token_id: int, *, via: str) -> str:
    """How an acknowledgement names its author: the token's name (or its first characters) and role, and the way
    in (``API`` or ``dashboard``)."""
    token = tokens.get(session, token_id)
    if token is None:
        return f"token #{token_id} ({via})"
    label = token.name or f"token {token.prefix}…"
    return f"{label} ({token.role}, {via})"


def audit(session: Session, token_id: int | None, *, kind: str, detail: str) -> None:
    """Record an admin's change to alerts in the audit log, under the token that made it."""
    token = tokens.get(session, token_id) if token_id is not None else None
    if token is not None:
        audit_log.record(session, kind=kind, token=token, detail=detail)


def acknowledge(
    session: Session, *, project_id: int, alert_id: int, note: str, by: str, token_id: int | None = None
) -> Alert:
    """Mark alert ``alert_id`` of the project as read, with ``note``, by ``by`` (token ``token_id``: audited).
    ``NotFound`` for an alert of another project or none; ``Conflict`` for one acknowledged before (its note is
    not overwritten)."""
    alert = repository.get_alert(session, project_id, alert_id)
    if alert is None:
        raise NotFound(f"no alert {alert_id}")
    if alert.acknowledged_at is not None:
        raise Conflict(
            f"alert {alert_id} was acknowledged by {alert.acknowledged_by} "
            f"at {alert.acknowledged_at:%Y-%m-%d %H:%M} UTC"
        )
    alert.acknowledged_at = utcnow()
    alert.acknowledged_by = by[:300]
    alert.acknowledged_note = note
    session.flush()
    audit(session, token_id, kind="alert.acknowledged", detail=f"alert {alert_id} ({alert.case_id}): {note[:200]}")
    return alert
