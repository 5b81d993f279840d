"""``analyze``: baseline, noise floor, comparison, change points for one stored run. Plain code: the upload
endpoint calls it inline and the worker's ``analysis.run`` task calls the same function with its session."""

from __future__ import annotations

import math
import uuid

from sqlalchemy.orm import Session

from profiler_core.analysis import AnalysisError, compare, e_divisive
from service.baselines import repository as baseline_rules
from service.baselines import service as baselines
from service.baselines import suites
from service.comparisons import documents as comparison_documents
from service.comparisons import repository
from service.comparisons.models import Alert, Comparison
from service.config import Analysis
from service.errors import InvalidPayload, NotFound
from service.projects import repository as projects
from service.runs import documents
from service.runs import repository as runs
from service.runs.models import Run

ALERT_METRIC = "latency"
ALERT_ALPHA = 0.01
ALERT_MIN_SIZE = 5


def analyze(session: Session, *, run_id: str, cfg: Analysis, seed: int = 0) -> Comparison:
    """Compare run ``run_id`` with its baseline, store the comparison, and look for change points when the run
    is on the default branch. Nothing is committed: the caller's request or task owns the transaction.

    The documents come through ``documents.result_of``: the candidate's was kept when it was stored in this process
    (an upload), and the same baseline runs serve comparison after comparison, so most analyses validate none."""
    run = runs.get(session, run_id)
    if run is None:
        raise NotFound(f"no run {run_id}")
    project = projects.get(session, run.project_id)
    assert project is not None
    branch = project.default_branch
    candidate = documents.result_of(session, run)
    # Baselines are runs of the candidate's suite; its name is known here without reading the stored document.
    suites.remember(run.id, candidate.suite.name)
    choice = baselines.select(
        session, candidate=run, default_branch=branch, ancestors=[str(a) for a in run.ancestors], cfg=cfg
    )
    floor = baselines.noise_floor(session, candidate=run, default_branch=branch, cfg=cfg)
    try:
        doc = compare(
            [documents.result_of(session, b) for b in choice.runs],
            candidate,
            noise_floor=floor,
            seed=seed,
            first_run=choice.first_run,
        )
    except AnalysisError as exc:
        raise InvalidPayload(f"cannot compare this run with its baseline: {exc}") from exc
    doc.notes[:0] = choice.notes
    if floor is not None:
        doc.notes.append(f"noise floor {floor:.4f} learnt from this suite's default-branch history on this testbed")
    comparison = repository.add_comparison(
        session,
        Comparison(
            id=str(uuid.uuid4()),
            project_id=run.project_id,
            candidate_run_id=run.id,
            baseline_run_ids=[b.id for b in choice.runs],
            verdict=doc.verdict,
            noise_floor=floor,
            document=doc.model_dump(mode="json", by_alias=True),
        ),
    )
    comparison_documents.remember(comparison.id, doc)
    if run.branch == branch and not run.suspect:
        detect_alerts(session, run=run, cfg=cfg, seed=seed)
    return comparison


def detect_alerts(session: Session, *, run: Run, cfg: Analysis, seed: int = 0) -> list[Alert]:
    """E-divisive change points of each case's median latency over the default branch's recent history of the
    run's suite (another suite's runs of the same case ids are not its history).

    Works on the normalised medians (not the documents), the same series that ``changepoints`` builds.
    A change point already recorded is not recorded twice.
    """
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
    if len(history) < 2 * ALERT_MIN_SIZE:
        return []
    order = {r.id: i for i, r in enumerate(history)}
    series: dict[str, list[tuple[int, str, float]]] = {}
    for run_id, case_id, median in repository.medians(session, list(order)):
        series.setdefault(case_id, []).append((order[run_id], run_id, median))
    found: list[Alert] = []
    for case_id, points in series.items():
        points.sort()
        values = [m for _, _, m in points if math.isfinite(m)]
        if len(values) < 2 * ALERT_MIN_SIZE:
            continue
        for cp in e_divisive(values, alpha=ALERT_ALPHA, min_size=ALERT_MIN_SIZE, seed=seed):
            at_run = points[cp.index][1]
            if repository.alert_exists(
                session,
                project_id=run.project_id,
                testbed_id=run.testbed_id,
                case_id=case_id,
                metric=ALERT_METRIC,
                run_id=at_run,
            ):
                continue
            alert = Alert(
                metric=ALERT_METRIC,
                run_id=at_run,
                before=cp.mean_before,
                after=cp.mean_after,
                change=cp.change,
                p=cp.p,
                regression=cp.mean_after > cp.mean_before,
                project_id=run.project_id,
                testbed_id=run.testbed_id,
                case_id=case_id,
            )
            repository.add_alert(session, alert)
            found.append(alert)
    return found
