"""The sweeper's decisions as plain code, on a real (migrated) Postgres, without Celery or a broker."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy.orm import Session
from wkstack import db_fixture, engine_fixture, pg_url_fixture  # noqa: F401 (fixtures db, engine, pg_url)

from service import queue
from service.config import Limits, Sweep
from service.db import utcnow
from service.jobs import service as jobs
from service.jobs import sweep
from service.jobs.models import Job
from service.projects import service as projects

CFG = Sweep(interval_s=1, queued_stale_s=60, heartbeat_stale_s=30, analyzing_stale_s=120)
SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "c"\ntarget = "sdpa"\nq_heads = 2\nseq_q = 64\nhead_dim = 32\n'


def _job(db: Session, testbed: str, **fields: object) -> Job:
    project = projects.create(db, name=f"sw-{uuid.uuid4().hex[:8]}")
    job, _ = jobs.create(
        db,
        project_id=project.id,
        new=jobs.NewJob(spec=SPEC, testbed=testbed, branch="main", commit="abc"),
        limits=Limits(),
        max_attempts=2,
    )
    for name, value in fields.items():
        setattr(job, name, value)
    db.flush()
    return job


def _nothing_pending(_: str) -> queue.Pending:
    return set()


def test_a_dead_workers_job_is_queued_for_the_next_attempt_then_failed(db: Session) -> None:
    now = utcnow()
    tb = f"tb-{uuid.uuid4().hex[:6]}"
    job = _job(
        db, tb, status="running", attempts=1, claimed_by="gpu-host/pid7", heartbeat_at=now - timedelta(seconds=45)
    )
    fresh = _job(db, tb, status="running", attempts=1, heartbeat_at=now - timedelta(seconds=5))
    report = sweep.sweep(db, cfg=CFG, now=now, pending=_nothing_pending)
    assert [(s.task, s.job_id, s.attempt, s.testbed) for s in report.sends] == [("profile", job.id, 2, tb)]
    assert job.status == "queued" and job.claimed_by is None
    assert (
        job.reason
        == "attempt 1 lost its worker (gpu-host/pid7): no heartbeat for 45 s; queued again for attempt 2 of 2"
    )
    assert fresh.status == "running"
    # attempt 2 dies too: that was the last one
    job.status, job.attempts, job.heartbeat_at = "running", 2, now - timedelta(seconds=100)
    db.flush()
    report = sweep.sweep(db, cfg=CFG, now=now, pending=_nothing_pending)
    assert report.failed == [job.id] and not report.sends
    assert job.status == "failed" and job.finished_at == now
    assert job.reason == "attempt 2 lost its worker: no heartbeat for 100 s, and it was the last of 2 attempts"


def test_a_lost_message_is_sent_again_and_a_waiting_one_is_left_alone(db: Session) -> None:
    now = utcnow()
    old = now - timedelta(seconds=90)
    tb = f"tb-{uuid.uuid4().hex[:6]}"
    lost = _job(db, tb, updated_at=old)
    waiting = _job(db, tb, updated_at=old)
    recent = _job(db, tb, updated_at=now - timedelta(seconds=10))
    asked: list[str] = []

    def pending(name: str) -> queue.Pending:
        asked.append(name)
        return {(queue.PROFILE_TASK, (waiting.id, 1)), (queue.PROFILE_TASK, (lost.id, 7))}

    report = sweep.sweep(db, cfg=CFG, now=now, pending=pending)
    assert [(s.job_id, s.attempt) for s in report.sends if s.job_id in (lost.id, waiting.id, recent.id)] == [
        (lost.id, 1)
    ]
    assert asked == [f"profile.{tb}"]  # the broker is read once per queue
    assert lost.updated_at == now and waiting.updated_at == old and lost.status == "queued"


def test_an_unreadable_broker_means_one_resend_per_stale_period(db: Session) -> None:
    now = utcnow()
    job = _job(db, f"tb-{uuid.uuid4().hex[:6]}", updated_at=now - timedelta(seconds=90))
    first = sweep.sweep(db, cfg=CFG, now=now, pending=lambda _: None)
    assert job.id in {s.job_id for s in first.sends}
    again = sweep.sweep(db, cfg=CFG, now=now + timedelta(seconds=5), pending=lambda _: None)
    assert job.id not in {s.job_id for s in again.sends}
    later = sweep.sweep(db, cfg=CFG, now=now + timedelta(seconds=61), pending=lambda _: None)
    assert job.id in {s.job_id for s in later.sends}


def test_an_analysis_whose_message_was_lost_is_sent_again(db: Session) -> None:
    now = utcnow()
    job = _job(
        db, f"tb-{uuid.uuid4().hex[:6]}", status="analyzing", attempts=1, updated_at=now - timedelta(seconds=300)
    )
    held = _job(
        db, f"tb-{uuid.uuid4().hex[:6]}", status="analyzing", attempts=1, updated_at=now - timedelta(seconds=300)
    )

    def pending(name: str) -> queue.Pending:
        assert name == queue.ANALYSIS_QUEUE
        return {(queue.ANALYSIS_TASK, (held.id,))}

    report = sweep.sweep(db, cfg=CFG, now=now, pending=pending)
    sent = {(s.task, s.job_id) for s in report.sends}
    assert ("analysis", job.id) in sent and ("analysis", held.id) not in sent


def test_final_jobs_are_never_touched(db: Session) -> None:
    now = utcnow()
    old = now - timedelta(days=1)
    tb = f"tb-{uuid.uuid4().hex[:6]}"
    rows = [
        _job(db, tb, status=s, updated_at=old, heartbeat_at=old) for s in ("done", "failed", "timed_out", "cancelled")
    ]
    report = sweep.sweep(db, cfg=CFG, now=now, pending=_nothing_pending)
    assert not {s.job_id for s in report.sends} & {r.id for r in rows}
    assert [r.status for r in rows] == ["done", "failed", "timed_out", "cancelled"]
