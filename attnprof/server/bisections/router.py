"""The bisections' API (docs/bisection.md): start one over two commits, list them, read one with its probes, cancel."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from attnprof.server.auth.dependencies import ReadProject, SubmitProject
from attnprof.server.bisections import service
from attnprof.server.bisections.models import OPEN, STATUS_WORDS, Bisection, BisectionProbe
from attnprof.server.comparisons import alerts
from attnprof.server.comparisons.models import Alert
from attnprof.server.db import INT_MAX, SessionDep
from attnprof.server.errors import NotFound
from attnprof.server.jobs.models import Job
from attnprof.server.openapi import errors
from attnprof.server.testbeds import repository as testbed_rows

router = APIRouter(prefix="/api/v1/projects/{project}", tags=["bisections"])
BisectionId = Annotated[int, Path(ge=1, le=INT_MAX)]
SHA = r"^[0-9a-f]{7,64}$"
CASE_CHARS = 500


class BisectionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    testbed: str = Field(min_length=1, max_length=100, description="where to measure: a testbed the project ran on")
    good: str = Field(pattern=SHA, description="the last commit known good (hex, 7 to 64 characters)")
    bad: str = Field(pattern=SHA, description="the first commit known bad (hex, 7 to 64 characters)")
    suite: str | None = Field(
        None, max_length=200, description="the suite to run (its name); default: the project's latest job's there"
    )
    cases: list[Annotated[str, Field(min_length=1, max_length=CASE_CHARS)]] = Field(
        default_factory=list, max_length=100, description="the cases that stepped (default: every case of the suite)"
    )
    effect: float | None = Field(
        None, gt=0, le=1000, description="the step's size, bad / good - 1 of the latency (default: measured first)"
    )
    low: float | None = Field(None, gt=-1, le=1000, description="its interval's low end (with effect and high)")
    high: float | None = Field(None, gt=-1, le=1000, description="its interval's high end (with effect and low)")

    @property
    def step(self) -> tuple[float, float, float] | None:
        if self.effect is None or self.low is None or self.high is None:
            return None
        return self.effect, self.low, self.high

    @model_validator(mode="after")
    def _step_whole(self) -> BisectionIn:
        given = [v is not None for v in (self.effect, self.low, self.high)]
        if any(given) and not all(given):
            raise ValueError("effect, low and high go together: give all three (the step) or none (measured first)")
        if all(given) and not (self.low <= self.effect <= self.high):  # type: ignore[operator]
            raise ValueError("effect: between low and high")
        return self


class ProbeOut(BaseModel):
    good: str = Field(description="the commit it was paired against (the last known good)")
    candidate: str
    job_id: str | None
    job_status: str | None = Field(description="its paired job's state (null: the job is gone)")
    outcome: str | None = Field(description="bad (holds the step), good, skip (could not be measured); null: running")
    effect: float | None = Field(description="the largest latency change over the stepped cases, candidate / good - 1")
    low: float | None = Field(description="its 95% interval, low end")
    high: float | None
    detail: str | None
    created_at: datetime
    finished_at: datetime | None


class BisectionOut(BaseModel):
    id: int
    testbed: str
    repo: str
    good: str
    bad: str
    suite: str
    cases: list[str]
    effect: float | None = Field(description="the step to explain (null: its first probe measures it)")
    low: float | None
    high: float | None
    status: str = Field(description="; ".join(f"{k}: {v}" for k, v in STATUS_WORDS.items()))
    summary: str | None
    culprit: str | None
    culprit_pr: int | None = Field(description="the pull request the culprit came from (commented on)")
    commits: list[str] = Field(description="the range searched now, oldest first ([0] good, [-1] bad)")
    remaining: list[str] = Field(description="the commits the culprit may still be, oldest first")
    environment: dict[str, list[str | None]] | None = Field(
        description="testbed software that differs across the step: {name: [before, after]}"
    )
    alerts: list[int] = Field(description="the alerts it explains")
    probes: list[ProbeOut]
    gpu_seconds: float = Field(description="the device seconds its probes' jobs held, summed: what it cost")
    budget: int = Field(
        description="paired probes it takes when one commit holds the whole step: ⌈log₂ N⌉ + 1, and one more where "
        "its first probe measured the step"
    )
    requested_by: str
    requested_via: str
    created_at: datetime
    finished_at: datetime | None


class Bisections(BaseModel):
    bisections: list[BisectionOut]
    next: int | None = Field(description="pass as `after` for the next page")


def out(session: Session, b: Bisection) -> BisectionOut:
    probes = list(
        session.scalars(select(BisectionProbe).where(BisectionProbe.bisection_id == b.id).order_by(BisectionProbe.id))
    )
    testbed = testbed_rows.get(session, b.testbed_id)
    alert_ids = list(session.scalars(select(Alert.id).where(Alert.bisection_id == b.id).order_by(Alert.id)))
    remaining: list[str] = []
    budget = 0
    if len(b.commits) >= 2:
        search = service.search_of(b, probes)
        ends = (b.commits[0], b.commits[-1])
        measured = b.effect is None or (any((p.good, p.candidate) == ends for p in probes) and len(b.commits) > 2)
        budget = search.budget + (1 if measured else 0)  # a first probe that measured the step
        remaining = b.commits[search.good + 1 : search.bad + 1] if b.status in OPEN else []
    held = {
        j.id: j.gpu_seconds or 0.0
        for j in session.scalars(select(Job).where(Job.id.in_([p.job_id for p in probes if p.job_id])))
    }
    states = {
        j.id: j.status for j in session.scalars(select(Job).where(Job.id.in_([p.job_id for p in probes if p.job_id])))
    }
    return BisectionOut(
        id=b.id,
        testbed=testbed.name if testbed else str(b.testbed_id),
        repo=b.repo,
        good=b.good,
        bad=b.bad,
        suite=b.suite_name,
        cases=list(b.cases),
        effect=b.effect,
        low=b.low,
        high=b.high,
        status=b.status,
        summary=b.summary,
        culprit=b.culprit,
        culprit_pr=b.culprit_pr,
        commits=list(b.commits),
        remaining=remaining,
        environment=b.environment,
        alerts=alert_ids,
        probes=[
            ProbeOut(
                good=p.good,
                candidate=p.candidate,
                job_id=p.job_id,
                job_status=states.get(p.job_id) if p.job_id else None,
                outcome=p.outcome,
                effect=p.effect,
                low=p.low,
                high=p.high,
                detail=p.detail,
                created_at=p.created_at,
                finished_at=p.finished_at,
            )
            for p in probes
        ],
        budget=budget,
        gpu_seconds=round(sum(held.values()), 3),
        requested_by=b.requested_by,
        requested_via=b.requested_via,
        created_at=b.created_at,
        finished_at=b.finished_at,
    )


@router.post("/bisections", response_model=BisectionOut, status_code=201, responses=errors(404, 409))
def start(body: BisectionIn, access: SubmitProject, session: SessionDep) -> BisectionOut:
    """Find which commit between `good` and `bad` made a step (a submit token): the project's suite on the testbed,
    paired probes at background priority, the culprit confirmed against its parent. Without a step (`effect`, `low`,
    `high`) the first probe measures `bad` against `good`; where that shows no step, it ends as not reproduced."""
    b = service.request(
        session,
        project_id=access.project_id,
        testbed=body.testbed,
        good=body.good,
        bad=body.bad,
        suite=body.suite,
        cases=body.cases,
        step=body.step,
        by=alerts.who(session, access.principal.token_id, via="API"),
        via="api",
    )
    session.commit()
    return out(session, b)


@router.get("/bisections", response_model=Bisections)
def list_bisections(
    access: ReadProject,
    session: SessionDep,
    after: Annotated[int | None, Query(ge=1, le=INT_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Bisections:
    """The project's bisections, newest first."""
    q = select(Bisection).where(Bisection.project_id == access.project_id)
    if after is not None:
        q = q.where(Bisection.id < after)
    rows = list(session.scalars(q.order_by(Bisection.id.desc()).limit(limit + 1)))
    nxt = rows[limit - 1].id if len(rows) > limit else None
    return Bisections(bisections=[out(session, b) for b in rows[:limit]], next=nxt)


def get_for(session: Session, project_id: int, bisection_id: int) -> Bisection:
    b = session.get(Bisection, bisection_id)
    if b is None or b.project_id != project_id:
        raise NotFound(f"no bisection {bisection_id}")
    return b


@router.get("/bisections/{bisection_id}", response_model=BisectionOut)
def get_bisection(bisection_id: BisectionId, access: ReadProject, session: SessionDep) -> BisectionOut:
    """One bisection: each probe with its paired job, its difference and verdict, and the commits left to search."""
    return out(session, get_for(session, access.project_id, bisection_id))


@router.post("/bisections/{bisection_id}/cancel", response_model=BisectionOut, responses=errors(409))
def cancel_bisection(bisection_id: BisectionId, access: SubmitProject, session: SessionDep) -> BisectionOut:
    """Stop an open bisection and cancel its running probe (a submit token); 409 for one that has ended."""
    b = get_for(session, access.project_id, bisection_id)
    who = alerts.who(session, access.principal.token_id, via="API")
    service.cancel(session, b, reason=f"cancelled by {who}")
    session.commit()
    return out(session, b)
