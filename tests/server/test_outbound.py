"""A project's alert webhook reaches public addresses only, unless the operator allows a network
(``ATTNPROF_ALERT_WEBHOOKS__ALLOW_NETWORKS``): a URL whose host is, or resolves to, a loopback, link-local, private,
shared, unspecified, multicast, reserved or metadata address is refused when it is set (422 naming the field and
the rule) and again when an alert is sent (the name resolved anew, every address checked, the connection pinned to
a checked one); the outbox records a refusal as a failed delivery with its reason, the same whatever listens there.

Names are resolved through ``attnprof.server.outbound.resolve``, which these tests replace: nothing leaves this machine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address, ip_network
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from attnprof.server import outbound
from attnprof.server.app import create_app
from attnprof.server.comparisons import alert_outbox
from attnprof.server.comparisons.models import Alert, AlertWebhook
from attnprof.server.config import AlertWebhooks
from tests.server import documents as docs
from tests.server.stack import bind, bound_sessions, make_settings, make_tenant
from tests.server.tenants import Tenant

SECRET = "whsec-0cc175b9c0f1b6a831c399e269772661"
PUBLIC = "93.184.216.34"
CASE = "sdpa[backend=cudnn,pass=fwd]"
STEP = 30


def _resolver(table: dict[str, list[str]]) -> Callable[[str, int], list[outbound.Address]]:
    def resolve(host: str, _port: int) -> list[outbound.Address]:
        if host not in table:
            raise OSError(f"{host}: no such name (test resolver)")
        return [ip_address(a) for a in table[host]]

    return resolve


@pytest.fixture
def names(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """What each name resolves to, for as long as the test runs; the test changes it as DNS would."""
    table: dict[str, list[str]] = {}
    monkeypatch.setattr(outbound, "resolve", _resolver(table))
    return table


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:9/hook", "a loopback address"),
        ("http://[::1]/hook", "a loopback address"),
        ("http://2130706433/hook", "a loopback address"),  # 127.0.0.1 as one decimal number
        ("http://127.1/hook", "a loopback address"),
        ("http://0x7f.0.0.1/hook", "a loopback address"),
        ("http://[::ffff:127.0.0.1]/hook", "a loopback address"),  # IPv4-mapped IPv6
        ("http://169.254.10.1/hook", "a link-local address"),
        ("http://[fe80::1]/hook", "a link-local address"),
        ("http://10.1.2.3/hook", "a private address"),
        ("http://172.16.0.1/hook", "a private address"),
        ("http://192.168.1.1/hook", "a private address"),
        ("http://[fd12:3456::1]/hook", "a private address"),
        ("http://100.64.0.1/hook", "a shared (carrier-grade NAT) address"),
        ("http://0.0.0.0/hook", "the unspecified address"),
        ("http://[::]/hook", "the unspecified address"),
        ("http://224.0.0.251/hook", "a multicast address"),
        ("http://240.0.0.1/hook", "a reserved address"),
        ("http://169.254.169.254/latest/meta-data/", "the cloud metadata service"),
        ("http://[fd00:ec2::254]/", "the cloud metadata service"),
        ("http://metadata.google.internal/computeMetadata/v1/", "the cloud metadata service"),
    ],
)
def test_a_literal_address_of_the_services_own_network_is_refused(url: str, kind: str, names: dict) -> None:
    refused = outbound.url_refusal(url, [])
    assert refused is not None and kind in refused
    assert names == {}  # decided from the URL alone


@pytest.mark.parametrize(
    ("addresses", "kind"),
    [
        (["127.0.0.1"], "a loopback address"),
        (["169.254.1.1"], "a link-local address"),
        (["10.0.0.7"], "a private address"),
        ([PUBLIC, "192.168.0.2"], "a private address"),  # every address a name resolves to is checked
        (["::ffff:10.0.0.7"], "a private address"),
        (["169.254.169.254"], "the cloud metadata service"),
    ],
)
def test_a_name_that_resolves_into_the_services_own_network_is_refused(
    names: dict, addresses: list[str], kind: str
) -> None:
    names["hooks.example.com"] = addresses
    refused = outbound.url_refusal("https://hooks.example.com/services/x", [])
    assert refused == f"hooks.example.com resolves to {kind}: " + (
        "never sent to, whatever the operator allows"
        if "metadata" in kind
        else "requests go to public addresses only, or to a network the operator allows "
        "(ATTNPROF_ALERT_WEBHOOKS__ALLOW_NETWORKS)"
    )
    assert addresses[-1] not in refused  # the rule, not what the service's resolver answered


def test_public_addresses_and_names_that_do_not_resolve_yet_are_taken(names: dict) -> None:
    names["hooks.example.com"] = [PUBLIC, "2606:2800:220:1:248:1893:25c8:1946"]
    assert outbound.url_refusal("https://hooks.example.com/x", []) is None
    assert outbound.url_refusal(f"http://{PUBLIC}:8080/x", []) is None
    assert outbound.url_refusal("https://not-yet.example.com/x", []) is None  # checked again when sent
    assert outbound.url_refusal("ftp://hooks.example.com/x", []) == "must be an http:// or https:// URL with a host"


def test_the_operators_networks_are_allowed_but_never_the_metadata_service(names: dict) -> None:
    loopback = [ip_network("127.0.0.0/8")]
    names["receiver.internal"] = ["127.0.0.1"]
    assert outbound.url_refusal("http://receiver.internal:8080/x", loopback) is None
    assert outbound.url_refusal("http://[::ffff:127.0.0.1]/x", loopback) is None
    assert outbound.url_refusal("http://10.0.0.1/x", loopback) is not None
    link_local = [ip_network("169.254.0.0/16")]
    assert outbound.url_refusal("http://169.254.10.1/x", link_local) is None
    for url in ("http://169.254.169.254/", "http://[::ffff:169.254.169.254]/", "http://metadata.google.internal/"):
        assert "never sent to" in (outbound.url_refusal(url, link_local) or ""), url


def test_the_allow_list_setting_reads_comma_separated_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnprof.server.config import Settings

    monkeypatch.setenv("ATTNPROF_ALERT_WEBHOOKS__ALLOW_NETWORKS", "127.0.0.1/8, fd12::/64")
    assert Settings().alert_webhooks.allow_networks == ["127.0.0.0/8", "fd12::/64"]
    assert AlertWebhooks().allow_networks == []  # the default: public addresses only
    with pytest.raises(ValueError, match="not a network"):
        AlertWebhooks(allow_networks="127.0.0.0/8,nowhere")  # type: ignore[arg-type]


@pytest.fixture
def strict_client(pg_url: str, db: Session) -> Iterator[TestClient]:
    """The API with the default settings: no network allowed beyond public addresses."""
    app = bind(create_app(make_settings(pg_url, alert_webhooks=AlertWebhooks())), db)
    with TestClient(app) as client:
        yield client


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://2130706433/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://169.254.169.254/latest",
        "http://hooks.example.com/hook",  # resolves to loopback (below)
    ],
)
def test_setting_a_webhook_into_the_services_own_network_is_a_422_naming_the_field(
    strict_client: TestClient, db: Session, names: dict, url: str
) -> None:
    names["hooks.example.com"] = ["127.0.0.1"]
    tenant = make_tenant(db)
    path = f"/api/v1/projects/{tenant.name}/alert-webhook"
    r = strict_client.put(path, json={"url": url, "secret": SECRET}, headers=tenant.h("admin"))
    assert r.status_code == 422 and r.json()["error"] == "invalid_payload", r.text
    detail = r.json()["detail"]
    assert detail.startswith("body.url: ") and ("public addresses only" in detail or "never sent to" in detail)
    assert strict_client.get(path, headers=tenant.h("admin")).status_code == 404  # nothing stored


def test_the_operators_allow_list_lets_a_loopback_receiver_be_set(client: TestClient, tenant: Tenant) -> None:
    # The suite's settings allow loopback (tests.server.stack.make_settings), as an operator would.
    path = f"/api/v1/projects/{tenant.name}/alert-webhook"
    r = client.put(path, json={"url": "http://127.0.0.1:9/hook", "secret": SECRET}, headers=tenant.h("admin"))
    assert r.status_code == 200, r.text


class Receiver:
    """An HTTP server on loopback that records every POST (headers, body) and answers ``status``."""

    def __init__(self, status: int = 200, location: str | None = None) -> None:
        self.got: list[dict[str, str]] = []
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                rec.got.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    try:
        yield rec
    finally:
        rec.close()


def _history(client: TestClient, tenant: Tenant) -> None:
    """A default-branch history of CASE with a 30% step: one alert, owed to the project's webhook."""
    for i in range(STEP + 6):
        doc = docs.h200(slower=1.3 if i >= STEP else 1.0, cases=[CASE], jitter=0.0005 * ((i * 7) % 3 - 1))
        commits = [f"{0xC0FFEE00 + j:040x}" for j in range(i, max(-1, i - 51), -1)]
        body = docs.upload_body(doc, commit=commits[0], ancestors=commits[1:])
        r = client.post(f"/api/v1/projects/{tenant.name}/results", json=body, headers=tenant.h("submit"))
        assert r.status_code == 201, r.text


def test_a_name_that_resolves_into_the_services_own_network_when_sent_is_not_sent_to(
    strict_client: TestClient, db: Session, names: dict, receiver: Receiver
) -> None:
    tenant = make_tenant(db)
    url = f"http://hooks.example.com:{receiver.port}/hook"
    names["hooks.example.com"] = [PUBLIC]  # when it is set
    r = strict_client.put(
        f"/api/v1/projects/{tenant.name}/alert-webhook", json={"url": url, "secret": SECRET}, headers=tenant.h("admin")
    )
    assert r.status_code == 200, r.text
    _history(strict_client, tenant)
    names["hooks.example.com"] = ["127.0.0.1"]  # when it is sent: the receiver listens there
    strict = AlertWebhooks()
    sent = alert_outbox.deliver_owed(bound_sessions(db), strict, "http://attnprof.test")
    assert sent == {"alerts_delivered": 0, "alerts_undelivered": 1}
    assert receiver.got == []
    hook = db.scalars(select(AlertWebhook).where(AlertWebhook.url == url)).one()
    row = db.scalars(select(Alert).where(Alert.project_id == hook.project_id)).one()
    refused = (
        "not sent: hooks.example.com resolves to a loopback address: requests go to public addresses only, or to a "
        "network the operator allows (ATTNPROF_ALERT_WEBHOOKS__ALLOW_NETWORKS)"
    )
    # A failed delivery, owed again after the backoff, with the rule as its reason: the same words whether anything
    # listens at that address or not (nothing was tried).
    assert row.notify_error == refused and row.notified_at is None and row.notify_attempts == 1
    assert row.notify_due_at is not None
    # The operator allows loopback: the same alert, due again, reaches the receiver, at the address checked, under
    # its name.
    allowed = AlertWebhooks(allow_networks=["127.0.0.0/8"])
    with outbound.client(timeout_s=5, allow=allowed.networks()) as http:
        later = row.notify_due_at + timedelta(seconds=1)
        assert alert_outbox.deliver(bound_sessions(db), allowed, "http://attnprof.test", row.id, client=http, now=later)
    assert len(receiver.got) == 1 and receiver.got[0]["host"] == f"hooks.example.com:{receiver.port}"
    db.refresh(row)
    assert row.notified_at is not None and row.notify_error is None


def test_a_connection_goes_to_the_checked_address_with_the_name_as_host_and_tls_server_name(
    names: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[httpx.Request] = []

    def handle(_self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        seen.append(httpx.Request(request.method, request.url, headers=request.headers, extensions=request.extensions))
        return httpx.Response(204)

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", handle)
    names["hooks.example.com"] = [PUBLIC]
    with outbound.client(timeout_s=5, allow=[]) as http:
        assert http.post("https://hooks.example.com/services/x", content=b"{}").status_code == 204
        names["hooks.example.com"] = ["10.0.0.9"]  # DNS answers otherwise by the next request
        with pytest.raises(outbound.RefusedDestination, match="resolves to a private address"):
            http.post("https://hooks.example.com/services/x", content=b"{}")
    assert len(seen) == 1
    assert seen[0].url == httpx.URL(f"https://{PUBLIC}/services/x")
    assert seen[0].headers["host"] == "hooks.example.com" and seen[0].extensions["sni_hostname"] == "hooks.example.com"


def test_a_redirect_is_not_followed() -> None:
    target = Receiver()
    redirecting = Receiver(status=307, location=f"http://127.0.0.1:{target.port}/elsewhere")
    try:
        with outbound.client(timeout_s=5, allow=[ip_network("127.0.0.0/8")]) as http:
            answer = http.post(f"http://127.0.0.1:{redirecting.port}/hook", content=b"{}")
        assert answer.status_code == 307 and len(redirecting.got) == 1 and target.got == []
    finally:
        target.close()
        redirecting.close()
