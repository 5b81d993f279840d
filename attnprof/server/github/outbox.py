"""Delivering the GitHub feedback that jobs and uploaded runs owe (docs/architecture.md, "Outbound calls after the
commit"): after the commit that made it owed, from the stored rows, never inside a transaction or under a row lock. An
uploaded run that names its repository owes its feedback from its own ``feedback_due_at`` (``deliver_run``: the same
three steps, recorded on the run).

A job owes feedback while its ``feedback_due_at`` is set (``attnprof.server.jobs.service.owe_feedback`` sets it, in the
transaction that changes the job's state). One delivery of it (``deliver``) is three steps:

1. claim it in a short transaction of its own, committed before anything is sent: one conditional statement moves
   ``feedback_due_at`` ``CLAIM_S`` ahead, so a second sender (the sweep, another request's send) finds it due
   later and skips it. What to send is read from the stored rows in the same transaction;
2. send it to GitHub, with no transaction open and no lock held;
3. record what happened in another short transaction: a conditional update of the row as the sender read it
   under its claim (``attnprof.server.github.service.settled`` says what: delivered, refused and owed again after a
   backoff, or, for a job that ended while an older state was being sent, that end owed at once, and sent next).

A sender that dies between 1 and 3 leaves the feedback claimed: the sweep delivers it once the claim runs out.

Who sends: the analysis task right after its commit; a request that made feedback owed, once it has answered
(``Sender``, a background task after the response: no caller waits on GitHub); the sweep, every few seconds, what
is still owed; and an admin's resend, whose answer says how it went.

This module is a task boundary: each of its transactions is committed here, and nothing else in it commits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from attnprof.server.config import Settings, Sweep
from attnprof.server.db import utcnow
from attnprof.server.github import service as github
from attnprof.server.github.client import GitHubClient, GitHubError
from attnprof.server.jobs import repository as jobs
from attnprof.server.projects.service import RepoNotAllowed
from attnprof.server.runs import repository as runs

log = logging.getLogger(__name__)

Sessions = Callable[[], AbstractContextManager[Session]]
"""Where a delivery gets the session of each of its short transactions: a sessionmaker, or the request's."""

CLAIM_S = 600.0
"""How long a claimed delivery is left to its sender: longer than the slowest delivery (two tries of 30 s and a
wait of 10 s for the status, as many again for each page of comments and for the comment). Past it, a sender that
died is taken over by the sweep."""

# A delivery that finds the job ended while it sent an older state sends again at once, this many times at most
# (once is the most a job needs: its pending status, then its end).
_ROUNDS = 3
# The row changed between a sender's read and its record (a state change committed in between): read it again.
_RECORD_TRIES = 3
# Deliveries one server process makes at once after its requests: a slow GitHub holds these threads of the
# server's pool and no others; past them the sweep delivers.
MAX_SENDING = 4


def deliver(
    sessions: Sessions, settings: Settings, job_id: str, *, client: GitHubClient | None, now: datetime | None = None
) -> bool | None:
    """Deliver the feedback job ``job_id`` owes, if it is due at ``now`` and no other delivery holds it. True when
    it was delivered, False when GitHub refused (recorded on the job, owed again after the backoff), None when
    nothing was due (nothing owed, another sender's claim, a backoff not over). With no ``client`` (a service
    without a GitHub token) nothing is sent and what the job owed is cleared."""
    now = now or utcnow()
    outcome: bool | None = None
    for _ in range(_ROUNDS):
        outcome, again = _deliver_once(sessions, settings, job_id, client=client, now=now)
        if not again:
            break
    return outcome


def _deliver_once(
    sessions: Sessions, settings: Settings, job_id: str, *, client: GitHubClient | None, now: datetime
) -> tuple[bool | None, bool]:
    """One claim, send and record: (the outcome, whether the job now owes its end at once)."""
    claim = now + timedelta(seconds=CLAIM_S)
    feedback: github.Feedback | None = None
    error: Exception | None = None
    with sessions() as session:
        if not jobs.claim_feedback(session, job_id=job_id, now=now, until=claim):
            session.commit()
            return None, False
        job = jobs.get_fresh(session, job_id)
        if job is not None and job.repo and client is not None:
            try:
                feedback = github.feedback_of(session, settings, job)
            except ValueError as exc:  # a stored document that does not load: a failed delivery, retried later
                error = exc
            except RepoNotAllowed as exc:  # nothing is sent where the project may not report
                error = exc
        session.commit()
    if feedback is not None and client is not None:
        try:
            github.post(client, feedback)
        except (GitHubError, ValueError) as exc:
            error = exc
    return _record(sessions, settings.sweep, job_id, claim=claim, feedback=feedback, error=error, now=now)


def _record(
    sessions: Sessions,
    cfg: Sweep,
    job_id: str,
    *,
    claim: datetime,
    feedback: github.Feedback | None,
    error: Exception | None,
    now: datetime,
) -> tuple[bool | None, bool]:
    sent = feedback.job_status if feedback is not None else None
    for _ in range(_RECORD_TRIES):
        with sessions() as session:
            job = jobs.get_fresh(session, job_id)
            if job is None or job.feedback_due_at != claim:
                # No longer this sender's: the claim ran out and another sender took the job, or an admin resent.
                session.commit()
                return error is None, False
            after = github.settled(job, sent_status=sent, error=error, cfg=cfg, now=now)
            recorded = jobs.settle_feedback(
                session, seen=job, claim=claim, due_at=after.due_at, attempts=after.attempts, reason=after.reason
            )
            session.expire(job)
            session.commit()
        if recorded:
            return error is None, error is None and after.due_at is not None
    log.warning("job %s: its GitHub feedback was sent but not recorded: the sweep sends it again", job_id)
    return error is None, False


def deliver_run(
    sessions: Sessions, settings: Settings, run_id: str, *, client: GitHubClient | None, now: datetime | None = None
) -> bool | None:
    """Deliver the feedback the uploaded run ``run_id`` owes, as ``deliver`` does a job's: claimed in a short
    transaction, read from the stored rows, sent with no transaction open, recorded in another. True when delivered,
    False when GitHub refused (noted on the run, owed again after the backoff, or never again for a final 4xx), None
    when nothing was due. With no ``client`` nothing is sent and what the run owed is cleared."""
    now = now or utcnow()
    claim = now + timedelta(seconds=CLAIM_S)
    feedback: github.Feedback | None = None
    error: Exception | None = None
    with sessions() as session:
        if not runs.claim_feedback(session, run_id=run_id, now=now, until=claim):
            session.commit()
            return None
        run = runs.get_fresh(session, run_id)
        if run is not None and run.repo and client is not None:
            try:
                feedback = github.run_feedback_of(session, settings, run)
            except (ValueError, RepoNotAllowed) as exc:
                error = exc
        session.commit()
    if feedback is not None and client is not None:
        try:
            github.post(client, feedback)
        except (GitHubError, ValueError) as exc:
            error = exc
    for _ in range(_RECORD_TRIES):
        with sessions() as session:
            run = runs.get_fresh(session, run_id)
            if run is None or run.feedback_due_at != claim:
                session.commit()  # no longer this sender's: its claim ran out and another sender took it
                return error is None
            after = github.run_settled(run, error=error, cfg=settings.sweep, now=now)
            recorded = runs.settle_feedback(
                session, seen=run, claim=claim, due_at=after.due_at, attempts=after.attempts, note=after.note
            )
            session.commit()
        if recorded:
            return error is None
    log.warning("run %s: its GitHub feedback was sent but not recorded: the sweep sends it again", run_id)
    return error is None


def deliver_owed(
    sessions: Sessions,
    settings: Settings,
    job_ids: Sequence[str],
    *,
    run_ids: Sequence[str] = (),
    client: GitHubClient | None = None,
    budget_s: float | None = None,
) -> dict[str, int]:
    """Deliver what each of ``job_ids`` owes (``deliver``), then what each uploaded run of ``run_ids`` owes
    (``deliver_run``), one after the other, with one client (``client``, else a delivery client of ``settings``'s
    token, or none without one). Never raises: what it could not deliver stays owed for the sweep. Past ``budget_s``
    seconds the rest waits for the next sweep. Returns how many were delivered, and how many GitHub refused (owed
    again)."""
    counts = {"delivered": 0, "undelivered": 0}
    if not job_ids and not run_ids:
        return counts
    own = client is None and settings.github_token is not None
    gh = github.delivery_client(settings) if own else client
    started = time.monotonic()
    owed = [("job", job_id) for job_id in job_ids] + [("run", run_id) for run_id in run_ids]
    try:
        for kind, owed_id in owed:
            if budget_s is not None and time.monotonic() - started > budget_s:
                break
            try:
                if kind == "job":
                    done = deliver(sessions, settings, owed_id, client=gh)
                else:
                    done = deliver_run(sessions, settings, owed_id, client=gh)
            except Exception:
                log.exception("%s %s: delivering its GitHub feedback raised; it stays owed", kind, owed_id)
                continue
            if done is True:
                counts["delivered"] += 1
            elif done is False:
                counts["undelivered"] += 1
    finally:
        if own and gh is not None:
            gh.close()
    return counts


def resend(sessions: Sessions, settings: Settings, job_id: str) -> bool | None:
    """An admin's resend, once its request has committed the debt again: delivered now, while the request waits
    (three tries, waits of up to 10 s). ``deliver`` says what comes back."""
    client = github.make_client(settings, attempts=3, max_wait_s=10.0)
    try:
        return deliver(sessions, settings, job_id, client=client)
    finally:
        client.close()


class Sender:
    """The server's sender: called with the jobs a request made owe feedback, once that request has committed and
    answered (a background task, on a thread of the server's pool). At most ``at_once`` deliveries at once per
    process; past that, the sweep delivers the rest."""

    def __init__(self, sessions: Sessions, settings: Settings, *, at_once: int = MAX_SENDING) -> None:
        self._sessions = sessions
        self._settings = settings
        self._slots = threading.BoundedSemaphore(at_once)

    def __call__(self, job_ids: Sequence[str]) -> None:
        self._send(job_ids, ())

    def runs(self, run_ids: Sequence[str]) -> None:
        """The same for uploaded runs that owe feedback (a result upload's, once it has answered)."""
        self._send((), run_ids)

    def _send(self, job_ids: Sequence[str], run_ids: Sequence[str]) -> None:
        if not self._slots.acquire(blocking=False):
            log.info(
                "GitHub feedback of %d job(s) and %d run(s) left to the sweep: deliveries under way already",
                len(job_ids),
                len(run_ids),
            )
            return
        try:
            deliver_owed(self._sessions, self._settings, job_ids, run_ids=run_ids)
        finally:
            self._slots.release()
