"""The sweeper's decisions as plain code, on a real (migrated) Postgres, without Celery or a broker."""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta

from sqlalchemy.orm import Session

from attnprof.contract import tasks
from attnprof.contract.provenance import Provenance
from attnprof.server import queue
from attnprof.server.config import Fairness, Limits, Sweep
from attnprof.server.db import utcnow
from attnprof.server.jobs import dispatch, sweep
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import Job
from attnprof.server.projects import service as projects

CFG = Sweep(interval_s=1, queued_stale_s=60, heartbeat_stale_s=30, analyzing_stale_s=120)
SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "c"\ntarget = "sdpa"\nq_heads = 2\nseq_q = 64\nhead_dim = 32\n'


def _job(db: Session, testbed: str, **fields: object) -> Job:
    project = projects.create(db, name=f"sw-{uuid.uuid4().hex[:8]}")
    job, _ = jobs.create(
        db,
        project_id=project.id,
        new=jobs.NewJob(spec=SPEC, testbed=testbed, provenance=Provenance(branch="main", commit="abc")),
        limits=Limits(),
        max_attempts=2,
    )
    for name, value in fields.items():
        setattr(job, name, value)
    db.flush()
    return job


def _nothing_pending(_: str) -> queue.Pending:
    return queue.Pending()


def _sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def test_a_dead_workers_job_is_queued_for_the_next_attempt_then_failed(db: Session) -> None:
    now = utcnow()
    tb = f"tb-{uuid.uuid4().hex[:6]}"
    job = _job(
        db,
        tb,
        status="running",
        attempts=1,
        claimed_by="gpu-host/pid7",
        heartbeat_at=now - timedelta(seconds=45),
        lease_expires_at=now - timedelta(seconds=15),
        job_token_sha256=_sha("apj_dead"),
    )
    # Its heartbeats are old, but its lease was renewed: the row's lease is what counts.
    fresh = _job(
        db,
        tb,
        status="running",
        attempts=1,
        heartbeat_at=now - timedelta(seconds=50),
        lease_expires_at=now + timedelta(seconds=5),
    )
    report = sweep.sweep(db, cfg=CFG, now=now, pending=_nothing_pending)
    # Queued again, it waits for the dispatcher like a new job: no message yet, and none of the old one claims it.
    assert not report.sends and job.testbed_id in report.dispatch
    # The worker that ran the lost attempt stays named (the next claim replaces it).
    assert job.status == "queued" and job.claimed_by == "gpu-host/pid7"
    assert job.offered_at is None and job.claim_secret_sha256 is None
    (message,) = dispatch.offer(db, testbed_id=job.testbed_id, cfg=Fairness(), now=now)
    assert (message.job_id, message.attempt, message.testbed) == (job.id, 2, tb)
    assert job.claim_secret_sha256 == _sha(message.claim_secret) and message.claim_secret not in repr(message)
    assert job.job_token_sha256 is None and job.lease_expires_at is None  # the dead attempt's token opens nothing
    assert (
        job.reason
        == "attempt 1 lost its worker (gpu-host/pid7): no heartbeat for 45 s; queued again for attempt 2 of 2"
    )
    assert fresh.status == "running"
    # attempt 2 dies too: that was the last one
    job.status, job.attempts, job.heartbeat_at = "running", 2, now - timedelta(seconds=100)
    job.lease_expires_at, job.job_token_sha256 = now - timedelta(seconds=70), _sha("apj_dead_too")
    job.claimed_by = "other-host/pid9"  # as attempt 2's claim names its worker
    db.flush()
    report = sweep.sweep(db, cfg=CFG, now=now, pending=_nothing_pending)
    assert report.failed == [job.id] and not report.sends
    assert job.status == "failed" and job.finished_at == now and job.job_token_sha256 is None
    assert job.reason == (
        "attempt 2 lost its worker (other-host/pid9): no heartbeat for 100 s, and it was the last of 2 attempts"
    )
    assert job.claimed_by == "other-host/pid9"  # a failed job keeps the worker that ran it


def test_a_lost_message_is_sent_again_with_a_new_secret_and_a_waiting_one_is_left_alone(db: Session) -> None:
    now = utcnow()
    old = now - timedelta(seconds=90)
    tb = f"tb-{uuid.uuid4().hex[:6]}"
    lost = _job(db, tb, offered_at=old, claim_secret_sha256=_sha("apc_lost"))
    waiting = _job(db, tb, offered_at=old, claim_secret_sha256=_sha("apc_waiting"))
    taken = _job(db, tb, offered_at=old, claim_secret_sha256=_sha("apc_taken"))
    superseded = _job(db, tb, offered_at=old, claim_secret_sha256=_sha("apc_new"))
    recent = _job(db, tb, offered_at=now - timedelta(seconds=10), claim_secret_sha256=_sha("apc_recent"))
    # Never offered: it waits for the dispatcher, and has no message to lose however long it has been queued.
    unoffered = _job(db, tb, updated_at=old, created_at=old)
    asked: list[str] = []

    def pending(name: str) -> queue.Pending:
        asked.append(name)
        return queue.Pending(
            waiting=frozenset(
                {
                    (tasks.PROFILE_TASK, (waiting.id, 1, "apc_waiting")),
                    (tasks.PROFILE_TASK, (lost.id, 7, "apc_lost")),  # another attempt's
                    (tasks.PROFILE_TASK, (superseded.id, 1, "apc_old")),  # claims nothing: not the row's secret
                }
            ),
            unacked=frozenset({(tasks.PROFILE_TASK, (taken.id, 1, "apc_taken"))}),  # a worker is claiming it
        )

    report = sweep.sweep(db, cfg=CFG, now=now, pending=pending)
    mine = {lost.id, waiting.id, taken.id, superseded.id, recent.id, unoffered.id}
    sent = {s.job_id: s for s in report.sends if s.job_id in mine}
    assert set(sent) == {lost.id, superseded.id}
    assert asked == [f"profile.{tb}"]  # the broker is read once per queue
    assert sent[lost.id].why == "offered 90 s ago: no message in the broker"  # how long, taken before it is moved
    assert unoffered.offered_at is None and unoffered.claim_secret_sha256 is None
    for job in (lost, superseded):
        message = sent[job.id].message
        assert message is not None and message.attempt == 1
        assert job.claim_secret_sha256 == _sha(message.claim_secret)  # rotated: the old secret claims nothing
    assert lost.offered_at == now and waiting.offered_at == old and lost.status == "queued"
    assert waiting.claim_secret_sha256 == _sha("apc_waiting") and taken.claim_secret_sha256 == _sha("apc_taken")


def test_an_unreadable_broker_means_one_resend_per_stale_period(db: Session) -> None:
    now = utcnow()
    job = _job(db, f"tb-{uuid.uuid4().hex[:6]}", offered_at=now - timedelta(seconds=90))
    first = sweep.sweep(db, cfg=CFG, now=now, pending=lambda _: None)
    assert job.id in {s.job_id for s in first.sends}
    assert [s.why for s in first.sends if s.job_id == job.id] == ["offered 90 s ago: the broker cannot be read"]
    again = sweep.sweep(db, cfg=CFG, now=now + timedelta(seconds=5), pending=lambda _: None)
    assert job.id not in {s.job_id for s in again.sends}
    later = sweep.sweep(db, cfg=CFG, now=now + timedelta(seconds=61), pending=lambda _: None)
    assert job.id in {s.job_id for s in later.sends}


def test_an_analysis_whose_lease_ran_out_is_sent_again_whatever_unacked_holds(db: Session) -> None:
    now = utcnow()
    ran_out = now - timedelta(seconds=30)

    def analyzing(**fields: object) -> Job:
        return _job(db, f"tb-{uuid.uuid4().hex[:6]}", status="analyzing", attempts=1, **fields)

    killed = analyzing(lease_expires_at=ran_out)  # its worker died mid-analysis: the message is in "unacked"
    lost = analyzing(lease_expires_at=ran_out)  # its message is nowhere
    queued_behind = analyzing(lease_expires_at=ran_out)  # its message waits behind others
    working = analyzing(lease_expires_at=now + timedelta(seconds=40), updated_at=now - timedelta(days=1))

    def pending(name: str) -> queue.Pending:
        assert name == tasks.ANALYSIS_QUEUE
        return queue.Pending(
            waiting=frozenset({(tasks.ANALYSIS_TASK, (queued_behind.id,))}),
            unacked=frozenset({(tasks.ANALYSIS_TASK, (killed.id,)), (tasks.ANALYSIS_TASK, (working.id,))}),
        )

    report = sweep.sweep(db, cfg=CFG, now=now, pending=pending)
    sent = {s.job_id: s for s in report.sends if s.task == "analysis"}
    assert killed.id in sent and lost.id in sent
    assert queued_behind.id not in sent and working.id not in sent
    assert sent[killed.id].why == "analyzing, its lease ran out 30 s ago"
    # The resent message gets a lease of its own to start in: one resend per lease, not one per sweep.
    assert killed.lease_expires_at == now + timedelta(seconds=CFG.analyzing_stale_s)
    again = sweep.sweep(db, cfg=CFG, now=now + timedelta(seconds=5), pending=pending)
    assert killed.id not in {s.job_id for s in again.sends}


def test_final_jobs_are_never_touched(db: Session) -> None:
    now = utcnow()
    old = now - timedelta(days=1)
    tb = f"tb-{uuid.uuid4().hex[:6]}"
    rows = [
        _job(db, tb, status=s, updated_at=old, heartbeat_at=old, lease_expires_at=old)
        for s in ("done", "failed", "timed_out", "cancelled")
    ]
    report = sweep.sweep(db, cfg=CFG, now=now, pending=_nothing_pending)
    assert not {s.job_id for s in report.sends} & {r.id for r in rows}
    assert [r.status for r in rows] == ["done", "failed", "timed_out", "cancelled"]
