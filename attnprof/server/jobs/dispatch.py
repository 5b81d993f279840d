"""The dispatcher: the database is the queue, and the broker delivers only what is offered here
(docs/architecture.md, "Testbeds and fair dispatch" and "The row is the truth").

A queued job waits in the database (``offered_at`` null) until the dispatcher offers it: makes its ``profile.run``
message (``attempts.offer_next_attempt``) and, once that is committed, sends it to ``profile.<testbed>``. A testbed
is offered at most as many jobs as it has live workers free (live: said so in the last
``ATTNPROF_FAIRNESS__WORKER_LIVE_S``; free: not running a job), and always one, so that a worker that starts, or
one that does not say it is alive, finds a message waiting: ``max(1, live - running) - offered`` more.

Each offer takes the job of the project with the fewest jobs running or offered on the testbed (a project whose
waiting jobs are all background ones, a bisection's probes, only after every other), the project whose
latest offer there is the oldest among equals (round-robin across projects), the oldest job within a project; a
project with ``ATTNPROF_FAIRNESS__MAX_RUNNING`` jobs running or offered there is skipped, and so is one that used its
daily GPU quota (``attnprof.server.jobs.gpu_time``) until the next UTC day. A flood of one project's
jobs then holds another project's job back by at most one job per worker.

It runs after the commit of whatever frees or fills a slot (a job claimed or ended, a worker appearing; the sweep
runs it for every testbed with jobs waiting), each time in a transaction of its own that takes the testbed's lock
first (``FOR UPDATE`` on its row; SQLite serialises writers), so two server processes never offer more than the
window. A submission reads, before its commit and without the lock, whether its testbed has room, and dispatches
after its commit only if so: the common case, a flood on a busy testbed, costs one statement. Skipping is safe:
until it commits, the submission's job insert holds its testbed's row ``FOR KEY SHARE`` (the foreign key), which
the dispatch's lock waits for; so the dispatch that follows a slot freed after that read sees the job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from attnprof.contract import tasks
from attnprof.server import queue
from attnprof.server.config import Fairness, Settings
from attnprof.server.db import utcnow
from attnprof.server.jobs import attempts, gpu_time, repository
from attnprof.server.jobs.models import Job
from attnprof.server.testbeds import repository as testbed_rows

log = logging.getLogger(__name__)

_NEVER = datetime.min.replace(tzinfo=UTC)


def window(*, live: int, running: int, offered: int) -> int:
    """How many more jobs a testbed may be offered: as many as it has live workers free, at least one, less the
    jobs already offered."""
    return max(1, live - running) - offered


def offer(session: Session, *, testbed_id: int, cfg: Fairness, now: datetime) -> list[tasks.ProfileMessage]:
    """Lock the testbed's dispatch, choose the jobs to offer and make their messages (not committed, not sent:
    the caller commits, then sends them)."""
    name = testbed_rows.lock_for_dispatch(session, testbed_id, now)
    if name is None:
        return []
    live, running, offered, waiting = repository.occupancy(
        session, testbed_id=testbed_id, live_since=now - timedelta(seconds=cfg.worker_live_s)
    )
    slots = window(live=live, running=running, offered=offered)
    if slots <= 0 or not waiting:
        return []
    oldest = repository.waiting_projects(session, testbed_id=testbed_id)
    for project in gpu_time.over_quota(session, oldest, now=now):  # they wait for the next day: nothing is dropped
        del oldest[project]
    flying = repository.in_flight_by_project(session, testbed_id=testbed_id)
    last = {p: repository.last_offer(session, testbed_id=testbed_id, project_id=p) or _NEVER for p in oldest}
    fetched: dict[int, list[Job]] = {}
    messages: list[tasks.ProfileMessage] = []
    while slots > 0:
        eligible = [p for p in oldest if flying.get(p, 0) < cfg.max_running]
        if not eligible:
            break
        project = min(eligible, key=lambda p: (oldest[p][0], flying.get(p, 0), last[p], oldest[p][1], p))
        if not fetched.get(project):
            fetched[project] = repository.next_waiting(session, testbed_id=testbed_id, project_id=project, limit=slots)
        if not fetched[project]:  # taken meanwhile (a cancel holds it): not this round's
            del oldest[project]
            continue
        job = fetched[project][0]
        if job.background and not oldest[project][0]:  # its other waiting jobs are offered: background from now
            oldest[project] = (True, oldest[project][1])
            continue
        fetched[project].pop(0)
        messages.append(attempts.offer_next_attempt(job, name, now=now))
        flying[project] = flying.get(project, 0) + 1
        last[project] = now
        slots -= 1
    session.flush()
    return messages


def after_commit(session: Session, settings: Settings, testbed_ids: Iterable[int]) -> int:
    """Dispatch each of ``testbed_ids``, from a request or task whose transaction is committed: each dispatch is a
    transaction of its own, committed here, its messages sent after its commit. Never raises (the sweep dispatches
    every testbed again); returns how many messages were sent."""
    sent = 0
    for testbed_id in sorted(set(testbed_ids)):
        try:
            messages = offer(session, testbed_id=testbed_id, cfg=settings.fairness, now=utcnow())
            session.commit()
        except Exception:
            session.rollback()
            log.exception("dispatching testbed %s failed; the sweep dispatches it again", testbed_id)
            continue
        for message in messages:
            queue.enqueue_profile(settings, message)
            sent += 1
    return sent
