"""Bisections on the service, against a real Postgres, with each probe job answered as a worker and the analysis would
answer it (a run, and a paired comparison of two result documents whose latency differs by the history's effect
between the pair's commits): the culprit of 16 commits found and confirmed within ⌈log₂ N⌉ + 1 probe jobs, each pair
once, at background priority; a step spread over two commits; a commit that does not build, skipped and named; the
environment changed with no culprit; a merge searched through what it merged; a step of one commit; a bisection
resumed from its rows alone; cancelled when its alerts are acknowledged; the API's answers and refusals; the
dispatcher offering a probe only when nothing else waits."""

from __future__ import annotations

import math
import uuid
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from attnprof.contract.bundle import pack
from attnprof.contract.provenance import Provenance
from attnprof.core.analysis.compare import compare
from attnprof.core.documents import ResultDocument
from attnprof.server.bisections import service as bisections
from attnprof.server.bisections.models import Bisection, BisectionProbe
from attnprof.server.comparisons.models import Alert, Comparison
from attnprof.server.config import Fairness, Limits, Settings
from attnprof.server.db import utcnow
from attnprof.server.jobs import dispatch
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import Job
from attnprof.server.projects import repository as projects
from attnprof.server.runs import service as runs
from attnprof.server.testbeds import repository as testbed_rows
from attnprof.server.testbeds import service as testbeds
from tests.profiling_support import suite_text
from tests.server import documents as docs
from tests.server.tenants import Tenant

REPO = "acme/kernels"
CASE = "sdpa[backend=cudnn,pass=fwd]"
SPEC = suite_text("kernels", '[[cases]]\nname = "sdpa"\ntarget = "sdpa"\nq_heads = 2\nseq_q = 64\nhead_dim = 32\n')


def sha(i: int, salt: int = 0) -> str:
    return f"{0xB15EC7000 + salt * 1000 + i:040x}"


class History:
    """A repository's history for the ``Source``: commits ``0..n`` (0 good), each with its own share of a slowdown
    (``effect_of``), those that do not build, and merges (``merged``: merge index to the commits of its branch)."""

    def __init__(
        self,
        n: int,
        effect_of: dict[int, float],
        *,
        broken: frozenset[int] = frozenset(),
        merged: dict[int, list[str]] | None = None,
        branch_effect: dict[str, float] | None = None,
        pr_of: dict[str, int] | None = None,
    ) -> None:
        self.shas = [sha(i) for i in range(n + 1)]
        self.effect_of, self.broken = effect_of, broken
        self.merged = merged or {}
        self.branch_effect = branch_effect or {}
        self.pr_of = pr_of or {}
        self.trees: list[str] = []
        self.ranges: list[tuple[str, str]] = []

    def commits(self, repo: str, good: str, bad: str) -> list[bisections.Commit]:
        assert repo == REPO
        self.ranges.append((good, bad))
        for index, branch in self.merged.items():  # a merge's second parent's range: its branch's commits
            if good == self.shas[index - 1] and bad == branch[-1]:
                return [
                    bisections.Commit(c, (branch[k - 1] if k else self.shas[index - 1],)) for k, c in enumerate(branch)
                ]
        i, j = self.shas.index(good), self.shas.index(bad)
        out = []
        for k in range(i + 1, j + 1):
            parents = (self.shas[k - 1],) + ((self.merged[k][-1],) if k in self.merged else ())
            out.append(bisections.Commit(self.shas[k], parents))
        return out

    def tree(self, repo: str, commit: str) -> bytes:
        self.trees.append(commit)
        return pack([("kernel.py", len(commit), False, commit.encode())])

    def pull_of(self, repo: str, commit: str) -> int | None:
        return self.pr_of.get(commit)

    def effect(self, good: str, candidate: str) -> float:
        """The slowdown of ``candidate`` against ``good``: the shares of the commits between (a branch commit's, with
        the main line's before its merge)."""
        if candidate in self.branch_effect:
            return self.branch_effect[candidate]
        i, j = self.shas.index(good), self.shas.index(candidate)
        return sum(self.effect_of.get(k, 0.0) for k in range(i + 1, j + 1))


def project_id(tenant: Tenant, db: Session) -> int:
    found = projects.get_by_name(db, tenant.name)
    assert found is not None
    return found.id


def seed_job(db: Session, pid: int, testbed: str, commit: str = "c0", *, with_run: bool = False) -> Job:
    """The project's job on the testbed that a requested bisection takes its suite from."""
    job, _ = jobs.create(
        db,
        project_id=pid,
        new=jobs.NewJob(spec=SPEC, testbed=testbed, provenance=Provenance(branch="main", commit=commit, repo=REPO)),
        limits=Limits(),
        max_attempts=3,
        github_feedback=False,
    )
    job.status = "done"
    if with_run:  # its run names the suite's cases
        job.run_id = runs.store_run(
            db,
            project_id=pid,
            document=ResultDocument.model_validate(docs.h200()),
            provenance=Provenance(branch="main", commit=commit, repo=REPO),
            testbed=testbed,
            job_id=job.id,
        ).id
    db.flush()
    return job


def answer(db: Session, job: Job, history: History) -> None:
    """What a worker and the analysis make of a probe job: its run and a paired comparison, or a failure."""
    assert job.paired and job.background and job.base_commit is not None
    if history.shas.index(job.commit) in history.broken if job.commit in history.shas else False:
        job.status, job.reason = "failed", "the case failed: ImportError: cannot import name 'kernel'"
        db.flush()
        return
    effect = history.effect(job.base_commit, job.commit)
    base, head = docs.h200(cases=[CASE]), docs.h200(slower=1 + effect, cases=[CASE])
    run = runs.store_run(
        db,
        project_id=job.project_id,
        document=ResultDocument.model_validate(head),
        provenance=Provenance(branch=job.branch, commit=job.commit),
        job_id=job.id,
    )
    found = compare([ResultDocument.model_validate(base)], ResultDocument.model_validate(head))
    document = found.model_dump(mode="json", by_alias=True) | {"mode": "paired"}
    db.add(
        Comparison(
            id=str(uuid.uuid4()),
            project_id=job.project_id,
            candidate_run_id=run.id,
            baseline_run_ids=[],
            verdict=found.verdict,
            document=document,
            mode="paired",
        )
    )
    job.run_id, job.status, job.finished_at = run.id, "done", utcnow()
    db.flush()


def drive(db: Session, b: Bisection, history: History, settings: Settings, *, limit: int = 40) -> list[Job]:
    """Advance ``b`` until it ends, answering each probe job it makes; returns the probe jobs."""
    made: list[Job] = []
    for _ in range(limit):
        if b.status not in ("pending", "running"):
            return made
        job = bisections.advance(db, b, source=history, settings=settings)
        if job is not None:
            made.append(job)
            answer(db, job, history)
    raise AssertionError(f"bisection {b.id} did not end: {b.status} {b.summary}")


def requested(
    db: Session, pid: int, testbed: str, history: History, good: int = 0, bad: int | None = None
) -> Bisection:
    return bisections.request(
        db,
        project_id=pid,
        testbed=testbed,
        good=history.shas[good],
        bad=history.shas[-1 if bad is None else bad],
        by="the tests",
        via="api",
    )


@pytest.mark.parametrize("culprit", [1, 6, 11, 16])
def test_the_culprit_of_sixteen_commits_is_found_and_confirmed_in_log2_n_plus_one_probes(
    culprit: int, tenant: Tenant, db: Session, settings: Settings
) -> None:
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    seed_job(db, pid, tb)
    history = History(16, {culprit: 2.0}, pr_of={sha(culprit): 42})
    b = requested(db, pid, tb, history)
    made = drive(db, b, history, settings)
    assert b.status == "confirmed" and b.culprit == sha(culprit) and b.culprit_pr == 42, b.summary
    # The first probe measures the step (a requested bisection has none); then ⌈log₂ 16⌉ midpoints and the
    # confirmation at most, one pair each.
    assert 1 + math.ceil(math.log2(16)) + 1 >= len(made)
    pairs = [
        (p.good, p.candidate) for p in db.scalars(select(BisectionProbe).where(BisectionProbe.bisection_id == b.id))
    ]
    assert len(pairs) == len(set(pairs)) == len(made)
    assert all(j.background and j.paired and j.branch == f"{bisections.BRANCH_PREFIX}{b.id}" for j in made)
    assert all(j.repo is None for j in made)  # a probe posts nothing to GitHub
    assert b.effect is not None and 1.9 < b.effect < 2.1
    assert f"{sha(culprit)} made the step: +200" in (b.summary or "")
    assert b.comment_due_at is not None  # the culprit's pull request is owed a comment
    # Each tree was fetched once, however many probes it was a side of.
    assert len(history.trees) == len(set(history.trees))


def test_a_step_shared_by_two_commits_is_said_to_be_spread_with_each_share(
    tenant: Tenant, db: Session, settings: Settings
) -> None:
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    seed_job(db, pid, tb)
    history = History(8, {3: 1.0, 6: 1.0})
    b = drive_requested(db, pid, tb, history, settings)
    assert b.status == "spread" and b.culprit is None, b.summary
    # Each commit's part, as far as the probes tell them apart: commit 3 alone, and the stretch after the probe of
    # commit 4 that holds commit 6.
    assert f"{sha(3)} 50%" in (b.summary or "") and f"{sha(5)}..{sha(8)} (4 commits) 50%" in (b.summary or "")


def drive_requested(db: Session, pid: int, tb: str, history: History, settings: Settings) -> Bisection:
    b = requested(db, pid, tb, history)
    drive(db, b, history, settings)
    return b


def test_a_commit_that_does_not_build_is_skipped_and_named(tenant: Tenant, db: Session, settings: Settings) -> None:
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    seed_job(db, pid, tb)
    # Away from the culprit: skipped, the culprit still confirmed.
    b = drive_requested(db, pid, tb, History(8, {6: 2.0}, broken=frozenset({4})), settings)
    assert b.status == "confirmed" and b.culprit == sha(6)
    skipped = db.scalars(
        select(BisectionProbe).where(BisectionProbe.bisection_id == b.id, BisectionProbe.outcome == "skip")
    ).all()
    assert [p.candidate for p in skipped] == [sha(4)] and "ImportError" in (skipped[0].detail or "")
    # The culprit's parent does not build: it is one of the two, as git bisect skip says.
    hidden = drive_requested(db, pid, tb, History(8, {5: 2.0}, broken=frozenset({4})), settings)
    assert hidden.status == "skipped" and sha(4) in (hidden.summary or "") and sha(5) in (hidden.summary or "")


def _runs_and_alert(db: Session, pid: int, tb: str, history: History, *, torch: str | None = None) -> Alert:
    """The two runs around a step of the default branch, made by jobs, and the alert on it."""
    seed = seed_job(db, pid, tb, commit=history.shas[-1])
    made = []
    for i, commit in ((0, history.shas[0]), (1, history.shas[-1])):
        doc = docs.h200(slower=1.0 + history.effect(history.shas[0], commit), cases=[CASE])
        if torch and i:
            doc["environment"]["torch"] = torch
        made.append(
            runs.store_run(
                db,
                project_id=pid,
                document=ResultDocument.model_validate(doc),
                provenance=Provenance(branch="main", commit=commit, repo=REPO),
                testbed=tb,
                job_id=seed.id,
            )
        )
    before, after = made
    alert = Alert(
        project_id=pid,
        testbed_id=after.testbed_id,
        case_id=CASE,
        metric="latency",
        unit="us",
        before_run_id=before.id,
        run_id=after.id,
        before=100.0,
        after=300.0,
        change=2.0,
        ci_low=1.9,
        ci_high=2.1,
        p=0.001,
        regression=True,
        created_at=utcnow(),
        notify_attempts=0,
    )
    db.add(alert)
    db.flush()
    return alert


def test_an_alert_starts_one_bisection_per_step_that_names_the_culprit_on_the_alert(
    tenant: Tenant, db: Session, settings: Settings
) -> None:
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    history = History(12, {9: 2.0})
    alert = _runs_and_alert(db, pid, tb, history)
    started = bisections.start_for_alerts(db, max_age=timedelta(days=7))
    assert [b.id for b in started] == [alert.bisection_id] and started[0].cases == [CASE]
    assert bisections.start_for_alerts(db, max_age=timedelta(days=7)) == []  # a step is started once
    b = started[0]
    made = drive(db, b, history, settings)
    assert b.status == "confirmed" and b.culprit == sha(9), b.summary
    assert len(made) <= math.ceil(math.log2(12)) + 1  # the alert gave the step: no probe measures it
    db.refresh(alert)
    assert alert.culprit == sha(9)


def test_a_step_with_no_culprit_in_the_code_but_new_software_is_the_environments(
    tenant: Tenant, db: Session, settings: Settings
) -> None:
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    history = History(6, {})  # no commit is slower: the runs differ because PyTorch changed under them
    alert = _runs_and_alert(db, pid, tb, history, torch="2.99.0")
    (b,) = bisections.start_for_alerts(db, max_age=timedelta(days=7))
    assert b.environment and b.environment["torch"][1] == "2.99.0"
    drive(db, b, history, settings)
    assert b.status == "environment" and b.culprit is None, b.summary
    assert "torch" in (b.summary or "") and "2.99.0" in (b.summary or "")
    db.refresh(alert)
    assert alert.culprit is None


def test_a_merge_that_holds_the_step_is_searched_through_the_commits_it_merged(
    tenant: Tenant, db: Session, settings: Settings
) -> None:
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    seed_job(db, pid, tb)
    branch = [sha(i, salt=7) for i in range(5)]
    # Commit 4 of the main line merges a branch of five commits, whose third made the step.
    history = History(
        8, {4: 2.0}, merged={4: branch}, branch_effect={c: 2.0 if k >= 2 else 0.0 for k, c in enumerate(branch)}
    )
    b = drive_requested(db, pid, tb, history, settings)
    assert b.status == "confirmed" and b.culprit == branch[2], b.summary
    assert b.merges and b.merges[0]["sha"] == sha(4) and b.merges[0]["searched"]


def test_a_bisection_resumes_from_its_rows_and_never_probes_a_pair_twice(
    tenant: Tenant, db: Session, settings: Settings
) -> None:
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    seed_job(db, pid, tb)
    history = History(16, {13: 2.0})
    b = requested(db, pid, tb, history)
    first = bisections.advance(db, b, source=history, settings=settings)
    assert first is not None
    # The sweep that made the job died; another finds the job still running and waits, making nothing new.
    db.expire_all()
    again = db.get(Bisection, b.id)
    assert again is not None
    assert bisections.advance(db, again, source=history, settings=settings) is None
    answer(db, first, history)
    made = [first, *drive(db, again, history, settings)]
    assert again.status == "confirmed" and again.culprit == sha(13)
    assert len({(j.base_commit, j.commit) for j in made}) == len(made)


def test_acknowledging_the_alerts_cancels_the_bisection_and_its_probe(
    tenant: Tenant, db: Session, settings: Settings
) -> None:
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    history = History(10, {7: 2.0})
    alert = _runs_and_alert(db, pid, tb, history)
    (b,) = bisections.start_for_alerts(db, max_age=timedelta(days=7))
    probe = bisections.advance(db, b, source=history, settings=settings)
    assert probe is not None and probe.status == "queued"
    alert.acknowledged_at, alert.acknowledged_by = utcnow(), "ops (admin, API)"
    assert bisections.advance(db, b, source=history, settings=settings) is None
    assert b.status == "cancelled" and "acknowledged as expected by ops" in (b.summary or "")
    assert probe.status == "cancelled"


def test_a_step_of_one_commit_needs_no_probe(tenant: Tenant, db: Session, settings: Settings) -> None:
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    history = History(1, {1: 2.0})
    _runs_and_alert(db, pid, tb, history)
    (b,) = bisections.start_for_alerts(db, max_age=timedelta(days=7))
    assert drive(db, b, history, settings) == []
    assert b.status == "single" and b.culprit == sha(1)


def test_the_api_starts_lists_shows_and_cancels_and_refuses_bad_input(
    client: TestClient, tenant: Tenant, db: Session
) -> None:
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    seed_job(db, pid, tb, with_run=True)
    db.commit()
    url = f"/api/v1/projects/{tenant.name}/bisections"
    body = {"testbed": tb, "good": sha(0), "bad": sha(5)}
    assert client.post(url, json=body, headers=tenant.h("read")).status_code == 403
    for bad, field in (
        ({**body, "good": "main"}, "good"),
        ({**body, "bad": "../x"}, "bad"),
        ({**body, "testbed": ""}, "testbed"),
        ({**body, "cases": ["nope"]}, "cases"),
        ({**body, "extra": 1}, "extra"),
    ):
        r = client.post(url, json=bad, headers=tenant.h("submit"))
        assert r.status_code == 422 and field in r.text, (field, r.text)
    r = client.post(url, json={**body, "testbed": "no-such-testbed"}, headers=tenant.h("submit"))
    assert r.status_code == 404 and "no-such-testbed" in r.text
    assert db.scalars(select(Bisection).where(Bisection.project_id == pid)).all() == []  # nothing was made
    r = client.post(url, json=body, headers=tenant.h("submit"))
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["status"] == "pending" and made["suite"] == "kernels" and made["requested_via"] == "api"
    assert client.post(url, json=body, headers=tenant.h("submit")).status_code == 409  # the same range, open
    listed = client.get(url, headers=tenant.h("read")).json()["bisections"]
    assert [b["id"] for b in listed] == [made["id"]]
    one = client.get(f"{url}/{made['id']}", headers=tenant.h("read"))
    assert one.status_code == 200 and one.json()["probes"] == []
    assert client.get(f"{url}/999999", headers=tenant.h("read")).status_code == 404
    r = client.post(f"{url}/{made['id']}/cancel", headers=tenant.h("submit"))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert client.post(f"{url}/{made['id']}/cancel", headers=tenant.h("submit")).status_code == 409


def test_a_probe_is_offered_only_when_no_other_job_waits_on_its_testbed(db: Session, tenant: Tenant) -> None:
    now = utcnow()
    tb = testbeds.ensure(db, f"tb-{uuid.uuid4().hex[:8]}")
    pid = project_id(tenant, db)
    other = projects.get_by_name(db, tenant.name)
    assert other is not None

    def waiting(commit: str, background: bool) -> Job:
        job, _ = jobs.create(
            db,
            project_id=pid,
            new=jobs.NewJob(
                spec=SPEC, testbed=tb.name, provenance=Provenance(branch="main", commit=commit), background=background
            ),
            limits=Limits(),
            max_attempts=3,
        )
        db.flush()
        return job

    probe = waiting("probe", True)  # the oldest
    pr = waiting("pr", False)
    testbed_rows.worker_seen(db, testbed_id=tb.id, name="w1", now=now)
    offered = [m.job_id for m in dispatch.offer(db, testbed_id=tb.id, cfg=Fairness(), now=now)]
    assert offered == [pr.id]
    pr.status = "done"
    offered = [m.job_id for m in dispatch.offer(db, testbed_id=tb.id, cfg=Fairness(), now=now + timedelta(seconds=1))]
    assert offered == [probe.id]


def test_the_webhook_body_of_an_alert_with_a_confirmed_culprit_names_it() -> None:
    from attnprof.server.comparisons.alert_webhook import AlertContext, body

    alert = Alert(
        id=3,
        case_id=CASE,
        metric="latency",
        unit="us",
        before_run_id="r1",
        run_id="r2",
        before=100.0,
        after=300.0,
        change=2.0,
        ci_low=1.9,
        ci_high=2.1,
        p=0.001,
        regression=True,
        min_effect=0.02,
    )
    ctx = AlertContext(
        project="p",
        testbed="h100",
        branch="main",
        last_good_commit=sha(0),
        last_good_at=None,
        first_bad_commit=sha(9),
        first_bad_at=None,
        url="http://x/ui",
    )
    plain = body(alert, ctx)
    assert plain["alert"]["culprit"] is None and "between" in plain["text"]
    alert.culprit, alert.bisection_id = sha(5), 12
    named = body(alert, ctx)
    assert named["alert"]["culprit"] == sha(5) and named["alert"]["bisection_id"] == 12
    assert f"made by {sha(5)[:10]}" in named["text"]
    assert any(sha(5)[:12] in str(b) for b in named["blocks"])


def test_with_the_services_token_only_an_allowed_repository_is_read_and_only_hashes_are_looked_up(
    tenant: Tenant, db: Session, settings: Settings
) -> None:
    from pydantic import SecretStr

    from tests.server.stack import allow_repo

    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    seed_job(db, pid, tb)
    history = History(4, {3: 2.0})
    with_token = settings.model_copy(update={"github_token": SecretStr("service-token")})
    b = requested(db, pid, tb, history)
    # The project's job named a repository as a label (no token then); the service's token never reads it for them.
    assert bisections.advance(db, b, source=history, settings=with_token) is None
    assert b.status == "failed" and "not among the project's repositories" in (b.summary or "")
    assert history.ranges == [] and history.trees == []  # nothing was asked of GitHub
    allow_repo(db, tenant.name, REPO)
    allowed = requested(db, pid, tb, history)
    probe = bisections.advance(db, allowed, source=history, settings=with_token)
    assert probe is not None and probe.status == "queued"
    # The admin takes the allowance away while it runs: it stops at its next step, its probe with it.
    from attnprof.server.projects import service as project_service

    project_service.disallow_repository(db, project_id=pid, repo=REPO)
    assert bisections.advance(db, allowed, source=history, settings=with_token) is None
    assert allowed.status == "failed" and probe.status == "cancelled"
    # A run's commit may be any label: only hashes are looked up.
    labelled = bisections.request(
        db, project_id=pid, testbed=tb, good="v1.0", bad=history.shas[-1], by="the tests", via="api"
    )
    assert bisections.advance(db, labelled, source=history, settings=settings) is None
    assert labelled.status == "failed" and "'v1.0' is not a commit hash" in (labelled.summary or "")


def test_the_culprits_comment_keeps_hostile_case_and_kernel_names_inside_their_code_spans(
    tenant: Tenant, db: Session, settings: Settings
) -> None:
    from attnprof.server.github.bisect import comment_body

    tb = f"tb-{uuid.uuid4().hex[:8]}"
    pid = project_id(tenant, db)
    seed_job(db, pid, tb)
    history = History(4, {2: 2.0})
    b = requested(db, pid, tb, history)
    drive(db, b, history, settings)
    assert b.status == "confirmed"
    b.cases = ["x` @acme/everyone [click](https://evil.example) `y"]
    body = comment_body(db, b)
    assert "``x` @acme/everyone [click](https://evil.example) `y``" in body  # one code span: no mention, no link
