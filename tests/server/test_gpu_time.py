"""GPU time accounted: each attempt's claim to its end charged to its job (a failure that is retried, then a result;
a lost worker up to its last heartbeat; a cancel while it runs), the job's answer and its pull-request comment saying
it, the project's usage per day and testbed, and a daily quota set by the service's admin that holds the project's
jobs back (never drops them), says why on each, and lets them go the next day."""

from __future__ import annotations

import uuid
from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from attnprof.contract.provenance import Provenance
from attnprof.server.config import Fairness, Limits, Sweep
from attnprof.server.db import utcnow
from attnprof.server.github.comment import CommentInput, render
from attnprof.server.jobs import dispatch, gpu_time, sweep
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import Job
from attnprof.server.projects import repository as projects
from attnprof.server.testbeds import repository as testbed_rows
from tests.claiming import bearer, claim, claim_secret
from tests.server.stack import REDIS_URL
from tests.server.tenants import Tenant

SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "prefill"\ntarget = "sdpa"\nq_heads = 4\nseq_q = 128\nhead_dim = 64\n'


def _submit(client: TestClient, tenant: Tenant, testbed: str) -> str:
    r = client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode())},
        data={"testbed": testbed, "branch": "main", "commit": uuid.uuid4().hex[:12]},
        headers=tenant.h("submit"),
    )
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _held_for(db: Session, job_id: str, seconds: float) -> None:
    """The running attempt was claimed ``seconds`` ago."""
    job = db.get(Job, job_id)
    assert job is not None
    job.started_at = utcnow() - timedelta(seconds=seconds)
    db.commit()


def test_each_attempt_is_charged_from_its_claim_to_its_end(
    client: TestClient, db: Session, tenant: Tenant, worker_token: tuple[str, str]
) -> None:
    testbed, wtok = worker_token
    job_id = _submit(client, tenant, testbed)
    token = claim(client, wtok, job_id, claim_secret(REDIS_URL, testbed, job_id))["token"]
    _held_for(db, job_id, 30)
    r = client.post(
        f"/internal/jobs/{job_id}/failure",
        json={"attempt": 1, "reason": "the host's GPU fell off the bus", "retry": True},
        headers=bearer(token),
    )
    assert r.status_code == 200, r.text
    db.expire_all()
    job = db.get(Job, job_id)
    assert job is not None and job.status == "queued" and 30 <= job.gpu_seconds < 40
    dispatch.after_commit(db, client.app.state.settings, [job.testbed_id])  # type: ignore[attr-defined]
    token = claim(client, wtok, job_id, claim_secret(REDIS_URL, testbed, job_id, attempt=2), attempt=2)["token"]
    _held_for(db, job_id, 12)
    r = client.post(
        f"/internal/jobs/{job_id}/failure", json={"attempt": 2, "reason": "a bad case"}, headers=bearer(token)
    )
    assert r.status_code == 200, r.text
    answer = client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()
    assert answer["status"] == "failed" and 42 <= answer["gpu_seconds"] < 55  # both attempts


def test_a_lost_worker_is_charged_to_its_last_heartbeat_and_a_cancel_to_its_moment(
    client: TestClient, db: Session, tenant: Tenant, worker_token: tuple[str, str]
) -> None:
    testbed, wtok = worker_token
    lost_id, cancelled_id = _submit(client, tenant, testbed), _submit(client, tenant, testbed)
    testbed_rows.worker_seen(db, testbed_id=db.get(Job, lost_id).testbed_id, name="w2", now=utcnow())  # type: ignore[union-attr]
    db.commit()
    dispatch.after_commit(db, client.app.state.settings, [db.get(Job, lost_id).testbed_id])  # type: ignore[attr-defined,union-attr]
    for job_id in (lost_id, cancelled_id):
        claim(client, wtok, job_id, claim_secret(REDIS_URL, testbed, job_id))
    now = utcnow()
    lost = db.get(Job, lost_id)
    assert lost is not None
    lost.started_at, lost.heartbeat_at = now - timedelta(seconds=300), now - timedelta(seconds=200)
    lost.lease_expires_at = now - timedelta(seconds=1)
    db.commit()
    sweep.sweep(db, cfg=Sweep(), now=now, pending=lambda name: 0)
    db.commit()
    db.refresh(lost)
    assert lost.status == "queued" and 99 <= lost.gpu_seconds <= 101  # claim to its last heartbeat
    _held_for(db, cancelled_id, 20)
    r = client.post(f"/api/v1/jobs/{cancelled_id}/cancel", headers=tenant.h("submit"))
    assert r.status_code == 200 and 20 <= r.json()["gpu_seconds"] < 30, r.text


def test_usage_per_day_and_testbed_and_the_comment_says_what_the_check_cost(
    client: TestClient, db: Session, tenant: Tenant
) -> None:
    project = projects.get_by_name(db, tenant.name)
    assert project is not None
    now = utcnow()
    made = []
    for seconds, paired, background, days_ago, testbed in (
        (40.0, False, False, 0, "h100"),
        (60.0, True, False, 0, "h100"),
        (25.0, True, True, 0, "h200"),
        (100.0, False, False, 1, "h100"),
    ):
        job, _ = jobs.create(
            db,
            project_id=project.id,
            new=jobs.NewJob(
                spec=SPEC, testbed=f"{testbed}-{tenant.name}", provenance=Provenance(branch="main", commit="c")
            ),
            limits=Limits(),
            max_attempts=3,
        )
        job.status, job.gpu_seconds, job.paired, job.background = "done", seconds, paired, background
        job.started_at = now - timedelta(days=days_ago, seconds=1)
        made.append(job)
    db.commit()
    answer = client.get(f"/api/v1/projects/{tenant.name}/usage?days=7", headers=tenant.h("read")).json()
    rows = {(r["day"], r["testbed"]): r for r in answer["days"]}
    today = (now - timedelta(seconds=1)).date().isoformat()
    h100 = rows[(today, f"h100-{tenant.name}")]
    assert (h100["jobs"], h100["gpu_seconds"], h100["paired_seconds"]) == (2, 100.0, 60.0)
    assert rows[(today, f"h200-{tenant.name}")]["bisection_seconds"] == 25.0
    assert answer["total_gpu_seconds"] == 225.0 and answer["quota_gpu_seconds_per_day"] is None
    assert client.get(f"/api/v1/projects/{tenant.name}/usage?days=0", headers=tenant.h("read")).status_code == 422
    body = render(
        CommentInput(
            project=tenant.name,
            job_id=made[1].id,
            status="done",
            suite_name="s",
            testbed="h100",
            branch="main",
            commit="c" * 40,
            public_url="http://x",
            gpu_seconds=61.5,
        )
    )
    assert "The check held the GPU for 61.5 s." in body


def test_a_project_past_its_daily_quota_waits_for_the_next_day_and_is_told_why(
    client: TestClient, db: Session, tenant: Tenant, other: Tenant
) -> None:
    from attnprof.server.cli import admin_app

    runner = CliRunner()
    for bad in ("lots", "0", "nan", "inf"):  # refused before the database is opened
        refused = runner.invoke(admin_app, ["gpu-quota", tenant.name, bad])
        assert refused.exit_code == 2 and "seconds: a number of seconds over 0" in refused.output, refused.output
    now = utcnow()
    tb = f"tb-{uuid.uuid4().hex[:8]}"
    heavy = projects.get_by_name(db, tenant.name)
    light = projects.get_by_name(db, other.name)
    assert heavy is not None and light is not None
    heavy.gpu_seconds_per_day = 600.0
    db.commit()

    def waiting(project_id: int) -> Job:
        job, _ = jobs.create(
            db,
            project_id=project_id,
            new=jobs.NewJob(spec=SPEC, testbed=tb, provenance=Provenance(branch="main", commit="c")),
            limits=Limits(),
            max_attempts=3,
        )
        db.flush()
        return job

    spent = waiting(heavy.id)
    # today's, whatever the hour: an hour ago, or midnight when the day is younger than that
    spent.status, spent.gpu_seconds = "done", 650.0
    spent.started_at = max(now - timedelta(hours=1), gpu_time.day_start(now))
    held, free = waiting(heavy.id), waiting(light.id)
    testbed_rows.worker_seen(db, testbed_id=held.testbed_id, name="w1", now=now)
    testbed_rows.worker_seen(db, testbed_id=held.testbed_id, name="w2", now=now)
    offered = [m.job_id for m in dispatch.offer(db, testbed_id=held.testbed_id, cfg=Fairness(), now=now)]
    assert offered == [free.id]  # the heavy project's job waits, with two workers free
    notice = jobs.to_out(db, held, Fairness(), now=now).notice
    assert notice is not None and "used its GPU quota for the day (650 s of 600 s" in notice
    assert held.status == "queued"  # never dropped
    free.status = "done"
    tomorrow = gpu_time.day_start(now) + timedelta(days=1, minutes=1)
    testbed_rows.worker_seen(db, testbed_id=held.testbed_id, name="w1", now=tomorrow)
    offered = [m.job_id for m in dispatch.offer(db, testbed_id=held.testbed_id, cfg=Fairness(), now=tomorrow)]
    assert offered == [held.id]
