"""A host's quarantine and release, sent to the alert webhook of each project that uses its testbed (docs/alerts.md,
"Host notices"): signed and delivered as alerts are (``attnprof.server.comparisons.alert_outbox``), after the commit
that owed them and again by the sweep, with the same backoff and checks on the address.

The body is Slack-compatible (``text``, ``blocks``) with the notice as data beside them (``host``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
from sqlalchemy.orm import Session

from attnprof.contract.links import Links
from attnprof.server.comparisons import alert_outbox, alert_webhook
from attnprof.server.comparisons import repository as alert_rows
from attnprof.server.config import AlertWebhooks
from attnprof.server.projects import repository as projects
from attnprof.server.testbeds import repository as testbeds
from attnprof.server.testbeds.models import HostNotice


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
    sessions: alert_outbox.Sessions, cfg: AlertWebhooks, public_url: str, notice_id: int, *, client: httpx.Client
) -> bool | None:
    """Send one owed notice to its project's webhook (``alert_outbox.deliver_row``)."""

    def request_of(session: Session, notice: HostNotice) -> alert_outbox.Request | None:
        hook = alert_rows.webhook_of(session, notice.project_id)
        if hook is None:
            return None
        project = projects.get(session, notice.project_id)
        testbed = testbeds.get(session, notice.testbed_id)
        name = project.name if project else str(notice.project_id)
        payload = body(
            notice,
            project=name,
            testbed=testbed.name if testbed else str(notice.testbed_id),
            url=Links(public_url).ui_fleet(name),
        )
        return hook.url, hook.secret, alert_webhook.encode(payload)

    return alert_outbox.deliver_row(
        sessions, cfg, HostNotice, notice_id, request_of, client=client, label="host notice"
    )


def deliver_owed(
    sessions: alert_outbox.Sessions,
    cfg: AlertWebhooks,
    public_url: str,
    ids: Sequence[int] | None = None,
    *,
    limit: int = 100,
) -> dict[str, int]:
    """Deliver ``ids`` (else every notice owed now, at most ``limit``): ``alert_outbox.deliver_all``. Never raises."""

    def one(notice_id: int, client: httpx.Client) -> bool | None:
        return deliver(sessions, cfg, public_url, notice_id, client=client)

    return alert_outbox.deliver_all(sessions, cfg, HostNotice, ids, one, label="host_notice", limit=limit)


def after_commit(session: Session, ids: Sequence[int]) -> None:
    """Once ``session`` commits, send ``ids`` from a thread (the sweep sends what this does not)."""
    alert_outbox.after_commit(session, ids, deliver_owed, label="host notice")
