"""Sending new alerts to a project's webhook: after the commit that recorded them, from the stored rows, never
inside a transaction (docs/architecture.md, "Outbound calls after the commit"), as ``attnprof.server.github.outbox``
sends a job's feedback.

An alert is owed to the webhook while its ``notify_due_at`` is set (``attnprof.server.comparisons.alerts`` sets it, in
the transaction that records a new alert of a project that has a webhook). One delivery (``deliver``) is three steps:

1. claim it in a short transaction of its own, committed before anything is sent: one conditional statement moves
   ``notify_due_at`` ``CLAIM_S`` ahead, so another sender finds it due later and skips it; the body is built from
   the stored rows in the same transaction;
2. POST it, signed (``attnprof.server.comparisons.alert_webhook``), with no transaction open, to a checked address only
   (``attnprof.server.outbound``: a URL whose host is or now resolves to this service's own network is not sent to, and
   that refusal is recorded as a failed delivery, before any connection is tried);
3. record the outcome in another short transaction, if the claim is still this sender's: delivered (the debt
   cleared), or refused and owed again after a backoff that doubles from ``retry_s`` up to an hour, until
   ``attempts`` tries have failed (then the last error stays on the row and nothing more is sent).

Who sends: the transaction that recorded new alerts, once it has committed (``after_commit``: a thread started by
the commit, so neither the upload's answer nor the analysis task waits on the receiver); and the sweep, every few
seconds, whatever is still owed (a sender that died, a backoff that is over). This module is a task boundary: its
transactions are committed here, and nothing else in it commits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, cast

import httpx
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

from attnprof.contract.links import Links
from attnprof.server import outbound
from attnprof.server.comparisons import alert_webhook, repository
from attnprof.server.comparisons.models import Alert
from attnprof.server.config import AlertWebhooks, get_settings
from attnprof.server.db import make_sessionmaker, utcnow
from attnprof.server.projects import repository as projects
from attnprof.server.testbeds import repository as testbeds
from attnprof.server.testbeds.models import HostNotice

log = logging.getLogger(__name__)

Sessions = Callable[[], AbstractContextManager[Session]]

CLAIM_S = 300.0
"""How long a claimed delivery is left to its sender (one POST waits at most ``timeout_s``); past it, the sweep
takes over from a sender that died."""
MAX_BACKOFF_S = 3600.0
# Senders started by commits in one process at once; past them the sweep delivers.
_SLOTS = threading.BoundedSemaphore(4)


Request = tuple[str, str, bytes]
"""A delivery: the webhook's URL, its secret and the body."""


def deliver_row(
    sessions: Sessions,
    cfg: AlertWebhooks,
    model: repository.OwedModel,
    row_id: int,
    request_of: Callable[[Session, Any], Request | None],
    *,
    client: httpx.Client,
    label: str,
    now: datetime | None = None,
) -> bool | None:
    """Send row ``row_id`` of ``model`` (an alert, a host notice) to its project's webhook if it is owed at ``now``
    and no other sender holds it: ``request_of`` builds the delivery from the stored row, in the claim's transaction
    (None: the project has no webhook). True when the receiver took it (2xx), False when it refused or could not be
    reached (owed again after the backoff, or given up after ``cfg.attempts``), None when nothing was due. A project
    whose webhook was removed since is owed nothing: the debt is cleared."""
    now = now or utcnow()
    claim = now + timedelta(seconds=CLAIM_S)
    with sessions() as session:
        if not repository.claim_delivery(session, model, row_id, now=now, until=claim):
            session.commit()
            return None
        row = cast("Alert | HostNotice | None", session.get(model, row_id))
        attempts = row.notify_attempts if row is not None else 0
        request = request_of(session, row) if row is not None else None
        session.commit()
    if request is None:
        _record(sessions, model, row_id, claim, due_at=None, attempts=attempts, notified_at=None, error="no webhook")
        return None
    url, secret, data = request
    error = post_signed(client, url, secret, data)
    attempts += 1
    if error is None:
        _record(sessions, model, row_id, claim, due_at=None, attempts=attempts, notified_at=utcnow(), error=None)
        return True
    again = None
    if attempts < cfg.attempts:
        again = now + timedelta(seconds=min(cfg.retry_s * 2 ** (attempts - 1), MAX_BACKOFF_S))
    log.warning("%s %s: the webhook refused it (%s); %s", label, row_id, error, "retried" if again else "given up")
    _record(sessions, model, row_id, claim, due_at=again, attempts=attempts, notified_at=None, error=error[:500])
    return False


def deliver(
    sessions: Sessions,
    cfg: AlertWebhooks,
    public_url: str,
    alert_id: int,
    *,
    client: httpx.Client,
    now: datetime | None = None,
) -> bool | None:
    """Send alert ``alert_id`` to its project's webhook (``deliver_row``)."""

    def request_of(session: Session, alert: Alert) -> Request | None:
        hook = repository.webhook_of(session, alert.project_id)
        if hook is None:
            return None
        payload = alert_webhook.body(alert, context(session, public_url, alert))
        return hook.url, hook.secret, alert_webhook.encode(payload)

    return deliver_row(sessions, cfg, Alert, alert_id, request_of, client=client, label="alert", now=now)


def post_signed(client: httpx.Client, url: str, secret: str, data: bytes) -> str | None:
    """POST ``data`` signed; None when the receiver answered 2xx, else what went wrong."""
    stamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        alert_webhook.TIMESTAMP_HEADER: str(stamp),
        alert_webhook.SIGNATURE_HEADER: alert_webhook.sign(secret, stamp, data),
    }
    try:
        answer = client.post(url, content=data, headers=headers)
    except outbound.RefusedDestination as exc:
        return f"not sent: {exc}"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if 200 <= answer.status_code < 300:
        return None
    return f"HTTP {answer.status_code}: {answer.text[:200]}"


def _record(
    sessions: Sessions,
    model: repository.OwedModel,
    row_id: int,
    claim: datetime,
    *,
    due_at: datetime | None,
    attempts: int,
    notified_at: datetime | None,
    error: str | None,
) -> None:
    with sessions() as session:
        recorded = repository.settle_delivery(
            session,
            model,
            row_id,
            claim=claim,
            due_at=due_at,
            attempts=attempts,
            notified_at=notified_at,
            error=error,
        )
        session.commit()
    if not recorded:
        log.info("%s %s: its delivery was taken over by another sender before it was recorded", model.__name__, row_id)


def context(session: Session, public_url: str, alert: Alert) -> alert_webhook.AlertContext:
    """Project, testbed, branch, the commits around the step and the trend's page, read from the stored rows."""
    project = projects.get(session, alert.project_id)
    testbed = testbeds.get(session, alert.testbed_id)
    commits = repository.commits_of(session, [alert.before_run_id, alert.run_id])
    good, good_at = commits.get(alert.before_run_id, ("", None))
    bad, bad_at = commits.get(alert.run_id, ("", None))
    name = project.name if project is not None else str(alert.project_id)
    tb = testbed.name if testbed is not None else str(alert.testbed_id)
    return alert_webhook.AlertContext(
        project=name,
        testbed=tb,
        branch=project.default_branch if project is not None else "",
        last_good_commit=good,
        last_good_at=good_at,
        first_bad_commit=bad,
        first_bad_at=bad_at,
        url=Links(public_url).ui_trends(name, case=alert.case_id, metric=alert.metric, testbed=tb),
    )


def deliver_all(
    sessions: Sessions,
    cfg: AlertWebhooks,
    model: repository.OwedModel,
    ids: Sequence[int] | None,
    deliver_one: Callable[[int, httpx.Client], bool | None],
    *,
    label: str,
    budget_s: float | None = None,
    limit: int = 200,
) -> dict[str, int]:
    """Deliver ``ids`` of ``model`` (else every row owed now, at most ``limit``) one after the other with
    ``deliver_one``. Never raises: what could not be sent stays owed for the sweep. Past ``budget_s`` seconds the
    rest waits. Returns how many were delivered and how many refused (``<label>s_delivered``, ``..._undelivered``)."""
    counts = {f"{label}s_delivered": 0, f"{label}s_undelivered": 0}
    if ids is None:
        with sessions() as session:
            ids = repository.due_deliveries(session, model, now=utcnow(), limit=limit)
            session.commit()
    if not ids:
        return counts
    started = time.monotonic()
    with outbound.client(timeout_s=cfg.timeout_s, allow=cfg.networks()) as client:
        for row_id in ids:
            if budget_s is not None and time.monotonic() - started > budget_s:
                break
            try:
                done = deliver_one(row_id, client)
            except Exception:
                log.exception("%s %s: delivering it to the webhook raised; it stays owed", label, row_id)
                continue
            if done is True:
                counts[f"{label}s_delivered"] += 1
            elif done is False:
                counts[f"{label}s_undelivered"] += 1
    return counts


def deliver_owed(
    sessions: Sessions,
    cfg: AlertWebhooks,
    public_url: str,
    alert_ids: Sequence[int] | None = None,
    *,
    budget_s: float | None = None,
    limit: int = 200,
) -> dict[str, int]:
    """Deliver ``alert_ids`` (else every alert owed now, at most ``limit``): ``deliver_all``."""

    def one(alert_id: int, client: httpx.Client) -> bool | None:
        return deliver(sessions, cfg, public_url, alert_id, client=client)

    return deliver_all(sessions, cfg, Alert, alert_ids, one, label="alert", budget_s=budget_s, limit=limit)


NOTIFY_INFO = "attnprof.alert_notify"


Deliver = Callable[[Sessions, AlertWebhooks, str, Sequence[int]], object]
"""What sends owed rows: ``(sessions, webhook settings, public URL, ids)``, as ``deliver_owed``."""


def after_commit(
    session: Session, ids: Sequence[int], deliver_ids: Deliver | None = None, label: str = "alert"
) -> None:
    """Once ``session``'s transaction commits, send ``ids`` (alerts; with ``deliver_ids``, another outbox's rows) from
    a thread of their own (at most a few at once per process; the sweep sends the rest). Nothing is sent if it rolls
    back. A session bound to a connection (a test's outer transaction) leaves the sending to an explicit
    ``deliver_owed``."""
    owed = list(ids)
    bind = session.get_bind()
    if not owed or not isinstance(bind, Engine):
        return
    # The service's sessions carry its own webhook settings and public URL (``NOTIFY_INFO``); a worker's read its
    # environment's, which are the same settings in a deployment.
    notify: tuple[AlertWebhooks, str] | None = session.info.get(NOTIFY_INFO)
    send_ids = deliver_ids or deliver_owed

    def send(_: Session) -> None:
        if not _SLOTS.acquire(blocking=False):
            log.info("%d %s(s) left to the sweep: webhook deliveries under way already", len(owed), label)
            return
        args = (bind, owed, notify, send_ids, label)
        threading.Thread(target=_send, args=args, name=f"{label}-webhook", daemon=True).start()

    event.listen(session, "after_commit", send, once=True)


def _send(
    engine: Engine, ids: list[int], notify: tuple[AlertWebhooks, str] | None, deliver_ids: Deliver, label: str
) -> None:
    try:
        if notify is None:
            settings = get_settings()
            notify = (settings.alert_webhooks, settings.public_url)
        deliver_ids(make_sessionmaker(engine), notify[0], notify[1], ids)
    except Exception:
        log.exception("sending %d new %s(s) to the webhook failed; the sweep sends them", len(ids), label)
    finally:
        _SLOTS.release()
