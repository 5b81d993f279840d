"""What the trends page draws around a case's series: the baseline its comparisons used and the minimum-effect band
around it, the runs whose comparison failed for the case, the order of the branch's commits (from the first-parent
ancestors each run stored), where a pull request's runs sit on the default branch, and which case regressed last.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from attnprof.server.comparisons import documents as comparison_documents
from attnprof.server.trends import baselines
from attnprof.server.web import trend_repository

# Failed comparisons read to mark a window's failures, at most (newest kept): a default branch fails rarely.
MAX_FAILED = 500
minimum_effect = baselines.minimum_effect
baseline_levels = baselines.levels


def failed_for_case(session: Session, case_id: str, compared: dict[str, Any]) -> dict[str, str]:
    """The runs whose comparison failed because of this case: run id -> the findings that failed it, in words."""
    failed = [row for row in compared.values() if row.verdict == "fail"][-MAX_FAILED:]
    out = {}
    for comparison in trend_repository.comparisons_by_id(session, [row.id for row in failed]):
        doc = comparison_documents.comparison_of(comparison)
        why = [f.metric for f in doc.findings if f.case == case_id and f.verdict == "fail"]
        if why:
            out[comparison.candidate_run_id] = ", ".join(dict.fromkeys(why))
    return out


def most_recently_regressed(session: Session, project_id: int, testbed_id: int, branch: str, default: str) -> str:
    """The case that regressed last on ``branch`` and ``testbed_id``: of the newest failed comparison, the failing
    case that moved most; or the case of the newest regression alert when that came later (default branch)."""
    best: tuple[datetime, str] | None = None
    for comparison in trend_repository.latest_failed(session, project_id, testbed_id, branch, 1):
        doc = comparison_documents.comparison_of(comparison)
        failing = [f for f in doc.findings if f.verdict == "fail"]
        if failing:
            worst = max(failing, key=lambda f: abs(f.change) if f.change is not None else 0.0)
            at = trend_repository.run_times(session, [comparison.candidate_run_id]).get(comparison.candidate_run_id)
            if at is not None:
                best = (at, worst.case)
    if branch == default:
        alert = trend_repository.latest_regression_alert(session, project_id, testbed_id)
        if alert is not None and (best is None or alert.created_at > best[0]):
            best = (alert.created_at, alert.case_id)
    return best[1] if best else ""


@dataclass(frozen=True)
class CommitOrder:
    """The branch's commits in order (each after its first-parent ancestors, else by first run), with each one's
    place on the commit axis."""

    commits: list[str]
    place: dict[str, int]

    def of_ancestors(self, base: str | None, ancestors: Sequence[Any]) -> float | None:
        """Where a pull request's run goes: just after its base commit (the merge base), else after its nearest
        ancestor on the axis; None when none of them is on it."""
        for commit in (base, *ancestors):
            if commit is not None and str(commit) in self.place:
                return self.place[str(commit)] + 0.5
        return None


def commit_order(rows: Iterable[tuple[str, str, Sequence[Any], datetime]]) -> CommitOrder:
    """Order commits from (run id, commit, first-parent ancestors, run time) rows: a commit comes after the nearest
    of its ancestors that has runs too; commits that no ancestry orders go by their first run. Runs of one commit
    share its place."""
    first: dict[str, datetime] = {}
    ancestors: dict[str, list[str]] = {}
    for _run_id, commit, found, at in rows:
        if commit not in first or at < first[commit]:
            first[commit] = at
        if found and commit not in ancestors:
            ancestors[commit] = [str(a) for a in found if str(a) != commit]
    parent: dict[str, str] = {}
    for commit, chain in ancestors.items():
        nearest = next((a for a in chain if a in first), None)
        if nearest is not None:
            parent[commit] = nearest
    children: dict[str, list[str]] = {}
    for child, p in parent.items():
        children.setdefault(p, []).append(child)
    # Kahn's order, the earliest first run first among those ready: ancestry wins over the clock.
    ready = [(first[c], c) for c in first if c not in parent]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, commit = heapq.heappop(ready)
        order.append(commit)
        for child in children.get(commit, []):
            heapq.heappush(ready, (first[child], child))
    # A cycle (a history rewritten, two runs naming each other) leaves commits out: they go by time at the end.
    placed = set(order)
    left = sorted((c for c in first if c not in placed), key=lambda c: first[c])
    order.extend(left)
    return CommitOrder(order, {c: i for i, c in enumerate(order)})
