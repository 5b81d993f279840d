from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, delete, exists, select
from sqlalchemy.orm import Session, aliased, defer

from attnprof.server.baselines.models import BaselineRule
from attnprof.server.runs.models import Run, RunCase
from attnprof.server.testbeds.models import Testbed


def rules(session: Session, *, project_id: int, testbed_key: str | None = None) -> list[BaselineRule]:
    q = select(BaselineRule).where(BaselineRule.project_id == project_id)
    if testbed_key is not None:
        q = q.where(BaselineRule.testbed_key == testbed_key)
    return list(session.scalars(q.order_by(BaselineRule.created_at, BaselineRule.id)))


def find_rule(session: Session, *, project_id: int, kind: str, run_id: str) -> BaselineRule | None:
    q = select(BaselineRule).where(
        BaselineRule.project_id == project_id, BaselineRule.kind == kind, BaselineRule.run_id == run_id
    )
    return session.scalars(q).first()


def add_rule(session: Session, rule: BaselineRule) -> BaselineRule:
    session.add(rule)
    session.flush()
    return rule


def delete_rules(session: Session, *, project_id: int, kind: str, run_id: str) -> int:
    stmt = delete(BaselineRule).where(
        BaselineRule.project_id == project_id, BaselineRule.kind == kind, BaselineRule.run_id == run_id
    )
    return int(session.execute(stmt).rowcount)  # type: ignore[attr-defined]


def runs_by_id(session: Session, run_ids: Collection[str], *, cases_of: str | None = None) -> list[Run]:
    """Runs ``run_ids``, oldest first (only those sharing a case with run ``cases_of`` when given). Their documents
    load when first read."""
    if not run_ids:
        return []
    q = select(Run).options(defer(Run.document)).where(Run.id.in_(run_ids))
    if cases_of is not None:
        q = q.where(shares_a_case(cases_of))
    return list(session.scalars(q.order_by(Run.created_at)))


def shares_a_case(run_id: str) -> ColumnElement[bool]:
    """The run holds a case id that run ``run_id`` holds too. Both sides are looked up in run_cases' (run_id,
    case_id) unique index, and the first shared id ends the search: no list of ids is sent."""
    theirs, mine = aliased(RunCase), aliased(RunCase)
    return exists().where(theirs.run_id == Run.id, mine.run_id == run_id, mine.case_id == theirs.case_id)


@dataclass(frozen=True)
class Window:
    """Which runs may serve: this project and testbed key (and testbed, when given: two testbeds of one key, two
    pools of one GPU model in a matrix, keep a history each), older than ``before``, not ``exclude``d, not marked by
    their host's failed canary (``host_note``), not older than ``since`` (an accepted change), sharing a case with
    run ``cases_of`` (the candidate) when given."""

    project_id: int
    testbed_key: str
    before: datetime
    exclude: Collection[str] = ()
    since: datetime | None = None
    cases_of: str | None = None
    testbed_id: int | None = None

    def where(self) -> list[ColumnElement[bool]]:
        # A run whose host failed a canary after it, before passing another, serves no baseline.
        where = [
            Run.project_id == self.project_id,
            Run.testbed_key == self.testbed_key,
            Run.created_at < self.before,
            Run.host_note.is_(None),
        ]
        if self.testbed_id is not None:
            where.append(Run.testbed_id == self.testbed_id)
        if self.exclude:
            where.append(Run.id.not_in(self.exclude))
        if self.since is not None:
            where.append(Run.created_at >= self.since)
        if self.cases_of is not None:
            where.append(shares_a_case(self.cases_of))
        return where


def runs_of_commits(
    session: Session,
    window: Window,
    *,
    branch: str,
    commits: Sequence[str],
    limit: int,
) -> list[Run]:
    """Runs on ``branch`` of any of ``commits``, newest first. Their documents load when first read: only the
    few runs picked for the pool are."""
    if not commits:
        return []
    q = select(Run).options(defer(Run.document)).where(*window.where(), Run.branch == branch, Run.commit.in_(commits))
    return list(session.scalars(q.order_by(Run.created_at.desc()).limit(limit)))


def latest_runs(
    session: Session,
    window: Window,
    *,
    branch: str,
    limit: int,
    include: str | None = None,
    suspect: bool | None = None,
) -> list[Run]:
    """The newest runs on ``branch`` (plus the run ``include``, whatever its branch), newest first. Their documents
    load when first read (the noise floor never reads them)."""
    on_branch = Run.branch == branch if include is None else (Run.branch == branch) | (Run.id == include)
    q = select(Run).options(defer(Run.document)).where(*window.where(), on_branch)
    if suspect is not None:
        q = q.where(Run.suspect.is_(suspect))
    return list(session.scalars(q.order_by(Run.created_at.desc()).limit(limit)))


def runs_of_other_keys(
    session: Session,
    *,
    project_id: int,
    testbed_id: int,
    testbed_key: str,
    before: datetime,
    branch: str,
    cases_of: str,
    limit: int,
) -> list[Run]:
    """Runs of testbed ``testbed_id`` on ``branch`` measured on another key than ``testbed_key`` (another device,
    driver or mode), older than ``before``, sharing a case with run ``cases_of``; newest first. Never a baseline: a
    comparison names them when its own key has no history."""
    q = (
        select(Run)
        .options(defer(Run.document))
        .where(
            Run.project_id == project_id,
            Run.testbed_id == testbed_id,
            Run.testbed_key != testbed_key,
            Run.branch == branch,
            Run.created_at < before,
            shares_a_case(cases_of),
        )
    )
    return list(session.scalars(q.order_by(Run.created_at.desc()).limit(limit)))


def case_medians(session: Session, run_ids: Sequence[str]) -> list[tuple[str, str, float]]:
    """(run_id, case_id, latency median in microseconds) of the ok cases of ``run_ids``."""
    if not run_ids:
        return []
    q = select(RunCase.run_id, RunCase.case_id, RunCase.latency_median_us).where(
        RunCase.run_id.in_(run_ids), RunCase.status == "ok", RunCase.latency_median_us > 0
    )
    return [(r, c, float(m or 0.0)) for r, c, m in session.execute(q)]


def testbed_names(session: Session, testbed_ids: Collection[int]) -> list[str]:
    """The names of ``testbed_ids``, sorted."""
    return sorted(session.scalars(select(Testbed.name).where(Testbed.id.in_(testbed_ids))))
