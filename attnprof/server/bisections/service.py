"""Bisections on the service (docs/bisection.md): started for each step of the default branch that alerts found,
or on request; advanced by the analysis worker's sweep, one step at a time, from the rows alone.

Each sweep, for each open bisection: a pending one reads its range (the commits between its two ends, through the
``Source`` the caller passes: GitHub's compare API on the service); a running one waits for its open probe's job,
reads that job's paired comparison into the probe's outcome (``attnprof.core.bisect.classify``: a job that failed
or a stepped case that did not run is a ``skip``), then asks the search (``attnprof.core.bisect.Bisection``, rebuilt
from the finished probes) for the next pair, and makes that pair's paired job: the candidate's tree against the last
good one's, both fetched once through the ``Source`` and kept as bundles, at background priority. When the search
has its answer the bisection ends: confirmed (the culprit against its parent within the step's interval), spread,
not reproduced, the environment changed (the two runs of the step differ in driver, CUDA, cuDNN, PyTorch or Triton,
and the code alone does not reproduce it), or skipped. A confirmed culprit that is a merge is searched again through
the commits it merged. Plain code: nothing here commits or calls GitHub itself.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from attnprof.contract.provenance import Provenance
from attnprof.core.bisect import Bisection as Search
from attnprof.core.bisect import Outcome, Probe, Step, classify, slowdown
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.server.artifacts.store import store
from attnprof.server.bisections.models import OPEN, Bisection, BisectionProbe
from attnprof.server.comparisons import repository as comparisons
from attnprof.server.comparisons.models import Alert
from attnprof.server.config import Settings
from attnprof.server.db import utcnow
from attnprof.server.errors import Conflict, InvalidPayload, NotFound
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import FINAL, Job
from attnprof.server.projects import service as projects
from attnprof.server.runs.models import Run
from attnprof.server.testbeds import repository as testbed_rows

log = logging.getLogger(__name__)


MEASURE_EFFECT = 0.01
"""A requested bisection's first probe measures its two ends: ``bad`` is slower when its latency rose by at least
this much on a stepped case, with an interval above zero; that probe's effect and interval become the step."""
SOFTWARE = ("driver", "cuda", "cudnn", "torch", "triton")
"""What a testbed's software fingerprint holds: a step across which one of these changed may be the environment's."""
COMMIT = re.compile(r"[0-9a-f]{7,64}")
"""A commit as a bisection names it: a hash (a run's commit may be any label; only hashes are looked up)."""
BRANCH_PREFIX = "attnprof/bisect-"
"""A probe's run is stored on this branch and the bisection's id: never the default branch's history."""


class SourceError(Exception):
    """The range or a commit's tree cannot be had; the bisection fails with this as its reason."""


@dataclass(frozen=True)
class Commit:
    sha: str
    parents: tuple[str, ...] = ()


class Source(Protocol):
    """Where commits come from (GitHub, on the service: ``attnprof.server.github.source``)."""

    def commits(self, repo: str, good: str, bad: str) -> list[Commit]:
        """The commits after ``good`` up to ``bad``, oldest first."""
        ...

    def tree(self, repo: str, sha: str) -> bytes:
        """``sha``'s tree as a source bundle (tar.gz), checked as a submitted one is."""
        ...

    def pull_of(self, repo: str, sha: str) -> int | None:
        """The pull request ``sha`` came from, if any."""
        ...


# --- starting one ---------------------------------------------------------------------------------------


def environment_change(before: Run, after: Run) -> dict[str, list[str | None]]:
    """The testbed software that differs between two runs' documents: {name: [before, after]}."""

    def software(run: Run) -> dict[str, Any]:
        env = run.document.get("environment") if isinstance(run.document, dict) else None
        return env if isinstance(env, dict) else {}

    a, b = software(before), software(after)
    return {name: [a.get(name), b.get(name)] for name in SOFTWARE if a.get(name) != b.get(name)}


def _spec_of(session: Session, run: Run) -> Job:
    job = session.get(Job, run.job_id) if run.job_id else None
    if job is None:
        raise InvalidPayload(f"run {run.id} was uploaded, not profiled by the service: there is no suite to run")
    return job


def start_for_alerts(
    session: Session, *, max_age: timedelta, now: datetime | None = None, limit: int = 20
) -> list[Bisection]:
    """A bisection for each step that new regression alerts found (alerts of one step, one per case, share it): the
    alerts not acknowledged, younger than ``max_age``, whose runs name a repository and were profiled by the
    service. Each such alert points at its bisection from then on, so a step is started once."""
    now = now or utcnow()
    q = (
        select(Alert)
        .where(
            Alert.bisection_id.is_(None),
            Alert.regression.is_(True),
            Alert.acknowledged_at.is_(None),
            Alert.created_at >= now - max_age,
        )
        .order_by(Alert.id)
        .limit(limit * 8)
        .with_for_update(skip_locked=True)
    )
    steps: dict[tuple[int, int, str, str], list[Alert]] = {}
    for alert in session.scalars(q):
        steps.setdefault((alert.project_id, alert.testbed_id, alert.before_run_id, alert.run_id), []).append(alert)
    started: list[Bisection] = []
    for alerts in list(steps.values())[:limit]:
        b = for_step(session, alerts, by="alert", via="alert", now=now)
        if b is not None:
            started.append(b)
    return started


def for_step(
    session: Session, alerts: Sequence[Alert], *, by: str, via: str, now: datetime | None = None
) -> Bisection | None:
    """A bisection of the step ``alerts`` (of one project, testbed and pair of runs) found, its size the largest
    alert's; each alert points at it. None when a run of the step is gone."""
    now = now or utcnow()
    first = alerts[0]
    before, after = session.get(Run, first.before_run_id), session.get(Run, first.run_id)
    if before is None or after is None:
        return None
    top = max(alerts, key=lambda a: a.change or 0.0)
    b = Bisection(
        project_id=first.project_id,
        testbed_id=first.testbed_id,
        before_run_id=before.id,
        run_id=after.id,
        repo=after.repo or "",
        good=before.commit,
        bad=after.commit,
        cases=sorted({a.case_id for a in alerts}),
        effect=top.change,
        low=top.ci_low if top.ci_low is not None else top.change,
        high=top.ci_high if top.ci_high is not None else top.change,
        commits=[],
        merges=[],
        trees={},
        status="pending",
        requested_by=by[:300],
        requested_via=via,
        comment_attempts=0,
        created_at=now,
        updated_at=now,
    )
    change = environment_change(before, after)
    b.environment = change or None
    try:
        job = _spec_of(session, after)
        b.spec, b.suite_name, b.suite_path = job.spec, job.suite_name, job.suite_path
    except InvalidPayload as exc:
        b.spec, b.suite_name = "", suites_name(after)
        _end(b, "failed", str(exc.detail), now)
    if not after.repo and b.status == "pending":
        _end(b, "failed", "the step's runs name no repository: there is nowhere to read the commits from", now)
    if before.commit == after.commit and b.status == "pending":
        _end(b, "failed", "the step's two runs are of one commit: the code did not change across it", now)
    if after.ancestors and after.ancestors[0] == before.commit and b.status == "pending":
        b.commits, b.culprit = [before.commit, after.commit], after.commit
        _end(b, "single", f"one commit: {after.commit} is the only change between the step's runs", now)
    session.add(b)
    session.flush()
    for alert in alerts:
        alert.bisection_id = b.id
    session.flush()
    return b


def for_alert(session: Session, alert: Alert, *, by: str, via: str) -> Bisection:
    """A person's bisection of ``alert``'s step, whatever its age or acknowledgement (the alerts of the same step
    share it); ``Conflict`` while one searches it already, ``InvalidPayload`` for an improvement."""
    if not alert.regression:
        raise InvalidPayload(f"alert {alert.id} is an improvement: there is no slowdown to bisect")
    if alert.bisection_id is not None:
        known = session.get(Bisection, alert.bisection_id)
        if known is not None and known.status in OPEN:
            raise Conflict(f"bisection {known.id} already searches the step of alert {alert.id}")
    same = list(
        session.scalars(
            select(Alert).where(
                Alert.project_id == alert.project_id,
                Alert.testbed_id == alert.testbed_id,
                Alert.before_run_id == alert.before_run_id,
                Alert.run_id == alert.run_id,
                Alert.regression.is_(True),
            )
        )
    )
    b = for_step(session, same or [alert], by=by, via=via)
    if b is None:
        raise NotFound(f"alert {alert.id}: a run of its step is gone")
    return b


def suites_name(run: Run) -> str:
    suite = run.document.get("suite") if isinstance(run.document, dict) else None
    name = suite.get("name") if isinstance(suite, dict) else None
    return str(name or "")


def request(
    session: Session,
    *,
    project_id: int,
    testbed: str,
    good: str,
    bad: str,
    by: str,
    via: str,
    suite: str | None = None,
    cases: Sequence[str] = (),
    step: tuple[float, float, float] | None = None,
    pr: int | None = None,
    now: datetime | None = None,
) -> Bisection:
    """A bisection of ``good``..``bad`` on ``testbed``, asked for by a person: it runs the suite of the project's
    latest job on that testbed (of ``suite``, where named); its first probe measures the step unless ``step``
    (effect, low, high) gives it."""
    now = now or utcnow()
    if good == bad:
        raise InvalidPayload("good and bad: two different commits")
    testbed_id = testbed_rows.id_by_name(session, testbed)
    if testbed_id is None:
        raise NotFound(f"testbed {testbed!r}: no such testbed (GET /api/v1/testbeds lists them)")
    q = select(Job).where(Job.project_id == project_id, Job.testbed_id == testbed_id, Job.background.is_(False))
    if suite is not None:
        q = q.where(Job.suite_name == suite)
    job = session.scalars(q.order_by(Job.created_at.desc()).limit(1)).first()
    if job is None:
        what = f"of suite {suite!r} " if suite else ""
        raise InvalidPayload(f"testbed: the project has no job {what}on {testbed!r}: there is no suite to run")
    return from_job(session, job, good=good, bad=bad, cases=cases, step=step, by=by, via=via, pr=pr, now=now)


def from_job(
    session: Session,
    job: Job,
    *,
    good: str,
    bad: str,
    by: str,
    via: str,
    cases: Sequence[str] = (),
    step: tuple[float, float, float] | None = None,
    pr: int | None = None,
    now: datetime | None = None,
) -> Bisection:
    """A bisection of ``good``..``bad`` that runs ``job``'s suite on its testbed (see ``request``)."""
    now = now or utcnow()
    if not job.repo:
        raise InvalidPayload(f"job {job.id} names no repository to read commits from")
    known = _case_ids(session, job)
    unknown = [c for c in cases if known and c not in known]
    if unknown:
        raise InvalidPayload(f"cases: {', '.join(unknown)} not in the suite; its cases are {', '.join(sorted(known))}")
    open_same = session.scalars(
        select(Bisection).where(
            Bisection.project_id == job.project_id,
            Bisection.testbed_id == job.testbed_id,
            Bisection.good == good,
            Bisection.bad == bad,
            Bisection.status.in_(OPEN),
        )
    ).first()
    if open_same is not None:
        raise Conflict(f"bisection {open_same.id} already searches {good}..{bad} on this testbed")
    b = Bisection(
        project_id=job.project_id,
        testbed_id=job.testbed_id,
        repo=job.repo,
        good=good,
        bad=bad,
        spec=job.spec,
        suite_name=job.suite_name,
        suite_path=job.suite_path,
        cases=sorted(cases or known),
        effect=step[0] if step else None,
        low=step[1] if step else None,
        high=step[2] if step else None,
        commits=[],
        merges=[],
        trees={},
        status="pending",
        requested_by=by[:300],
        requested_via=via,
        pr=pr,
        comment_attempts=0,
        created_at=now,
        updated_at=now,
    )
    session.add(b)
    session.flush()
    return b


def _case_ids(session: Session, job: Job) -> set[str]:
    run = session.get(Run, job.run_id) if job.run_id else None
    if run is None:
        return set()
    cases = run.document.get("cases") if isinstance(run.document, dict) else None
    return {str(c.get("id")) for c in cases or [] if isinstance(c, dict) and c.get("id")}


def cancel(session: Session, b: Bisection, *, reason: str, now: datetime | None = None) -> Bisection:
    """End an open bisection and cancel its probe's job."""
    if b.status not in OPEN:
        raise Conflict(f"bisection {b.id} is {b.status}: it cannot be cancelled")
    now = now or utcnow()
    _stop_probes(session, b, f"its bisection was cancelled: {reason}")
    _end(b, "cancelled", reason, now)
    return b


def _stop_probes(session: Session, b: Bisection, reason: str) -> None:
    """Cancel the job of the probe that runs, if any."""
    for probe in _probes(session, b):
        job = session.get(Job, probe.job_id) if probe.job_id and probe.outcome is None else None
        if job is not None and job.status not in FINAL:
            jobs.cancel(session, job, reason=reason)


# --- advancing ------------------------------------------------------------------------------------------


def _end(b: Bisection, status: str, summary: str, now: datetime) -> None:
    b.status, b.summary, b.finished_at, b.updated_at = status, summary, now, now


def _probes(session: Session, b: Bisection) -> list[BisectionProbe]:
    q = select(BisectionProbe).where(BisectionProbe.bisection_id == b.id).order_by(BisectionProbe.id)
    return list(session.scalars(q))


def step_of(b: Bisection) -> Step:
    """The step a probe is judged against: the bisection's, or, before its first probe measured it, any slowdown of
    at least ``MEASURE_EFFECT`` with an interval above zero."""
    if b.effect is None or b.effect <= 0:
        return Step(tuple(b.cases), MEASURE_EFFECT, MEASURE_EFFECT, MEASURE_EFFECT, share=1.0)
    low = min(b.low if b.low is not None else b.effect, b.effect)
    high = max(b.high if b.high is not None else b.effect, b.effect)
    return Step(tuple(b.cases), b.effect, low, high)


def search_of(b: Bisection, probes: Sequence[BisectionProbe]) -> Search:
    """The search as the finished probes left it (those of the range searched now, in the order they ran)."""
    search = Search(list(b.commits), step_of(b))
    inside = set(b.commits)
    for p in probes:
        if p.outcome is not None and p.good in inside and p.candidate in inside:
            outcome = cast(Outcome, p.outcome)
            search.record(
                p.good, p.candidate, Probe(p.good, p.candidate, outcome, p.effect, p.low, p.high, p.detail or "")
            )
    return search


def open_bisections(session: Session, limit: int = 50) -> list[int]:
    q = select(Bisection.id).where(Bisection.status.in_(OPEN)).order_by(Bisection.id).limit(limit)
    return list(session.scalars(q))


def lock(session: Session, bisection_id: int) -> Bisection | None:
    q = (
        select(Bisection)
        .where(Bisection.id == bisection_id)
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    )
    return session.scalars(q).first()


def advance(
    session: Session, b: Bisection, *, source: Source, settings: Settings, now: datetime | None = None
) -> Job | None:
    """One step of an open bisection (see the module's docstring); returns the probe job it made, if any. A
    ``SourceError`` ends it as failed, with the reason."""
    now = now or utcnow()
    alerts = list(session.scalars(select(Alert).where(Alert.bisection_id == b.id)))
    if alerts and all(a.acknowledged_at is not None for a in alerts):
        who = ", ".join(sorted({a.acknowledged_by or "someone" for a in alerts}))
        cancel(session, b, reason=f"its alert was acknowledged as expected by {who}", now=now)
        return None
    try:
        if settings.github_token is not None and not projects.may_report(session, project_id=b.project_id, repo=b.repo):
            # The service's token reads private repositories: only a repository the service's admin allowed for the
            # project is read for it, checked before every step (an allowance can be taken away while it runs).
            raise SourceError(
                f"{b.repo} is not among the project's repositories (attnprof admin allow-repo): its commits are not "
                "read with the service's GitHub token"
            )
        if b.status == "pending":
            _read_range(b, source, now)
            if b.status != "running":
                return None
        probes = _probes(session, b)
        running = [p for p in probes if p.outcome is None]
        if running:
            if not _settle(session, b, running[0], now):
                return None
            probes = _probes(session, b)
        if b.effect is None:  # a requested bisection: its first probe measures the step
            ends = (b.commits[0], b.commits[-1])
            if not any(p.good == ends[0] and p.candidate == ends[1] for p in probes):
                return _probe(session, b, ends, source, settings, now)
            _measured(b, probes, now)
            if b.status != "running":
                return None
        search = search_of(b, probes)
        pair = search.next_pair()
        if pair is None:
            _finish(session, b, search, source, now)
            return None
        return _probe(session, b, pair, source, settings, now)
    except SourceError as exc:
        _stop_probes(session, b, f"its bisection failed: {exc}")
        _end(b, "failed", str(exc), now)
        return None


def _read_range(b: Bisection, source: Source, now: datetime) -> None:
    for end in (b.good, b.bad):
        if not COMMIT.fullmatch(end):
            raise SourceError(f"{end!r} is not a commit hash: only hashes are looked up on GitHub")
    commits = source.commits(b.repo, b.good, b.bad)
    if not commits or commits[-1].sha != b.bad:
        raise SourceError(f"{b.repo}: {b.bad} is not after {b.good}")
    chain = first_parents(commits, b.good, b.bad)
    b.commits = [b.good, *[c.sha for c in chain]]
    b.merges = [{"sha": c.sha, "parents": list(c.parents), "searched": False} for c in chain if len(c.parents) > 1]
    b.status, b.updated_at = "running", now
    if len(chain) == 1 and b.effect is not None:
        b.culprit = b.bad
        _end(b, "single", f"one commit: {b.bad} is the only change between the step's runs", now)


def first_parents(commits: Sequence[Commit], good: str, bad: str) -> list[Commit]:
    """The first-parent chain from ``bad`` back to ``good`` among ``commits`` (GitHub's compare lists every commit
    reachable from ``bad`` and not from ``good``, merged branches' too), oldest first."""
    by_sha = {c.sha: c for c in commits}
    chain: list[Commit] = []
    at = by_sha.get(bad)
    while at is not None:
        chain.append(at)
        if not at.parents or at.parents[0] == good:
            break
        at = by_sha.get(at.parents[0])
    return chain[::-1]


def _settle(session: Session, b: Bisection, probe: BisectionProbe, now: datetime) -> bool:
    """Read a finished probe job's outcome; False while its job runs."""
    job = session.get(Job, probe.job_id) if probe.job_id else None
    if job is not None and job.status not in FINAL:
        return False
    if job is None or job.status != "done":
        why = (job.reason if job is not None else None) or "its job is gone"
        probe.outcome, probe.detail = "skip", f"the probe's job {job.status if job else 'was deleted'}: {why}"[:2000]
    else:
        try:
            found = jobs.comparison(session, job, mode="paired")
        except NotFound as exc:
            found = None
            probe.outcome, probe.detail = "skip", str(exc.detail)
        if found is not None:
            doc = ComparisonDocument.model_validate(found.document)
            if not b.cases:  # requested for every case: the suite's, as its first probe ran them
                b.cases = sorted({f.case for f in doc.findings if slowdown(f) is not None})
            answer = classify(doc, step_of(b)) if b.cases else Probe("", "", "skip", detail="no case ran")
            probe.outcome, probe.effect, probe.low, probe.high = answer.outcome, answer.effect, answer.low, answer.high
            probe.detail = answer.detail or None
    probe.finished_at = now
    b.updated_at = now
    session.flush()
    return True


def _measured(b: Bisection, probes: Sequence[BisectionProbe], now: datetime) -> None:
    first = next(p for p in probes if p.good == b.commits[0] and p.candidate == b.commits[-1])
    if first.outcome == "bad" and first.effect is not None:
        b.effect, b.low, b.high = first.effect, first.low, first.high
        b.updated_at = now
        return
    if first.outcome == "skip":
        _end(b, "skipped", f"{b.bad} against {b.good} could not be measured: {first.detail}", now)
    else:
        shown = f"{first.effect:+.1%}" if first.effect is not None else "no change"
        _end(b, "not_reproduced", f"{b.bad} against {b.good}, paired: {shown}; no step to search", now)


def _finish(session: Session, b: Bisection, search: Search, source: Source, now: datetime) -> None:
    status: str = search.status()
    summary = search.summary()
    if status == "confirmed":
        merge = next((m for m in b.merges if m["sha"] == search.culprit and not m["searched"]), None)
        if merge is not None and len(merge["parents"]) > 1:  # search the commits it merged
            merge["searched"] = True
            first, second = merge["parents"][0], merge["parents"][1]
            merged = first_parents(source.commits(b.repo, first, second), first, second) or []
            if merged:
                b.merges = [dict(m) for m in b.merges]
                b.commits = [first, *[c.sha for c in merged]]
                b.summary = (
                    f"{merge['sha']} is a merge that holds the step: searching the {len(merged)} commit(s) it merged"
                )
                b.updated_at = now
                return
        b.culprit = search.culprit
        b.culprit_pr = source.pull_of(b.repo, search.culprit)
        if b.culprit_pr is not None:
            b.comment_due_at = now
        for alert in session.scalars(select(Alert).where(Alert.bisection_id == b.id)):
            alert.culprit = b.culprit
            if comparisons.webhook_of(session, alert.project_id) is not None:
                alert.notify_due_at, alert.notify_attempts, alert.notified_at = now, 0, None
    elif status in ("not_reproduced", "skipped") and b.environment:
        changed = ", ".join(f"{k} {v[0]} → {v[1]}" for k, v in sorted(b.environment.items()))
        status = "environment"
        summary = (
            f"the environment changed across the step ({changed}) and the code alone does not reproduce it; {summary}"
        )
    _end(b, status, summary, now)
    session.flush()


def _bundle(session: Session, b: Bisection, sha: str, source: Source) -> bytes:
    kept = b.trees.get(sha)
    data = store.get(session, kept) if kept else None
    if data is None:
        data = source.tree(b.repo, sha)
        b.trees = {**b.trees, sha: store.put(session, kind="bundle", data=data)}
    return data


def _probe(
    session: Session, b: Bisection, pair: tuple[str, str], source: Source, settings: Settings, now: datetime
) -> Job:
    good, candidate = pair
    if session.scalars(
        select(BisectionProbe.id).where(
            BisectionProbe.bisection_id == b.id, BisectionProbe.good == good, BisectionProbe.candidate == candidate
        )
    ).first():
        raise SourceError(f"the pair {good}..{candidate} was probed before: the search would repeat itself")
    row = testbed_rows.get(session, b.testbed_id)
    assert row is not None  # a testbed is never removed
    testbed = row.name
    new = jobs.NewJob(
        spec=b.spec,
        testbed=testbed,
        provenance=Provenance(branch=f"{BRANCH_PREFIX}{b.id}", commit=candidate, base_commit=good),
        bundle=_bundle(session, b, candidate, source),
        base_bundle=_bundle(session, b, good, source),
        idempotency_key=f"bisection-{b.id}-{good}-{candidate}"[:200],
        suite_path=b.suite_path,
        background=True,
    )
    job, _ = jobs.create(
        session,
        project_id=b.project_id,
        new=new,
        limits=settings.limits,
        max_attempts=settings.max_attempts,
        retention=settings.retention,
        github_feedback=False,
    )
    session.add(BisectionProbe(bisection_id=b.id, good=good, candidate=candidate, job_id=job.id, created_at=now))
    b.updated_at = now
    session.flush()
    return job
