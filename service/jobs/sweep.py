"""What ``jobs.sweep`` decides: the job row is the truth, the queue only delivers it (DESIGN 6).

Three ways a job gets stuck, and what the sweep does about each:

- ``running`` with no heartbeat for ``heartbeat_stale_s``: its worker died (or lost the network). The
  attempt is over: the job is queued again for the next attempt, or failed with the reason once
  ``max_attempts`` claims were made. A late result of the dead attempt is refused (409: stale attempt).
- ``queued`` for ``queued_stale_s`` with no message for its next attempt in the broker: the message was
  lost (a broker restart, a purge, a send that failed after the commit). It is sent again. A job whose
  message is still waiting is left alone: a testbed with no live worker keeps its jobs queued (DESIGN 3.5).
- ``analyzing`` for ``analyzing_stale_s`` with no ``analysis.run`` message: sent again (analysis is
  idempotent).

And GitHub feedback that is owed and due (a job that the sweep fails here, a delivery that failed before and
waited out its backoff) is listed in ``SweepReport.feedback``, to be delivered after the commit.

Where the broker cannot be read (``pending`` answers ``None``) a job is resent once per stale period: a
duplicate message is harmless, its claim answers 409 and the worker drops it.

Plain code: nothing here commits or sends. The task commits, then sends what ``sweep`` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy.orm import Session

from service import queue
from service.config import Sweep
from service.github import repository as github_rows
from service.github import service as github
from service.jobs import repository
from service.jobs.models import Job
from service.testbeds import repository as testbeds

PendingLookup = Callable[[str], queue.Pending | None]


@dataclass(frozen=True)
class Send:
    """A message to send once the sweep is committed."""

    task: Literal["profile", "analysis"]
    job_id: str
    attempt: int
    testbed: str
    why: str


@dataclass
class SweepReport:
    sends: list[Send] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    """Jobs whose owed GitHub feedback is due: deliver each (``github.send_owed``) once this is committed."""


def _testbed(session: Session, job: Job) -> str:
    tb = testbeds.get(session, job.testbed_id)
    return tb.name if tb else ""


def sweep(session: Session, *, cfg: Sweep, now: datetime, pending: PendingLookup) -> SweepReport:
    """Find the stuck jobs, change their rows (not committed) and say which messages to send."""
    report = SweepReport()
    seen: dict[str, queue.Pending | None] = {}

    def waiting(queue_name: str, task: str, args: tuple[object, ...]) -> bool | None:
        if queue_name not in seen:
            seen[queue_name] = pending(queue_name)
        found = seen[queue_name]
        return None if found is None else (task, args) in found

    stale_heartbeat = now - timedelta(seconds=cfg.heartbeat_stale_s)
    for job in repository.running_without_heartbeat(session, before=stale_heartbeat, limit=cfg.batch):
        _worker_lost(job, now, report, _testbed(session, job))

    stale_queued = now - timedelta(seconds=cfg.queued_stale_s)
    for job in repository.unchanged_since(session, status="queued", before=stale_queued, limit=cfg.batch):
        name = _testbed(session, job)
        there = waiting(queue.profile_queue(name), queue.PROFILE_TASK, (job.id, job.attempts + 1))
        if there:
            continue
        job.updated_at = now  # with an unreadable broker, resend once per stale period, not on every sweep
        why = "no message in the broker" if there is False else "the broker cannot be read"
        report.sends.append(Send("profile", job.id, job.attempts + 1, name, f"queued since {_ago(job, now)}: {why}"))

    stale_analyzing = now - timedelta(seconds=cfg.analyzing_stale_s)
    for job in repository.unchanged_since(session, status="analyzing", before=stale_analyzing, limit=cfg.batch):
        if waiting(queue.ANALYSIS_QUEUE, queue.ANALYSIS_TASK, (job.id,)):
            continue
        job.updated_at = now
        report.sends.append(Send("analysis", job.id, job.attempts, "", f"analyzing since {_ago(job, now)}"))

    session.flush()
    report.feedback = github_rows.feedback_due(session, now=now, limit=cfg.batch)
    return report


def _ago(job: Job, now: datetime) -> str:
    return f"{(now - job.updated_at).total_seconds():.0f} s"


def _worker_lost(job: Job, now: datetime, report: SweepReport, testbed: str) -> None:
    last = job.heartbeat_at or job.started_at or job.updated_at
    silent_s = (now - last).total_seconds()
    who = f" ({job.claimed_by})" if job.claimed_by else ""
    lost = f"attempt {job.attempts} lost its worker{who}: no heartbeat for {silent_s:.0f} s"
    job.claimed_by = None
    if job.attempts < job.max_attempts:
        job.status = "queued"
        job.reason = f"{lost}; queued again for attempt {job.attempts + 1} of {job.max_attempts}"
        job.updated_at = now
        report.sends.append(Send("profile", job.id, job.attempts + 1, testbed, lost))
        return
    job.status = "failed"
    job.reason = f"{lost}, and it was the last of {job.max_attempts} attempts"
    job.finished_at = now
    github.owe(job, now)
    report.failed.append(job.id)
