"""Baseline selection (DESIGN 3.5) and the testbed's run-to-run noise floor, plus the rules people set.

Selection, for a candidate run on testbed key K:
1. pins on K serve, whatever else is true (an excluded run never serves, even pinned);
2. otherwise the nearest of ``base_commit`` and its first-parent ancestors (newest first) that has runs on
   the default branch on K: its newest runs, topped up from the next ancestors until ``baseline_runs`` are
   pooled (ancestors on the default branch passed their own comparison, so they differ by noise unless a
   change was accepted, which cuts the history);
3. with no such ancestor, the newest default-branch runs on K older than the candidate, and the comparison's
   notes say so.
An accepted change on K makes its run the baseline: runs older than it never serve again, and the accepted
run serves though it may sit on another branch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy.orm import Session

from profiler_core.analysis.config import RANGE_TO_SD
from service.baselines import repository
from service.baselines.models import BaselineRule
from service.config import Analysis
from service.errors import InvalidPayload, NotFound
from service.runs import repository as runs
from service.runs.models import Run

KINDS = ("pin", "exclude", "accept")
# Clamp of the learnt floor (relative range of run medians), by mode: below the lower bound a short
# history is just lucky, above the upper one the testbed is broken, not noisy.
FLOOR_BOUNDS = {"cuda": (0.005, 0.10), "cpu": (0.05, 0.60)}
MIN_HISTORY_RUNS = 3


@dataclass
class BaselineChoice:
    runs: list[Run]
    source: str = ""
    notes: list[str] = field(default_factory=list)


def select(
    session: Session, *, candidate: Run, default_branch: str, ancestors: list[str], cfg: Analysis
) -> BaselineChoice:
    rules = repository.rules(session, project_id=candidate.project_id, testbed_key=candidate.testbed_key)
    excluded = {r.run_id for r in rules if r.kind == "exclude"} | {candidate.id}
    pinned = [r.run_id for r in rules if r.kind == "pin" and r.run_id not in excluded]
    if pinned:
        return BaselineChoice(repository.runs_by_id(session, pinned), "pin", [f"baseline pinned: {len(pinned)} run(s)"])
    accepted = [r for r in rules if r.kind == "accept" and r.run_id != candidate.id]
    accept_run = runs.get(session, accepted[-1].run_id) if accepted else None
    since = accept_run.created_at if accept_run else None
    notes = [f"an accepted change (run {accept_run.id}) cut the history"] if accept_run else []
    window = repository.Window(candidate.project_id, candidate.testbed_key, candidate.created_at, excluded, since)
    chain = [c for c in dict.fromkeys([candidate.base_commit, *ancestors]) if c][: cfg.ancestor_commits_pooled]
    found = repository.runs_of_commits(
        session, window, branch=default_branch, commits=chain, limit=cfg.baseline_runs * len(chain) or 1
    )
    if found:
        order = {c: i for i, c in enumerate(chain)}
        found.sort(key=lambda r: (order[r.commit], -r.created_at.timestamp()))
        pool = found[: cfg.baseline_runs]
        nearest = pool[0].commit
        notes.append(f"baseline: {len(pool)} run(s) from ancestor {nearest[:12]} ({order[nearest]} commit(s) back)")
        return BaselineChoice(pool, "ancestor", notes)
    latest = repository.latest_runs(
        session,
        window,
        branch=default_branch,
        limit=cfg.baseline_runs,
        include=accept_run.id if accept_run else None,
    )
    if latest:
        why = "no run of the base commit or its ancestors on this testbed" if chain else "no base commit given"
        notes.append(f"{why}: the latest {len(latest)} default-branch run(s) older than this one serve")
    return BaselineChoice(latest, "latest" if latest else "none", notes)


def noise_floor(session: Session, *, candidate: Run, default_branch: str, cfg: Analysis) -> float | None:
    """The testbed's run-to-run noise floor from the default branch's history, or ``None`` (analysis default).

    For each case, the log-ratios of consecutive runs' medians; their MAD (x 1.4826, / sqrt 2 for the
    difference of two runs) estimates one run's relative standard deviation. The median over cases is robust
    to the few cases that really changed; ``RANGE_TO_SD`` turns it into the range the analysis expects.
    Suspect and excluded runs are left out; fewer than 3 runs give ``None``.
    """
    excluded = {r.run_id for r in repository.rules(session, project_id=candidate.project_id) if r.kind == "exclude"}
    history = repository.latest_runs(
        session,
        repository.Window(candidate.project_id, candidate.testbed_key, candidate.created_at, excluded | {candidate.id}),
        branch=default_branch,
        limit=cfg.noise_history_runs,
        suspect=False,
    )
    if len(history) < MIN_HISTORY_RUNS:
        return None
    order = {r.id: i for i, r in enumerate(reversed(history))}
    series: dict[str, list[tuple[int, float]]] = {}
    for run_id, case_id, median in repository.case_medians(session, [r.id for r in history]):
        series.setdefault(case_id, []).append((order[run_id], median))
    sds = []
    for points in series.values():
        if len(points) < MIN_HISTORY_RUNS:
            continue
        logs = np.log([m for _, m in sorted(points)])
        diffs = np.diff(logs)
        sds.append(1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2.0))
    if not sds:
        return None
    low, high = FLOOR_BOUNDS.get(candidate.mode, FLOOR_BOUNDS["cuda"])
    return min(high, max(low, RANGE_TO_SD * float(np.median(sds))))


def add_rule(session: Session, *, project_id: int, kind: str, run_id: str, reason: str | None) -> BaselineRule:
    run = runs.get_in_project(session, project_id, run_id)
    if run is None:
        raise NotFound(f"no run {run_id}")
    if kind == "exclude" and not reason:
        raise InvalidPayload("excluding a run needs a reason")
    existing = repository.find_rule(session, project_id=project_id, kind=kind, run_id=run_id)
    if existing is not None:
        return existing
    rule = BaselineRule(project_id=project_id, kind=kind, run_id=run_id, testbed_key=run.testbed_key, reason=reason)
    return repository.add_rule(session, rule)


def remove_rule(session: Session, *, project_id: int, kind: str, run_id: str) -> None:
    if repository.delete_rules(session, project_id=project_id, kind=kind, run_id=run_id) == 0:
        raise NotFound(f"no {kind} of run {run_id}")


def list_rules(session: Session, *, project_id: int) -> list[BaselineRule]:
    return repository.rules(session, project_id=project_id)
