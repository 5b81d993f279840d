"""What the fleet page reads: each testbed's hosts (the profile workers that said they are alive), its queue, how long
jobs waited, how much of its hosts' time jobs held, and the GPU time of the viewer's project beside every other
project's together (other projects are never named)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from attnprof.server.config import Health
from attnprof.server.hosts import repository as host_rows
from attnprof.server.hosts import service as host_service
from attnprof.server.jobs.models import Job
from attnprof.server.testbeds.models import Testbed, Worker


@dataclass
class Host:
    name: str
    first_seen_at: datetime
    last_seen_at: datetime
    live: bool
    job_id: str | None = None  # the viewer's project's job it runs
    busy_elsewhere: bool = False  # it runs another project's job
    gpu_s: float = 0.0  # what the jobs it ran last held, over the window (every project's)


@dataclass
class HostHealth:
    """A host's standing with the service (docs/service.md, "Host health") and its latest canary."""

    name: str
    state: str
    reason: str | None
    last_canary_at: datetime | None
    last_good_at: datetime | None
    figures: dict[str, float] = field(default_factory=dict)
    canary_s: float | None = None


@dataclass
class TestbedRow:
    name: str
    hosts: list[Host] = field(default_factory=list)
    queued: int = 0
    queued_own: int = 0
    running: int = 0
    wait_median_s: float | None = None
    wait_p90_s: float | None = None
    started: int = 0
    utilisation: float | None = None
    own_gpu_s: float = 0.0
    others_gpu_s: float = 0.0
    health: list[HostHealth] = field(default_factory=list)
    band: list[str] = field(default_factory=list)  # each figure's rule, in words
    canary_s: float = 0.0  # what its canaries took of its devices over the window

    @property
    def quarantined(self) -> list[HostHealth]:
        return [h for h in self.health if h.state == "quarantined"]

    @property
    def live_hosts(self) -> int:
        return sum(1 for h in self.hosts if h.live)


def fleet(
    session: Session, *, project_id: int, now: datetime, live_s: float, window: timedelta, cfg: Health
) -> list[TestbedRow]:
    """Every testbed with a host seen or a job started within ``window`` before ``now``, by name."""
    since = now - window
    rows: dict[int, TestbedRow] = {}
    names = dict(session.execute(select(Testbed.id, Testbed.name)).all())

    def row(testbed_id: int) -> TestbedRow:
        return rows.setdefault(testbed_id, TestbedRow(names.get(testbed_id, str(testbed_id))))

    for w in session.scalars(select(Worker).where(Worker.last_seen_at >= since).order_by(Worker.name)):
        row(w.testbed_id).hosts.append(
            Host(w.name, w.first_seen_at, w.last_seen_at, live=(now - w.last_seen_at).total_seconds() <= live_s)
        )
    running = session.execute(
        select(Job.testbed_id, Job.claimed_by, Job.project_id, Job.id).where(Job.status == "running")
    ).all()
    for testbed_id, claimed_by, owner, job_id in running:
        r = row(testbed_id)
        r.running += 1
        for h in r.hosts:
            if h.name == claimed_by:
                if owner == project_id:
                    h.job_id = job_id
                else:
                    h.busy_elsewhere = True
    queued = session.execute(
        select(Job.testbed_id, Job.project_id, func.count())
        .where(Job.status == "queued")
        .group_by(Job.testbed_id, Job.project_id)
    ).all()
    for testbed_id, owner, n in queued:
        r = row(testbed_id)
        r.queued += int(n)
        if owner == project_id:
            r.queued_own += int(n)
    started = session.execute(
        select(Job.testbed_id, Job.project_id, Job.created_at, Job.started_at, Job.gpu_seconds, Job.claimed_by).where(
            Job.started_at >= since
        )
    ).all()
    waits: dict[int, list[float]] = {}
    for testbed_id, owner, created, begun, gpu, host in started:
        r = row(testbed_id)
        for h in r.hosts:
            if h.name == host:
                h.gpu_s += gpu or 0.0
        r.started += 1
        if begun is not None:
            waits.setdefault(testbed_id, []).append(max(0.0, (begun - created).total_seconds()))
        if owner == project_id:
            r.own_gpu_s += gpu or 0.0
        else:
            r.others_gpu_s += gpu or 0.0
    for testbed_id, r in rows.items():
        found = sorted(waits.get(testbed_id, []))
        if found:
            r.wait_median_s = statistics.median(found)
            r.wait_p90_s = found[min(len(found) - 1, int(0.9 * len(found)))]
        if r.hosts:
            r.utilisation = min(1.0, (r.own_gpu_s + r.others_gpu_s) / (len(r.hosts) * window.total_seconds()))
    _health(session, rows, row, cfg=cfg, now=now, since=since)
    return sorted(rows.values(), key=lambda r: r.name)


def _health(
    session: Session,
    rows: dict[int, TestbedRow],
    row: Callable[[int], TestbedRow],
    *,
    cfg: Health,
    now: datetime,
    since: datetime,
) -> None:
    """Each testbed's hosts' health, its band's rules and its canaries' device time over the window."""
    found = host_rows.hosts(session)
    latest = host_rows.latest_canaries(session, [(h.testbed_id, h.name) for h in found])
    modes: dict[int, set[str]] = {}
    for h in found:
        last = latest.get((h.testbed_id, h.name))
        if last is None and h.testbed_id not in rows:
            continue
        row(h.testbed_id).health.append(
            HostHealth(
                h.name,
                h.state,
                h.reason,
                h.last_canary_at,
                h.last_good_at,
                dict(last.figures) if last else {},
                last.seconds if last else None,
            )
        )
        if last is not None:
            modes.setdefault(h.testbed_id, set()).add(last.mode)
    for testbed_id, seconds in host_rows.canary_seconds(session, since=since).items():
        if testbed_id in rows:
            rows[testbed_id].canary_s = seconds
    for testbed_id, found_modes in modes.items():
        for mode in sorted(found_modes):
            bounds = host_service.current_band(session, testbed_id=testbed_id, mode=mode, cfg=cfg, now=now)
            rows[testbed_id].band += [b.rule() for _, b in sorted(bounds.items())]
