"""What ``jobs.sweep`` decides: the job row is the truth, the queue only delivers it (docs/architecture.md, "The row
is the truth").

Three ways a job gets stuck, and what the sweep does about each:

- ``running`` with its lease run out (``lease_expires_at``: the claim took it for ``heartbeat_stale_s`` and every
  heartbeat renews it): its worker died (or lost the network). The attempt is over, its job token revoked: the
  job is queued again for the next attempt, waiting for the dispatcher (``SweepReport.dispatch``), or failed with
  the reason once ``max_attempts`` claims were made. A late result of the dead attempt is refused (its token opens
  nothing).
- ``queued`` and offered (``offered_at``: the dispatcher made a message for it) ``queued_stale_s`` ago, with no
  message for its next attempt in the broker that carries the claim secret the row expects: the message was lost
  (a broker restart, a purge, a send that failed after the commit). A new message is sent, with a new secret (the
  row keeps only the sha256 of the secret of its latest message, so an old message that still turns up claims
  nothing: 404, and its worker drops it). A job whose message is still waiting, or delivered to a worker that has
  not acknowledged it yet, is left alone: a testbed with no live worker keeps its jobs queued (docs/architecture.md,
  "Testbeds and fair dispatch"). A job waiting for the dispatcher has no message to lose: the sweeper dispatches every
  testbed after the sweep.
- ``analyzing`` with its lease run out: the result upload gave the analysis ``analyzing_stale_s`` to start, and
  the analysis task, once started, renews its own lease while it works. ``analysis.run`` is sent again (analysis is
  idempotent and stores one comparison), whatever the broker's ``unacked`` hash holds: a worker killed mid-task
  leaves its message there until ``visibility_timeout`` (hours). Only a message still waiting in the queue (a
  backlog) holds the resend back.

And GitHub feedback that is owed and due (a job that the sweep fails here, a delivery that failed before and
waited out its backoff, one whose sender died) is listed in ``SweepReport.feedback`` (an uploaded run's in
``SweepReport.run_feedback``), to be delivered after the
commit (``attnprof.server.github.outbox``); the sweep itself only marks what it fails as owed.

Where the broker cannot be read (``pending`` answers ``None``) a queued job is resent once per stale period: a
duplicate message is harmless, its claim answers 404 or 409 and the worker drops it.

Plain code: nothing here commits or sends. The task commits, then sends what ``sweep`` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy.orm import Session

from attnprof.contract import tasks
from attnprof.server import queue
from attnprof.server.auth.service import hash_secret
from attnprof.server.config import Sweep
from attnprof.server.jobs import attempts, repository
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import Job
from attnprof.server.runs import repository as run_rows
from attnprof.server.testbeds import repository as testbed_rows
from attnprof.server.testbeds import service as testbeds

PendingLookup = Callable[[str], queue.Pending | None]


@dataclass(frozen=True)
class Send:
    """A message to send once the sweep is committed: ``profile`` (then ``message`` is the one to send, made by
    ``attempts.offer_next_attempt``) or ``analysis``."""

    task: Literal["profile", "analysis"]
    job_id: str
    attempt: int
    testbed: str
    why: str
    message: tasks.ProfileMessage | None = None


@dataclass
class SweepReport:
    sends: list[Send] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    """Jobs whose owed GitHub feedback is due: deliver each (``attnprof.server.github.outbox``) once this is
    committed."""
    run_feedback: list[str] = field(default_factory=list)
    """Uploaded runs whose owed GitHub feedback is due (``outbox.deliver_run``), likewise."""
    dispatch: list[int] = field(default_factory=list)
    """Testbeds with jobs waiting for the dispatcher: dispatch each (``dispatch.after_commit``) once committed."""
    forgotten_workers: int = 0


def _testbed(session: Session, job: Job) -> str:
    tb = testbed_rows.get(session, job.testbed_id)
    return tb.name if tb else ""


class _Broker:
    """What the broker holds, read once per queue and sweep."""

    def __init__(self, pending: PendingLookup) -> None:
        self._pending = pending
        self._seen: dict[str, queue.Pending | None] = {}
        self._offers: dict[str, dict[tuple[str, int], set[str]]] = {}

    def read(self, queue_name: str) -> queue.Pending | None:
        if queue_name not in self._seen:
            self._seen[queue_name] = self._pending(queue_name)
        return self._seen[queue_name]

    def offered(self, queue_name: str, job: Job) -> bool | None:
        """Whether a profile message for ``job``'s next attempt, with the claim secret its row expects, is waiting
        or unacknowledged on ``queue_name``; None when the broker cannot be read."""
        found = self.read(queue_name)
        if found is None:
            return None
        if queue_name not in self._offers:
            offers: dict[tuple[str, int], set[str]] = {}
            for task, args in found.all:
                if task == tasks.PROFILE_TASK and len(args) == 3 and all(isinstance(a, str | int) for a in args):
                    offers.setdefault((str(args[0]), int(args[1])), set()).add(hash_secret(str(args[2])))
            self._offers[queue_name] = offers
        hashes = self._offers[queue_name].get((job.id, job.attempts + 1), set())
        return job.claim_secret_sha256 is not None and job.claim_secret_sha256 in hashes


def sweep(session: Session, *, cfg: Sweep, now: datetime, pending: PendingLookup) -> SweepReport:
    """Find the stuck jobs, change their rows (not committed) and say which messages to send."""
    report = SweepReport()
    broker = _Broker(pending)

    for job in repository.lease_expired(session, status="running", now=now, limit=cfg.batch):
        _worker_lost(job, now, report)

    stale_offer = now - timedelta(seconds=cfg.queued_stale_s)
    for job in repository.offered_unchanged_since(session, before=stale_offer, limit=cfg.batch):
        name = _testbed(session, job)
        there = broker.offered(tasks.profile_queue(name), job)
        if there:
            continue
        why = "no message in the broker" if there is False else "the broker cannot be read"
        since = _ago(job.offered_at or job.updated_at, now)
        # The offer is renewed: with an unreadable broker, one resend per stale period, not one per sweep.
        message = attempts.offer_next_attempt(job, name, now=now)
        report.sends.append(Send("profile", job.id, message.attempt, name, f"offered {since} ago: {why}", message))

    for job in repository.lease_expired(session, status="analyzing", now=now, limit=cfg.batch):
        found = broker.read(tasks.ANALYSIS_QUEUE)
        if found is not None and (tasks.ANALYSIS_TASK, (job.id,)) in found.waiting:
            continue  # behind others in the queue: it is not lost
        ran_out = _ago(job.lease_expires_at or job.updated_at, now)
        job.lease_expires_at = now + timedelta(seconds=cfg.analyzing_stale_s)  # the resent message's turn to start
        report.sends.append(Send("analysis", job.id, job.attempts, "", f"analyzing, its lease ran out {ran_out} ago"))

    report.forgotten_workers = testbeds.forget_workers(session, now=now)
    session.flush()
    report.feedback = repository.feedback_due(session, now=now, limit=cfg.batch)
    report.run_feedback = run_rows.feedback_due(session, now=now, limit=cfg.batch)
    report.dispatch = repository.testbeds_waiting(session)
    return report


def _ago(since: datetime, now: datetime) -> str:
    """How long ago ``since`` was, for the log (taken before the row's timestamps are moved to ``now``)."""
    return f"{max(0.0, (now - since).total_seconds()):.0f} s"


def _worker_lost(job: Job, now: datetime, report: SweepReport) -> None:
    last = job.heartbeat_at or job.started_at or job.updated_at
    silent_s = (now - last).total_seconds()
    who = f" ({job.claimed_by})" if job.claimed_by else ""
    lost = f"attempt {job.attempts} lost its worker{who}: no heartbeat for {silent_s:.0f} s"
    attempts.charge(job, last)  # held until its last sign of life
    attempts.end_attempt(job)
    if job.attempts < job.max_attempts:
        attempts.wait_again(job)
        job.reason = f"{lost}; queued again for attempt {job.attempts + 1} of {job.max_attempts}"
        job.updated_at = now
        return
    job.status = "failed"
    job.reason = f"{lost}, and it was the last of {job.max_attempts} attempts"
    job.finished_at = now
    jobs.owe_feedback(job, now)
    report.failed.append(job.id)
