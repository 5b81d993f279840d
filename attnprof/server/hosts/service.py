"""Host health (docs/service.md, "Host health"): each profile worker's canary, judged against the band its testbed's
own history sets (``attnprof.server.hosts.band``); a host outside it is quarantined until a canary passes again.

A quarantine, in the transaction that records the failing canary:

- the host's state becomes ``quarantined``: its workers no longer count as live (the dispatcher offers its testbed
  nothing for them) and the service refuses its claims, putting the job back in the queue for another host;
- its runs since its last passing canary get a ``host_note`` saying why: the dashboard marks them and no baseline
  takes them (``attnprof.server.baselines.repository.Window``);
- each project with an alert webhook and a job on the testbed in the last ``notify_days`` is owed a notice
  (``attnprof.server.hosts.notices``); its release, when a canary passes again, is owed the same way.

A job waiting on a testbed whose live workers are all on quarantined hosts says so, naming them and why
(``waiting_reason``): a host never takes a testbed's only capacity away silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from attnprof.contract.worker_api import Canary as CanaryBody
from attnprof.contract.worker_api import host_of
from attnprof.server.config import Health
from attnprof.server.hosts import band, repository
from attnprof.server.testbeds.models import Canary, Host, HostNotice


def tolerances(cfg: Health, mode: str) -> band.Tolerances:
    return band.Tolerances(cfg.cpu_tolerance if mode == "cpu" else cfg.tolerance, cfg.launch_tolerance)


def _band(
    session: Session, *, testbed_id: int, mode: str, cfg: Health, now: datetime
) -> tuple[int, dict[str, band.Bound]]:
    """How many passing canaries of ``mode`` the testbed has in the window, and the band they set."""
    since = now - timedelta(days=cfg.window_days)
    history = repository.passing_history(session, testbed_id=testbed_id, since=since, mode=mode)
    return len(history), band.bands(((h, band.readings(f, c)) for h, f, c in history), tolerances(cfg, mode))


def current_band(session: Session, *, testbed_id: int, mode: str, cfg: Health, now: datetime) -> dict[str, band.Bound]:
    """The testbed's band now: from its passing canaries of ``mode`` in the window."""
    return _band(session, testbed_id=testbed_id, mode=mode, cfg=cfg, now=now)[1]


@dataclass(frozen=True)
class Judged:
    host: Host
    canary: Canary
    changed: bool  # quarantined or released by this canary
    notices: list[HostNotice]


def record(
    session: Session, *, testbed_id: int, body: CanaryBody, cfg: Health, now: datetime, audience: Sequence[int] = ()
) -> Judged:
    """Judge and store ``body``, a canary of a worker of the testbed; quarantine or release its host, owing a notice
    to each project of ``audience`` (those with an alert webhook that used the testbed lately). Not committed."""
    name = host_of(body.worker)
    host = repository.host_for_update(session, testbed_id=testbed_id, name=name, now=now)
    passed, bounds = _band(session, testbed_id=testbed_id, mode=body.mode, cfg=cfg, now=now)
    clocks = body.clocks.model_dump()
    found = band.readings(body.figures, clocks)
    learning = passed < cfg.min_canaries
    reasons = band.judge(found, body.clocks.throttle_reasons, {} if learning else bounds)
    state = "quarantined" if reasons else "learning" if learning else "healthy"
    canary = Canary(
        testbed_id=testbed_id,
        host=name,
        worker=body.worker,
        created_at=now,
        device=body.device,
        mode=body.mode,
        figures=dict(body.figures),
        clocks=clocks,
        method=dict(body.method),
        seconds=body.seconds,
        state=state,
        reasons=reasons,
        band={k: b.to_json() for k, b in bounds.items()} | ({"learning": True} if learning else {}),
    )
    session.add(canary)
    was = host.state
    notices: list[HostNotice] = []
    if state == "quarantined":
        host.reason = "; ".join(reasons)
        if was != "quarantined":
            host.quarantined_at = now
            notices = _quarantine(session, host, now=now, audience=audience)
    else:
        if was == "quarantined":
            again = f"passed its canary again at {now:%Y-%m-%d %H:%M} UTC"
            notices = _notices(session, host, "released", again, {}, now, audience)
        host.reason = None
        host.quarantined_at = None
        host.last_good_at = now
    host.state = state
    host.last_canary_at = now
    session.flush()
    return Judged(host, canary, (state == "quarantined") != (was == "quarantined"), notices)


def _quarantine(session: Session, host: Host, *, now: datetime, audience: Sequence[int]) -> list[HostNotice]:
    since = host.last_good_at
    note = (
        f"host {host.name} failed its canary at {now:%Y-%m-%d %H:%M} UTC"
        + (f" (last passed {since:%Y-%m-%d %H:%M} UTC)" if since else " (it never passed one)")
        + f": {host.reason}"
    )
    marked = repository.mark_runs(session, testbed_id=host.testbed_id, host=host.name, since=since, note=note)
    return _notices(session, host, "quarantined", host.reason or "", marked, now, audience)


def _notices(
    session: Session,
    host: Host,
    kind: str,
    reason: str,
    marked: dict[int, int],
    now: datetime,
    audience: Sequence[int],
) -> list[HostNotice]:
    notices = [
        HostNotice(
            project_id=p,
            testbed_id=host.testbed_id,
            host=host.name,
            kind=kind,
            reason=reason,
            runs_marked=marked.get(p, 0),
            created_at=now,
            notify_due_at=now,
        )
        for p in audience
    ]
    repository.add_notices(session, notices)
    return notices


def is_quarantined(session: Session, *, testbed_id: int, worker: str) -> Host | None:
    """The worker's host when it is quarantined, else None."""
    found = repository.host(session, testbed_id=testbed_id, name=host_of(worker))
    return found if found is not None and found.state == "quarantined" else None


def waiting_reason(session: Session, *, testbed_id: int, name: str, since: datetime) -> str | None:
    """Why a job queued for the testbed does not start when its live workers are all on quarantined hosts (naming
    them and why); None when a live worker is on a host that may take jobs, or none is live."""
    live = repository.live_hosts(session, testbed_id=testbed_id, since=since)
    if not live or any(state != "quarantined" for _, state in live):
        return None
    held = sorted({h for h, _ in live if h})
    rows = {h.name: h for h in repository.hosts(session, [testbed_id]) if h.name in held}
    why = "; ".join(f"{h}: {rows[h].reason or 'failed its canary'}" for h in held if h in rows)
    return (
        f"every live worker of testbed {name} is on a quarantined host ({why}): the job waits in the queue until a "
        "host passes its canary again"
    )
