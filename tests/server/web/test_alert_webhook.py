"""A project's alert webhook against a real HTTP receiver on this machine: the test site's server records a
seeded history through its API (each upload committed), and once the commit that records the step's alert is made,
the receiver gets one POST: a Slack-compatible body (``text`` and ``blocks``) naming the case, the size with its
unit and the commits around the step, signed as docs/alerts.md documents (HMAC-SHA256 of ``timestamp.body``),
verified here the way a receiver would. A receiver that refuses is tried again after the backoff, from the stored
row."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from attnprof.server.comparisons import alert_outbox
from attnprof.server.comparisons.models import Alert
from attnprof.server.config import AlertWebhooks
from attnprof.server.db import make_engine, make_sessionmaker, utcnow
from tests.server.web.stack import Site, _project, _upload, docs

CASE = "sdpa[backend=cudnn,pass=fwd]"
SECRET = "whsec-3b5d5c3712955042212316173ccd2f1c"
WIGGLES = [0.0] * 10 + [0.009] * 10 + [-0.004] * 10
STEP = len(WIGGLES)


@dataclass
class Receiver:
    """An HTTP server that records every POST and answers with the next scripted status (then 200)."""

    statuses: list[int] = field(default_factory=list)
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    url: str = ""

    def wait(self, count: int, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.got) < count:
            assert time.monotonic() < deadline, f"the receiver got {len(self.got)} POSTs, not {count}"
            time.sleep(0.05)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers["Content-Length"]))
            rec.got.append(({k.lower(): v for k, v in self.headers.items()}, data))
            status = rec.statuses.pop(0) if rec.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    rec.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/attnprof"
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()


def _verified(headers: dict[str, str], body: bytes) -> bool:
    """What a receiver does (docs/alerts.md, "Verifying a delivery"), written out without the service's code."""
    stamp = headers["x-attnprof-timestamp"]
    if abs(time.time() - int(stamp)) > 300:
        return False
    expected = "v1=" + hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers["x-attnprof-signature"])


def _commit(i: int) -> str:
    return f"{i + 0xA00:x}" + "e" * 37


def _seed(site: Site, receiver: Receiver, name: str) -> list[str]:
    tokens = _project(site.db_url, name)
    with site.api(tokens.admin) as client:
        r = client.put(f"/api/v1/projects/{name}/alert-webhook", json={"url": receiver.url, "secret": SECRET})
        assert r.status_code == 200, r.text
    runs = []
    with site.api(tokens.submit) as client:
        for i in range(STEP + 7):
            level = WIGGLES[i] if i < STEP else WIGGLES[-1]
            doc = docs.h200(slower=1.3 if i >= STEP else 1.0, cases=[CASE], jitter=level + 0.0005 * ((i * 7) % 3 - 1))
            runs.append(_upload(client, name, doc, commit=_commit(i), ancestors=[_commit(i - 1)])["run_id"])
    return runs


def test_one_signed_slack_body_per_new_alert(site: Site, receiver: Receiver) -> None:
    runs = _seed(site, receiver, f"hook-{site.project[-8:]}")
    receiver.wait(1)
    time.sleep(1.0)  # later uploads found the same step again: no second POST
    assert len(receiver.got) == 1
    headers, body = receiver.got[0]
    assert headers["content-type"] == "application/json"
    assert headers["x-attnprof-signature"].startswith("v1=")
    assert _verified(headers, body)
    assert not _verified(headers, body.replace(b"+30.0%", b"+3.0%"))  # a changed body fails
    payload = json.loads(body)
    assert set(payload) >= {"text", "blocks"}
    assert payload["text"].startswith(f"Regression: latency of {CASE} on main")
    assert "+30.0% (87.8 → 114.1 µs)" in payload["text"]
    assert f"between {_commit(STEP - 1)[:10]} and {_commit(STEP)[:10]}" in payload["text"]
    assert [b["type"] for b in payload["blocks"]] == ["section", "section", "context"]
    fields = " ".join(f["text"] for f in payload["blocks"][1]["fields"])
    assert f"`{_commit(STEP - 1)[:12]}`" in fields and f"`{_commit(STEP)[:12]}`" in fields
    assert "95% CI" in payload["blocks"][2]["elements"][0]["text"]
    alert = payload["alert"]
    assert alert["case"] == CASE and alert["unit"] == "us"
    assert alert["last_good"]["run_id"] == runs[STEP - 1] and alert["first_bad"]["run_id"] == runs[STEP]
    assert "/trends?" in alert["url"]
    # The row says it was delivered, and owes nothing more.
    engine = make_engine(site.db_url)
    try:
        with make_sessionmaker(engine)() as session:
            row = session.scalars(select(Alert).where(Alert.id == alert["id"])).one()
            assert row.notified_at is not None and row.notify_due_at is None and row.notify_attempts == 1
    finally:
        engine.dispose()


def test_a_refusing_receiver_gets_it_again_after_the_backoff(site: Site, receiver: Receiver) -> None:
    receiver.statuses = [503]
    _seed(site, receiver, f"hook503-{site.project[-8:]}")
    receiver.wait(1)
    engine = make_engine(site.db_url)
    sessions = make_sessionmaker(engine)
    cfg = AlertWebhooks(retry_s=30.0, attempts=2)
    try:
        deadline = time.monotonic() + 10
        while True:
            with sessions() as session:
                row = session.scalars(select(Alert).where(Alert.project_id == _project_id(session, receiver))).one()
            if row.notify_attempts == 1:
                break
            assert time.monotonic() < deadline, "the refusal was not recorded"
            time.sleep(0.05)
        assert row.notify_error is not None and "503" in row.notify_error and row.notified_at is None
        assert row.notify_due_at is not None and row.notify_due_at > utcnow() + timedelta(seconds=20)
        with httpx.Client(timeout=5) as client:
            # Not due yet: nothing is sent; due after the backoff: sent, and recorded as delivered.
            assert alert_outbox.deliver(sessions, cfg, site.url, row.id, client=client) is None
            later = row.notify_due_at + timedelta(seconds=1)
            assert alert_outbox.deliver(sessions, cfg, site.url, row.id, client=client, now=later) is True
        assert len(receiver.got) == 2 and json.loads(receiver.got[1][1])["alert"]["id"] == row.id
        assert all(_verified(h, b) for h, b in receiver.got)
        with sessions() as session:
            done = session.get(Alert, row.id)
            assert done is not None and done.notified_at is not None and done.notify_due_at is None
    finally:
        engine.dispose()


def _project_id(session: Any, receiver: Receiver) -> int:
    from attnprof.server.comparisons.models import AlertWebhook

    return session.scalars(select(AlertWebhook.project_id).where(AlertWebhook.url == receiver.url)).one()


def test_the_sweep_sends_what_is_still_owed(site: Site, receiver: Receiver) -> None:
    """A sender that died (its claim ran out) or a backoff that is over: the sweep (``jobs.sweep``'s body) sends it."""
    from sqlalchemy import update

    from attnprof.worker.analysis import sweeper
    from tests.server.stack import make_settings

    receiver.statuses = [500]
    _seed(site, receiver, f"hooksweep-{site.project[-8:]}")
    receiver.wait(1)
    engine = make_engine(site.db_url)
    sessions = make_sessionmaker(engine)
    try:
        deadline = time.monotonic() + 10
        while True:
            with sessions() as session:
                row = session.scalars(select(Alert).where(Alert.project_id == _project_id(session, receiver))).one()
            if row.notify_attempts == 1:
                break
            assert time.monotonic() < deadline, "the refusal was not recorded"
            time.sleep(0.05)
        with sessions() as session:
            session.execute(update(Alert).where(Alert.id == row.id).values(notify_due_at=utcnow()))
            session.commit()
        swept = sweeper.run(make_settings(site.db_url, public_url=site.url))
        assert swept["alerts_delivered"] >= 1
        assert len(receiver.got) == 2 and _verified(*receiver.got[1])
        assert json.loads(receiver.got[1][1])["alert"]["url"].startswith(site.url + "/ui/p/")
        with sessions() as session:
            done = session.get(Alert, row.id)
            assert done is not None and done.notified_at is not None and done.notify_attempts == 2
        assert sweeper.run(make_settings(site.db_url))["alerts_delivered"] == 0  # nothing owed any more
    finally:
        engine.dispose()
