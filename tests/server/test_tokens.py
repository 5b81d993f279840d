"""Token expiry, rotation (with and without a grace period) and the audit log of tokens, over the API on a real
Postgres (each test in a transaction rolled back), with requests from more than one client address."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, inspect, select, update
from sqlalchemy.orm import Session

from attnprof.server import migrate
from attnprof.server.app import create_app
from attnprof.server.audit import service as audit
from attnprof.server.audit.address import client_address, networks
from attnprof.server.audit.models import AuditEvent
from attnprof.server.auth import service as auth
from attnprof.server.auth.models import Token
from attnprof.server.auth.schemas import parse_duration
from attnprof.server.config import Settings
from attnprof.server.db import make_engine, utcnow
from attnprof.server.errors import Conflict, InvalidPayload, NotFound
from attnprof.server.projects import service as projects
from attnprof.server.testbeds import service as testbeds
from tests.pgtest import create_database, drop_database
from tests.server.stack import bind, make_settings
from tests.server.tenants import Tenant

A, B = ("10.1.0.1", 40001), ("10.1.0.2", 40002)


@pytest.fixture
def clients(app: FastAPI) -> Iterator[tuple[TestClient, TestClient]]:
    """Two clients of one app, from two addresses."""
    with TestClient(app, client=A) as a, TestClient(app, client=B) as b:
        yield a, b


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def _tokens_url(tenant: Tenant) -> str:
    return f"/api/v1/projects/{tenant.name}/tokens"


def _make(client: TestClient, tenant: Tenant, **body: object) -> dict:
    r = client.post(_tokens_url(tenant), json={"role": "read", **body}, headers=tenant.h())
    assert r.status_code == 201, r.text
    return r.json()


def _runs(client: TestClient, tenant: Tenant, secret: str):
    return client.get(f"/api/v1/projects/{tenant.name}/runs", headers=_bearer(secret))


def _events(db: Session, token_id: int) -> list[AuditEvent]:
    return list(db.scalars(select(AuditEvent).where(AuditEvent.token_id == token_id).order_by(AuditEvent.id)))


def _age(db: Session, token_id: int, **values: datetime) -> None:
    """Move a token's times (expiry, revocation) as if time had passed."""
    db.execute(update(Token).where(Token.id == token_id).values(**values))
    db.commit()


def _close(moment: str | None, expected: datetime) -> bool:
    assert moment is not None
    return abs(datetime.fromisoformat(moment) - expected) < timedelta(minutes=1)


# -- expiry ------------------------------------------------------------------------------------------------------


def test_a_token_made_to_expire_works_until_then_and_answers_401_saying_when(
    client: TestClient, tenant: Tenant, db: Session
) -> None:
    made = _make(client, tenant, expires_in="90d", name="ci")
    assert _close(made["expires_at"], utcnow() + timedelta(days=90))
    assert _runs(client, tenant, made["token"]).status_code == 200
    past = utcnow() - timedelta(seconds=5)
    _age(db, made["id"], expires_at=past)
    for r in (
        _runs(client, tenant, made["token"]),  # a project route (the token and the project in one query)
        client.get("/api/v1/token", headers=_bearer(made["token"])),  # a route any token may call
        client.post(
            f"/api/v1/projects/{tenant.name}/jobs",  # job submission, which checks its token without a dependency
            data={"testbed": "t", "branch": "main", "commit": "c"},
            headers=_bearer(made["token"]),
        ),
    ):
        assert r.status_code == 401, r.text
        assert r.json() == {"error": "unauthorized", "detail": f"token expired at {auth.when(past)}"}
        assert r.headers["WWW-Authenticate"] == "Bearer"
    listed = {t["id"]: t for t in client.get(_tokens_url(tenant), headers=tenant.h()).json()["tokens"]}
    assert listed[made["id"]]["expires_at"] is not None and listed[made["id"]]["revoked_at"] is None


def test_a_token_without_expiry_never_expires(client: TestClient, tenant: Tenant) -> None:
    made = _make(client, tenant)
    assert made["expires_at"] is None
    assert _runs(client, tenant, made["token"]).status_code == 200


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("-5d", "negative"),
        ("90", "not a duration"),
        ("ninety days", "not a duration"),
        ("1.5h", "not a duration"),
        ("0d", "no time at all"),
        ("3651d", "too long"),
        ("", "not a duration"),
    ],
)
def test_a_bad_lifetime_is_422_naming_the_field_and_the_form_and_makes_nothing(
    client: TestClient, tenant: Tenant, db: Session, value: str, says: str
) -> None:
    before = client.get(_tokens_url(tenant), headers=tenant.h()).json()["tokens"]
    events = db.scalar(select(AuditEvent.id).order_by(AuditEvent.id.desc()).limit(1))
    r = client.post(_tokens_url(tenant), json={"role": "read", "expires_in": value}, headers=tenant.h())
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert r.json()["error"] == "invalid_payload"
    assert "body.expires_in" in detail and says in detail and "a whole number and a unit" in detail, detail
    assert client.get(_tokens_url(tenant), headers=tenant.h()).json()["tokens"] == before
    assert db.scalar(select(AuditEvent.id).order_by(AuditEvent.id.desc()).limit(1)) == events


def test_a_lifetime_that_is_not_text_is_422(client: TestClient, tenant: Tenant) -> None:
    r = client.post(_tokens_url(tenant), json={"role": "read", "expires_in": -5}, headers=tenant.h())
    assert r.status_code == 422 and "body.expires_in" in r.json()["detail"]


def test_durations() -> None:
    assert parse_duration("90d") == timedelta(days=90)
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("30m") == timedelta(minutes=30)
    assert parse_duration("45s") == timedelta(seconds=45)
    assert parse_duration("2w") == timedelta(days=14)
    assert parse_duration("0s", zero=True) == timedelta(0)
    for bad in ("0s", "-1h", "1 h", " 1h", "1H", "1y", "h", "1h30m", "99999999999999d"):
        with pytest.raises(ValueError, match="a whole number and a unit"):
            parse_duration(bad)


def test_the_service_refuses_a_lifetime_that_is_not_positive(db: Session, tenant: Tenant) -> None:
    project_id = db.scalar(select(Token.project_id).where(Token.prefix == tenant.admin[:10]))
    assert project_id is not None
    for bad in (timedelta(0), timedelta(days=-1), timedelta(days=4000)):
        with pytest.raises(InvalidPayload, match="expires_in"):
            auth.create_project_token(db, project_id=project_id, role="read", expires_in=bad)


# -- rotation ----------------------------------------------------------------------------------------------------


def _rotate(client: TestClient, tenant: Tenant, token_id: int, **body: object):
    return client.post(f"{_tokens_url(tenant)}/{token_id}/rotate", json=body or None, headers=tenant.h())


def test_rotation_without_grace_replaces_the_secret_at_once(client: TestClient, tenant: Tenant, db: Session) -> None:
    old = _make(client, tenant, role="submit", name="ci-runner")
    r = _rotate(client, tenant, old["id"])
    assert r.status_code == 201, r.text
    new = r.json()
    assert new["token"].startswith("ap_") and new["token"] != old["token"] and new["id"] != old["id"]
    assert (new["role"], new["name"], new["expires_at"]) == ("submit", "ci-runner", None)
    assert new["replaced"]["id"] == old["id"] and _close(new["replaced"]["revoked_at"], utcnow())
    assert _runs(client, tenant, old["token"]).status_code == 401
    assert _runs(client, tenant, new["token"]).status_code == 200
    listed = {t["id"]: t for t in client.get(_tokens_url(tenant), headers=tenant.h()).json()["tokens"]}
    assert listed[old["id"]]["revoked_at"] is not None and listed[new["id"]]["revoked_at"] is None
    assert "token" not in listed[new["id"]]  # shown once
    # the old one is gone: rotating it again is a conflict, and nothing is made
    again = _rotate(client, tenant, old["id"])
    assert again.status_code == 409 and again.json()["detail"] == f"token {old['id']} is revoked: create a new one"
    assert len(client.get(_tokens_url(tenant), headers=tenant.h()).json()["tokens"]) == len(listed)


def test_rotation_with_grace_keeps_the_old_token_until_then(client: TestClient, tenant: Tenant, db: Session) -> None:
    old = _make(client, tenant, role="submit")
    r = _rotate(client, tenant, old["id"], grace="1h")
    assert r.status_code == 201, r.text
    new = r.json()
    ends = datetime.fromisoformat(new["replaced"]["revoked_at"])
    assert _close(new["replaced"]["revoked_at"], utcnow() + timedelta(hours=1))
    assert _runs(client, tenant, old["token"]).status_code == 200  # in its grace period
    assert _runs(client, tenant, new["token"]).status_code == 200
    twice = _rotate(client, tenant, old["id"])
    assert twice.status_code == 409
    assert twice.json()["detail"] == f"token {old['id']} was rotated already: it stops working at {auth.when(ends)}"
    _age(db, old["id"], revoked_at=utcnow() - timedelta(seconds=1))  # the hour has passed
    r = _runs(client, tenant, old["token"])
    assert r.status_code == 401 and r.json()["detail"] == "unknown or revoked token"
    assert _runs(client, tenant, new["token"]).status_code == 200


def test_revoking_a_token_in_its_grace_period_ends_it_now(client: TestClient, tenant: Tenant) -> None:
    old = _make(client, tenant)
    assert _rotate(client, tenant, old["id"], grace="2d").status_code == 201
    assert _runs(client, tenant, old["token"]).status_code == 200
    r = client.delete(f"{_tokens_url(tenant)}/{old['id']}", headers=tenant.h())
    assert r.status_code == 200 and _close(r.json()["revoked_at"], utcnow())
    assert _runs(client, tenant, old["token"]).status_code == 401


def test_rotation_keeps_the_lifetime_or_takes_a_new_one(client: TestClient, tenant: Tenant) -> None:
    short = _make(client, tenant, expires_in="2d")
    kept = _rotate(client, tenant, short["id"]).json()
    assert _close(kept["expires_at"], utcnow() + timedelta(days=2))
    longer = _rotate(client, tenant, kept["id"], expires_in="30d", grace="0s").json()
    assert _close(longer["expires_at"], utcnow() + timedelta(days=30))
    assert _runs(client, tenant, kept["token"]).status_code == 401  # grace 0s: at once


def test_an_expired_token_cannot_be_rotated(client: TestClient, tenant: Tenant, db: Session) -> None:
    made = _make(client, tenant, expires_in="1d")
    past = utcnow() - timedelta(minutes=1)
    _age(db, made["id"], expires_at=past)
    r = _rotate(client, tenant, made["id"])
    assert r.status_code == 409
    assert r.json()["detail"] == f"token {made['id']} expired at {auth.when(past)}: create a new one"


def test_rotation_is_for_an_admin_of_the_tokens_project(client: TestClient, tenant: Tenant, other: Tenant) -> None:
    made = _make(client, tenant)
    theirs = client.post(f"{_tokens_url(other)}/{made['id']}/rotate", headers=other.h())
    assert theirs.status_code == 404 and theirs.json()["detail"] == f"no token {made['id']} in this project"
    ours_by_them = client.post(f"{_tokens_url(tenant)}/{made['id']}/rotate", headers=other.h())
    assert ours_by_them.status_code == 404
    by_submit = client.post(f"{_tokens_url(tenant)}/{made['id']}/rotate", headers=tenant.h("submit"))
    assert by_submit.status_code == 403
    assert client.post(f"{_tokens_url(tenant)}/999999/rotate", headers=tenant.h()).status_code == 404
    assert _runs(client, tenant, made["token"]).status_code == 200  # none of them changed it


@pytest.mark.parametrize(
    ("body", "field"),
    [({"grace": "-1h"}, "body.grace"), ({"grace": "soon"}, "body.grace"), ({"expires_in": "0s"}, "body.expires_in")],
)
def test_a_bad_rotation_is_422_naming_the_field_and_changes_nothing(
    client: TestClient, tenant: Tenant, body: dict, field: str
) -> None:
    made = _make(client, tenant)
    r = _rotate(client, tenant, made["id"], **body)
    assert r.status_code == 422 and field in r.json()["detail"] and "a whole number and a unit" in r.json()["detail"]
    assert _rotate(client, tenant, made["id"], extra="x").status_code == 422
    assert _runs(client, tenant, made["token"]).status_code == 200
    tokens = client.get(_tokens_url(tenant), headers=tenant.h()).json()["tokens"]
    assert [t["revoked_at"] for t in tokens if t["id"] == made["id"]] == [None]


def test_a_worker_token_rotates_like_the_others(db: Session) -> None:
    bed = testbeds.ensure(db, f"tb-{uuid.uuid4().hex[:8]}")
    old, old_secret = auth.create_worker_token(db, testbed_id=bed.id, name="gpu0", expires_in=timedelta(days=7))
    new, secret, replaced = auth.rotate(db, project_id=None, token_id=old.id, grace=timedelta(minutes=10))
    assert replaced is old and new.testbed_id == bed.id and new.role == "worker" and new.name == "gpu0"
    assert new.expires_at is not None and abs(new.expires_at - (utcnow() + timedelta(days=7))) < timedelta(minutes=1)
    assert auth.authenticate(db, f"Bearer {old_secret}").testbed_id == bed.id  # grace
    assert auth.authenticate(db, f"Bearer {secret}").token_id == new.id
    with pytest.raises(Conflict):
        auth.rotate(db, project_id=None, token_id=old.id)
    with pytest.raises(NotFound, match="in this project"):  # a project's admin cannot reach a worker token
        auth.rotate(db, project_id=1, token_id=new.id)
    kinds = [e.kind for e in _events(db, old.id)] + [e.kind for e in _events(db, new.id)]
    assert kinds == ["token.created", "token.rotated", "token.created"]
    assert {e.testbed_id for e in _events(db, new.id)} == {bed.id}


# -- the audit log -----------------------------------------------------------------------------------------------


def _audit(client: TestClient, tenant: Tenant, **params: object) -> dict:
    r = client.get(f"/api/v1/projects/{tenant.name}/audit", params=params, headers=tenant.h())
    assert r.status_code == 200, r.text
    return r.json()


def test_every_kind_of_event_is_recorded_with_its_address(
    clients: tuple[TestClient, TestClient], tenant: Tenant, db: Session
) -> None:
    a, b = clients
    admin_id = db.scalar(select(Token.id).where(Token.prefix == tenant.admin[:10]))
    made = _make(a, tenant, role="submit", name="ci", expires_in="30d")  # the admin's first use, from A
    assert _runs(a, tenant, made["token"]).status_code == 200  # its first use, from A
    assert _runs(a, tenant, made["token"]).status_code == 200  # A again: nothing new
    assert _runs(b, tenant, made["token"]).status_code == 200  # from B
    rotated = _rotate(b, tenant, made["id"], grace="1h").json()  # the admin from B
    assert b.delete(f"{_tokens_url(tenant)}/{rotated['id']}", headers=tenant.h()).status_code == 200

    mine = [(e.kind, e.address) for e in _events(db, made["id"])]
    assert mine == [
        ("token.created", A[0]),
        ("token.new_address", A[0]),
        ("token.new_address", B[0]),
        ("token.rotated", B[0]),
    ]
    details = [e.detail for e in _events(db, made["id"])]
    assert details[0].startswith("submit token 'ci', expires ") and details[0].endswith(f"; by token {admin_id}")
    assert details[1] == f"used from {A[0]} (its first use from an address)"
    assert details[2] == f"used from {B[0]} (last seen from {A[0]})"
    assert details[3].startswith(f"replaced by token {rotated['id']} ({rotated['prefix']}); works until ")
    theirs = [(e.kind, e.address) for e in _events(db, rotated["id"])]
    assert theirs == [("token.created", B[0]), ("token.revoked", B[0])]
    assert f"rotated from token {made['id']} ({made['prefix']})" in _events(db, rotated["id"])[0].detail
    admins = [(e.kind, e.address) for e in _events(db, admin_id)]
    assert admins == [("token.created", None), ("token.new_address", A[0]), ("token.new_address", B[0])]

    page = _audit(b, tenant)  # from B, where the admin token was last seen: no event of its own
    assert [e["id"] for e in page["events"]] == sorted((e["id"] for e in page["events"]), reverse=True)
    assert {e["kind"] for e in page["events"]} == {
        "token.created",
        "token.rotated",
        "token.revoked",
        "token.new_address",
    }
    assert all(e["project"] == tenant.name and e["testbed"] is None for e in page["events"])
    first = page["events"][0]
    assert first["kind"] == "token.revoked" and first["token_id"] == rotated["id"]
    assert first["token_prefix"] == rotated["prefix"] and first["address"] == B[0]
    tokens = {t["id"]: t for t in a.get(_tokens_url(tenant), headers=tenant.h()).json()["tokens"]}
    assert tokens[made["id"]]["last_address"] == B[0]


def test_the_audit_log_pages_newest_first(client: TestClient, tenant: Tenant) -> None:
    for _ in range(4):
        _make(client, tenant)
    everything = _audit(client, tenant, limit=1000)["events"]
    assert len(everything) >= 8 and everything[-1]["kind"] == "token.created"
    seen, cursor = [], None
    while True:
        page = _audit(client, tenant, limit=3, **({"cursor": cursor} if cursor else {}))
        assert len(page["events"]) <= 3
        seen += page["events"]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == everything
    url = f"/api/v1/projects/{tenant.name}/audit"
    for bad in ("nope", "MjAyNi0wMS0wMVQwMDowMDowMCswMDowMHxhYmM"):  # not base64 of ours; a time with id "abc"
        r = client.get(url, params={"cursor": bad}, headers=tenant.h())
        assert r.status_code == 400 and r.json()["detail"] == "cursor: not a cursor this API returned"
    assert client.get(url, params={"limit": 0}, headers=tenant.h()).status_code == 422


def test_the_audit_log_is_for_the_projects_admins_only(client: TestClient, tenant: Tenant, other: Tenant) -> None:
    _make(client, other, name="theirs")
    url = f"/api/v1/projects/{tenant.name}/audit"
    assert client.get(url, headers=tenant.h("read")).status_code == 403
    assert client.get(url, headers=other.h()).status_code == 404
    assert client.get(url).status_code == 401
    assert all(e["project"] == tenant.name for e in _audit(client, tenant)["events"])
    assert "theirs" not in str(_audit(client, tenant))


def test_use_from_the_same_address_writes_nothing(
    clients: tuple[TestClient, TestClient], tenant: Tenant, engine: Engine
) -> None:
    a, b = clients
    made = _make(a, tenant)
    statements: list[str] = []

    def seen(_conn, _cursor, statement, *_args) -> None:
        statements.append(statement.split(None, 1)[0].upper())

    event.listen(engine, "before_cursor_execute", seen)
    try:
        assert _runs(a, tenant, made["token"]).status_code == 200  # first use: the address is written
        first = list(statements)
        statements.clear()
        assert _runs(a, tenant, made["token"]).status_code == 200
        same = list(statements)
        statements.clear()
        assert _runs(b, tenant, made["token"]).status_code == 200
        moved = list(statements)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert first.count("UPDATE") == 1 and first.count("INSERT") == 1
    assert "UPDATE" not in same and "INSERT" not in same
    assert len(same) == len(first) - 2  # the same statements but those two
    assert moved == first


def test_a_worker_tokens_new_address_is_recorded_under_its_testbed(
    clients: tuple[TestClient, TestClient], worker_token: tuple[str, str], db: Session
) -> None:
    a, _ = clients
    name, secret = worker_token
    assert a.get("/api/v1/token", headers=_bearer(secret)).json()["testbed"] == name
    bed = testbeds.ensure(db, name)
    rows, nxt = audit.page(db, testbed_id=bed.id, cursor=None, limit=10)
    assert [(r.event.kind, r.event.address, r.testbed, r.project) for r in rows] == [
        ("token.new_address", A[0], name, None),
        ("token.created", None, name, None),
    ]
    assert nxt is None


# -- the client address ------------------------------------------------------------------------------------------


def _scope(peer: str, forwarded: str | None = None) -> dict:
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded is not None else []
    return {"type": "http", "client": (peer, 1234), "headers": headers}


def test_x_forwarded_for_counts_only_from_a_trusted_proxy() -> None:
    trusted = networks(["10.9.0.0/16", "::1"])
    # no trusted proxies, or a peer that is not one: the header is anyone's to write
    assert client_address(_scope("203.0.113.9", "198.51.100.1"), ()) == "203.0.113.9"
    assert client_address(_scope("203.0.113.9", "198.51.100.1"), trusted) == "203.0.113.9"
    # from a trusted proxy: the first address from the right that is not a trusted proxy
    assert client_address(_scope("10.9.0.5", "198.51.100.1"), trusted) == "198.51.100.1"
    assert client_address(_scope("10.9.0.5", "6.6.6.6, 198.51.100.1, 10.9.0.7"), trusted) == "198.51.100.1"
    assert client_address(_scope("::1", "[2001:db8::1]:443"), trusted) == "2001:db8::1"
    assert client_address(_scope("10.9.0.5", "198.51.100.1:5000"), trusted) == "198.51.100.1"
    # what a proxy of ours did not write is not an address: the proxy is what is known
    assert client_address(_scope("10.9.0.5", "not-an-address"), trusted) == "10.9.0.5"
    assert client_address(_scope("10.9.0.5"), trusted) == "10.9.0.5"
    assert client_address({"type": "http", "client": None, "headers": []}, trusted) is None
    assert client_address(_scope("testclient"), trusted) == "testclient"


def test_behind_a_trusted_proxy_the_forwarded_address_is_recorded(pg_url: str, db: Session, tenant: Tenant) -> None:
    app = bind(create_app(make_settings(pg_url, trusted_proxies="10.9.0.0/16")), db)
    with TestClient(app, client=("10.9.0.5", 1)) as proxy, TestClient(app, client=("203.0.113.9", 1)) as direct:
        who = {"X-Forwarded-For": "198.51.100.23", **tenant.h("read")}
        assert proxy.get("/api/v1/token", headers=who).status_code == 200
        assert direct.get("/api/v1/token", headers={**who, "X-Forwarded-For": "198.51.100.99"}).status_code == 200
    read_id = db.scalar(select(Token.id).where(Token.prefix == tenant.read[:10]))
    assert [e.address for e in _events(db, read_id) if e.kind == "token.new_address"] == [
        "198.51.100.23",
        "203.0.113.9",
    ]


def test_trusted_proxies_setting_is_checked() -> None:
    assert Settings(trusted_proxies="10.0.0.0/8, ::1").trusted_proxies == ["10.0.0.0/8", "::1"]
    with pytest.raises(ValueError, match=r"'proxy\.example' is not an address or a network"):
        Settings(trusted_proxies="10.0.0.1,proxy.example")


# -- the migration -----------------------------------------------------------------------------------------------


def _down_and_up(url: str) -> None:
    engine = make_engine(url)
    try:
        migrate.upgrade(url)
        columns = {c["name"] for c in inspect(engine).get_columns("tokens")}
        assert {"expires_at", "last_address"} <= columns
        assert "audit_events" in inspect(engine).get_table_names()
        migrate.downgrade(url, "0005")
        inspector = inspect(engine)
        assert "audit_events" not in inspector.get_table_names()
        assert not {"expires_at", "last_address"} & {c["name"] for c in inspector.get_columns("tokens")}
        migrate.upgrade(url)
        assert "audit_events" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_the_migration_goes_down_and_up_on_postgres() -> None:
    name, url = create_database()
    try:
        _down_and_up(url)
    finally:
        drop_database(name)


def test_the_migration_goes_down_and_up_on_sqlite(tmp_path: Path) -> None:
    _down_and_up(f"sqlite:///{tmp_path / 'm.db'}")


def test_on_sqlite_too(tmp_path: Path) -> None:
    """The embedded mode: the same address check (IS NOT for IS DISTINCT FROM), rotation and expiry on SQLite."""
    url = f"sqlite:///{tmp_path / 'embedded.db'}"
    migrate.upgrade(url)
    app = create_app(make_settings(url))
    try:
        with app.state.sessionmaker() as session:
            project = projects.create(session, name="embedded")
            admin_token, admin = auth.create_project_token(session, project_id=project.id, role="admin")
            session.commit()
        tenant = Tenant(name="embedded", admin=admin, submit="", read="")
        with TestClient(app, client=A) as a, TestClient(app, client=B) as b:
            made = _make(a, tenant, expires_in="1h")
            assert _runs(a, tenant, made["token"]).status_code == 200
            assert _runs(b, tenant, made["token"]).status_code == 200
            rotated = _rotate(a, tenant, made["id"], grace="1h").json()
            assert _runs(b, tenant, made["token"]).status_code == 200
            with app.state.sessionmaker() as session:
                _age(session, rotated["id"], expires_at=utcnow() - timedelta(seconds=1))
            assert _runs(b, tenant, rotated["token"]).json()["detail"].startswith("token expired at ")
            events = _audit(b, tenant)["events"]
        kinds = [(e["kind"], e["token_id"], e["address"]) for e in events if e["token_id"] != admin_token.id]
        assert kinds[:4] == [
            ("token.created", rotated["id"], A[0]),
            ("token.rotated", made["id"], A[0]),
            ("token.new_address", made["id"], B[0]),
            ("token.new_address", made["id"], A[0]),
        ]
    finally:
        app.state.engine.dispose()
