"""A host's quarantine and release, sent to the alert webhook of each project that uses its testbed (docs/alerts.md,
"Host notices"): signed and delivered as alerts are (``attnprof.server.comparisons.alert_outbox``), after the commit
that owed them and again by the sweep, with the same backoff and checks on the address.

The body is Slack-compatible (``text``, ``blocks``) with the notice as data beside them (``host``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

from attnprof.contract.links import Links
from attnprof.server import outbound
from attnprof.server.comparisons import alert_outbox, alert_webhook
from attnprof.server.comparisons import repository as alert_rows
from attnprof.server.config import AlertWebhooks, get_settings
from attnprof.server.db import make_sessionmaker, utcnow
from attnprof.server.hosts import repository
from attnprof.server.projects import repository as projects
from attnprof.server.testbeds import repository as testbeds
from attnprof.server.testbeds.models import HostNotice

log = logging.getLogger(__name__)


def body(notice: HostNotice, *, project: str, testbed: str, url: str) -> dict[str, Any]:
    """The JSON body of ``notice``, for ``project``'s webhook."""
    held = notice.kind == "quarantined"
    headline = (
        f"Host {notice.host} of testbed {testbed} is quarantined: {notice.reason}"
        if held
        else f"Host {notice.host} of testbed {testbed} is back: it {notice.reason}"
    )
    detail = (
        f"It claims no jobs until it passes its canary again. {notice.runs_marked} run(s) of {project} measured on it "
        "since its last passing canary are marked and left out of baselines."
        if held
        else "It takes jobs again."
    )
    return {
        "text": headline,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline}*\n{detail}\n<{url}|Open the fleet>"}}
        ],
        "host": {
            "id": notice.id,
            "project": project,
            "testbed": testbed,
            "host": notice.host,
            "state": notice.kind,
            "reason": notice.reason,
            "runs_marked": notice.runs_marked,
            "at": notice.created_at.isoformat(),
            "url": url,
        },
    }


def deliver(
    engine_sessions: Any, cfg: AlertWebhooks, public_url: str, notice_id: int, *, client: httpx.Client
) -> bool | None:
    """Send one owed notice (claimed first, so two senders never both send it); True: taken, False: refused (owed
    again after the backoff, or given up), None: nothing due."""
    now = utcnow()
    claim = now + timedelta(seconds=alert_outbox.CLAIM_S)
    with engine_sessions() as session:
        if not repository.claim_notice(session, notice_id=notice_id, now=now, until=claim):
            session.commit()
            return None
        notice = session.get(HostNotice, notice_id)
        assert notice is not None
        hook = alert_rows.webhook_of(session, notice.project_id)
        attempts = notice.notify_attempts
        request = None
        if hook is not None:
            project = projects.get(session, notice.project_id)
            testbed = testbeds.get(session, notice.testbed_id)
            name = project.name if project else str(notice.project_id)
            payload = body(
                notice,
                project=name,
                testbed=testbed.name if testbed else str(notice.testbed_id),
                url=Links(public_url).ui_fleet(name),
            )
            request = (hook.url, hook.secret, alert_webhook.encode(payload))
        session.commit()
    error = "no webhook" if request is None else alert_outbox.post_signed(client, *request)
    attempts += request is not None
    again: datetime | None = None
    if error is not None and request is not None and attempts < cfg.attempts:
        again = now + timedelta(seconds=min(cfg.retry_s * 2 ** (attempts - 1), alert_outbox.MAX_BACKOFF_S))
    with engine_sessions() as session:
        repository.settle_notice(
            session,
            notice_id=notice_id,
            claim=claim,
            due_at=again,
            attempts=attempts,
            notified_at=utcnow() if error is None else None,
            error=error[:500] if error else None,
        )
        session.commit()
    if error is not None and request is not None:
        log.warning("host notice %s: the webhook refused it (%s)", notice_id, error)
    return None if request is None else error is None


def deliver_owed(
    engine_sessions: Any, cfg: AlertWebhooks, public_url: str, ids: Sequence[int] | None = None, *, limit: int = 100
) -> dict[str, int]:
    """Deliver ``ids`` (else every notice owed now, at most ``limit``). Never raises."""
    counts = {"host_notices_delivered": 0, "host_notices_undelivered": 0}
    if ids is None:
        with engine_sessions() as session:
            ids = repository.due_notices(session, now=utcnow(), limit=limit)
            session.commit()
    if not ids:
        return counts
    with outbound.client(timeout_s=cfg.timeout_s, allow=cfg.networks()) as client:
        for notice_id in ids:
            try:
                done = deliver(engine_sessions, cfg, public_url, notice_id, client=client)
            except Exception:
                log.exception("host notice %s: delivering it raised; it stays owed", notice_id)
                continue
            if done is True:
                counts["host_notices_delivered"] += 1
            elif done is False:
                counts["host_notices_undelivered"] += 1
    return counts


def after_commit(session: Session, ids: Sequence[int]) -> None:
    """Once ``session`` commits, send ``ids`` from a thread (the sweep sends what this does not)."""
    bind = session.get_bind()
    if not isinstance(bind, Engine):
        return
    notify: tuple[AlertWebhooks, str] | None = session.info.get(alert_outbox.NOTIFY_INFO)

    def send(_: Session) -> None:
        owed = list(ids) or None
        if owed is None:
            return

        def run() -> None:
            try:
                cfg = notify or (get_settings().alert_webhooks, get_settings().public_url)
                deliver_owed(make_sessionmaker(bind), cfg[0], cfg[1], owed)
            except Exception:
                log.exception("sending %d host notice(s) failed; the sweep sends them", len(owed))

        threading.Thread(target=run, name="host-notices", daemon=True).start()

    event.listen(session, "after_commit", send, once=True)
