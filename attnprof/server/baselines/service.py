"""Baseline selection (docs/architecture.md, "Baselines") and the testbed's run-to-run noise floor, plus the rules
people set.

Selection, for a candidate run on testbed key K, among the runs of its suite (``suites``: the same suite name and at
least one case id in common), so that a project's suites never serve one another:
1. pins on K of runs of the suite serve, whatever else is true (an excluded run never serves, even pinned); a pin
   of another suite's run serves that suite only, and the notes of this suite's comparisons say it was left out;
2. otherwise the nearest of ``base_commit`` and its first-parent ancestors (newest first) that has runs of the
   suite on the default branch on K: its newest runs, topped up from the next ancestors until ``baseline_runs``
   are pooled (ancestors on the default branch passed their own comparison, so they differ by noise unless a
   change was accepted, which cuts the history);
3. with no such ancestor, the newest default-branch runs of the suite on K older than the candidate, and the
   comparison's notes say so;
4. with none of those either, no baseline: the first run of all on K (no default-branch run of any suite) passes,
   and a run whose suite has no history yet though others have warns on each of its cases (``first_run``).
Runs of another key never serve, whatever their testbed's name or branch: another GPU model (or driver, or mode)
times the same code differently. When K has no baseline but the candidate's testbed holds default-branch runs of the
suite on other keys (uploads to a testbed no worker keyed; a testbed keyed again after an upgrade), the notes name
each such key, its device and its newest run, so that a history that seems to vanish is explained.
An accepted change of a run of the suite on K makes that run the baseline: older runs of the suite never serve
again, and the accepted run serves though it may sit on another branch. Another suite's accepted change does not
cut this suite's history. A pooled baseline that lacks some of the candidate's cases (the suite grew) serves the
cases it has; the new ones are compared with nothing and warn.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy.orm import Session

from attnprof.core.analysis.config import RANGE_TO_SD
from attnprof.server.baselines import repository, suites
from attnprof.server.baselines.models import BaselineRule
from attnprof.server.config import Analysis
from attnprof.server.errors import InvalidPayload, NotFound
from attnprof.server.runs import documents
from attnprof.server.runs import repository as runs
from attnprof.server.runs.models import Run
from attnprof.server.testbeds import service as testbeds

KINDS = ("pin", "exclude", "accept")
# Clamp of the learnt floor (relative range of run medians), by mode: below the lower bound a short
# history is just lucky, above the upper one the testbed is broken, not noisy.
FLOOR_BOUNDS = {"cuda": (0.005, 0.10), "cpu": (0.05, 0.60)}
MIN_HISTORY_RUNS = 3
# Runs of other keys read to name them when a run's own key has no history, and how many keys a note names.
OTHER_KEYS_SEEN = 50
OTHER_KEYS_NAMED = 3


@dataclass
class BaselineChoice:
    """``first_run``: no baseline because nothing ran before on the testbed's default branch (not because only
    other suites did)."""

    runs: list[Run]
    source: str = ""
    notes: list[str] = field(default_factory=list)
    first_run: bool = False


def _few(items: Sequence[str], limit: int = 3) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def select(
    session: Session, *, candidate: Run, default_branch: str, ancestors: list[str], cfg: Analysis
) -> BaselineChoice:
    suite = suites.name_of(session, candidate.id)
    rules = repository.rules(session, project_id=candidate.project_id, testbed_key=candidate.testbed_key)
    excluded = {r.run_id for r in rules if r.kind == "exclude"} | {candidate.id}
    pinned = [r.run_id for r in rules if r.kind == "pin" and r.run_id not in excluded]
    notes: list[str] = []
    if pinned:
        mine = suites.keep(session, suite, repository.runs_by_id(session, pinned, cases_of=candidate.id))
        if mine:
            return BaselineChoice(mine, "pin", [f"baseline pinned: {len(mine)} run(s)"])
        notes.append(
            f"pinned run(s) {_few(pinned)} ran another suite (or none of this run's cases): not a baseline of "
            f"suite {suite!r}, which is compared with its own history"
        )
    accepted = [r.run_id for r in rules if r.kind == "accept" and r.run_id != candidate.id]
    of_suite = {
        r.id: r for r in suites.keep(session, suite, repository.runs_by_id(session, accepted, cases_of=candidate.id))
    }
    accept_run = next((of_suite[i] for i in reversed(accepted) if i in of_suite), None)
    since = accept_run.created_at if accept_run else None
    if accept_run:
        notes.append(f"an accepted change (run {accept_run.id}) cut the history")
    window = repository.Window(
        candidate.project_id,
        candidate.testbed_key,
        candidate.created_at,
        excluded,
        since,
        cases_of=candidate.id,
        testbed_id=candidate.testbed_id,
    )
    chain = [c for c in dict.fromkeys([candidate.base_commit, *ancestors]) if c][: cfg.ancestor_commits_pooled]
    include = accept_run.id if accept_run else None
    own = _from_history(session, window, suite, chain, default_branch, cfg, include)
    if own is not None:
        return BaselineChoice(own[0], own[1], notes + own[2])
    # The testbed's own history has none: another testbed of the same device key (a pool of the same GPU model,
    # driver and mode under another name) serves, and says so.
    shared = _from_history(
        session, dataclasses.replace(window, testbed_id=None), suite, chain, default_branch, cfg, include
    )
    if shared is not None:
        names = repository.testbed_names(session, {r.testbed_id for r in shared[0]})
        return BaselineChoice(
            shared[0],
            shared[1],
            notes
            + shared[2]
            + [
                f"this testbed has no history of suite {suite!r} yet: runs of testbed(s) {', '.join(names)}, on the "
                "same device key, serve"
            ],
        )
    anything = repository.Window(
        candidate.project_id, candidate.testbed_key, candidate.created_at, excluded, testbed_id=candidate.testbed_id
    )
    first_run = not repository.latest_runs(session, anything, branch=default_branch, limit=1)
    if not first_run:
        notes.append(
            f"no earlier default-branch run of suite {suite!r} on this testbed shares a case with this run "
            "(runs of other suites are no baseline of its cases)"
        )
    notes += _other_keys(session, candidate, suite, default_branch)
    return BaselineChoice([], "none", notes, first_run=first_run)


def _from_history(
    session: Session,
    window: repository.Window,
    suite: str | None,
    chain: list[str],
    default_branch: str,
    cfg: Analysis,
    include: str | None,
) -> tuple[list[Run], str, list[str]] | None:
    """The runs of ``window`` that serve: the nearest ancestor's in ``chain``, else the latest on the default branch
    (and ``include``, an accepted change's run); with the source and notes. None when none does."""
    found = suites.first_of_suite(
        session,
        suite,
        lambda n: repository.runs_of_commits(session, window, branch=default_branch, commits=chain, limit=n),
        cfg.baseline_runs * len(chain),
    )
    if found:
        order = {c: i for i, c in enumerate(chain)}
        found.sort(key=lambda r: (order[r.commit], -r.created_at.timestamp()))
        pool = found[: cfg.baseline_runs]
        nearest = pool[0].commit
        return (
            pool,
            "ancestor",
            [f"baseline: {len(pool)} run(s) from ancestor {nearest[:12]} ({order[nearest]} commit(s) back)"],
        )
    latest = suites.first_of_suite(
        session,
        suite,
        lambda n: repository.latest_runs(session, window, branch=default_branch, limit=n, include=include),
        cfg.baseline_runs,
    )
    if latest:
        why = (
            f"no run of suite {suite!r} at the base commit or its ancestors on this testbed"
            if chain
            else "no base commit given"
        )
        return (
            latest,
            "latest",
            [f"{why}: the latest {len(latest)} default-branch run(s) of the suite older than this one serve"],
        )
    return None


def _other_keys(session: Session, candidate: Run, suite: str | None, branch: str) -> list[str]:
    """A note naming the other keys of the candidate's testbed that ran its suite on ``branch``: each key, what it
    means (device, driver, mode) and its newest run, at most ``OTHER_KEYS_NAMED`` of them; none when there are none."""
    found = suites.keep(
        session,
        suite,
        repository.runs_of_other_keys(
            session,
            project_id=candidate.project_id,
            testbed_id=candidate.testbed_id,
            testbed_key=candidate.testbed_key,
            before=candidate.created_at,
            branch=branch,
            cases_of=candidate.id,
            limit=OTHER_KEYS_SEEN,
        ),
    )
    newest: dict[str, Run] = {}
    for run in found:
        newest.setdefault(run.testbed_key, run)
    if not newest:
        return []
    named = [
        f"key {key} ({testbeds.describe(dict(documents.result_of(session, run).environment.testbed))}; newest run "
        f"{run.id})"
        for key, run in list(newest.items())[:OTHER_KEYS_NAMED]
    ]
    more = len(newest) - len(named)
    return [
        f"OTHER TESTBED KEY: default-branch runs of suite {suite!r} on this testbed measured on another key are never "
        f"pooled with this run's key {candidate.testbed_key}: {'; '.join(named)}"
        + (f" and {more} more key(s)" if more > 0 else "")
        + ". Another device, driver or mode times the same code differently; this run begins its key's history"
    ]


def noise_floor(session: Session, *, candidate: Run, default_branch: str, cfg: Analysis) -> float | None:
    """The testbed's run-to-run noise floor from the default branch's history of the candidate's suite, or ``None``
    (analysis default).

    For each case, the log-ratios of consecutive runs' medians; their MAD (x 1.4826, / sqrt 2 for the
    difference of two runs) estimates one run's relative standard deviation. The median over cases is robust
    to the few cases that really changed; ``RANGE_TO_SD`` turns it into the range the analysis expects.
    Suspect and excluded runs are left out; fewer than 3 runs give ``None``.
    """
    excluded = {r.run_id for r in repository.rules(session, project_id=candidate.project_id) if r.kind == "exclude"}
    window = repository.Window(
        candidate.project_id,
        candidate.testbed_key,
        candidate.created_at,
        excluded | {candidate.id},
        cases_of=candidate.id,
        testbed_id=candidate.testbed_id,
    )
    suite = suites.name_of(session, candidate.id)
    history: list[Run] = []
    for scope in (window, dataclasses.replace(window, testbed_id=None)):  # the testbed's own, else its device key's

        def newest(n: int, scope: repository.Window = scope) -> list[Run]:
            return repository.latest_runs(session, scope, branch=default_branch, limit=n, suspect=False)

        history = suites.first_of_suite(session, suite, newest, cfg.noise_history_runs)
        if len(history) >= MIN_HISTORY_RUNS:
            break
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
