from __future__ import annotations

from fastapi.testclient import TestClient

from attnprof.server.app import create_app
from attnprof.server.config import Limits, RateLimit
from tests.server import documents as docs
from tests.server.stack import bind, make_settings
from tests.server.tenants import Tenant


def _up(client: TestClient, tenant: Tenant, role: str = "submit", **kw):
    return client.post(
        f"/api/v1/projects/{tenant.name}/results", json=docs.upload_body(docs.cpu(), **kw), headers=tenant.h(role)
    )


def test_401_without_bad_or_revoked_token(client: TestClient, tenant: Tenant) -> None:
    url = f"/api/v1/projects/{tenant.name}/runs"
    assert client.get(url).status_code == 401
    r = client.get(url, headers={"Authorization": "Bearer ap_nope"})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert client.get(url, headers={"Authorization": "Basic abc"}).status_code == 401
    made = client.post(f"/api/v1/projects/{tenant.name}/tokens", json={"role": "read"}, headers=tenant.h()).json()
    h = {"Authorization": f"Bearer {made['token']}"}
    assert client.get(url, headers=h).status_code == 200
    assert client.delete(f"/api/v1/projects/{tenant.name}/tokens/{made['id']}", headers=tenant.h()).status_code == 200
    assert client.get(url, headers=h).status_code == 401


def test_403_for_a_role_that_is_not_enough(client: TestClient, tenant: Tenant) -> None:
    r = _up(client, tenant, role="read")
    assert r.status_code == 403 and r.json()["error"] == "forbidden"
    assert (
        client.post(
            f"/api/v1/projects/{tenant.name}/tokens", json={"role": "read"}, headers=tenant.h("submit")
        ).status_code
        == 403
    )


def test_404_for_another_projects_objects(client: TestClient, tenant: Tenant, other: Tenant) -> None:
    run_id = _up(client, tenant).json()["run_id"]
    # another project's token on this project's URL: as if it did not exist
    r = client.get(f"/api/v1/projects/{tenant.name}/runs/{run_id}", headers=other.h())
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    assert client.get(f"/api/v1/projects/{other.name}/runs/{run_id}", headers=other.h()).status_code == 404
    assert client.get("/api/v1/projects/nope/runs", headers=tenant.h()).status_code == 404
    assert client.get(f"/api/v1/projects/{tenant.name}/runs/{run_id}", headers=tenant.h("read")).status_code == 200


def test_422_names_the_field_and_changes_nothing(client: TestClient, tenant: Tenant) -> None:
    doc = docs.cpu()
    doc["cases"][0]["latency_us"]["median"] = -1
    r = client.post(f"/api/v1/projects/{tenant.name}/results", json=docs.upload_body(doc), headers=tenant.h("submit"))
    assert r.status_code == 422
    assert "cases.0.latency_us.median" in r.json()["detail"]
    r = client.post(
        f"/api/v1/projects/{tenant.name}/results", json={"result": {}, "commit": "x"}, headers=tenant.h("submit")
    )
    assert r.status_code == 422 and "branch" in r.json()["detail"]
    bad_schema = docs.cpu()
    bad_schema["schema"] = "other/v9"
    r = client.post(
        f"/api/v1/projects/{tenant.name}/results", json=docs.upload_body(bad_schema), headers=tenant.h("submit")
    )
    assert r.status_code == 422 and "schema" in r.json()["detail"]
    assert client.get(f"/api/v1/projects/{tenant.name}/runs", headers=tenant.h()).json()["runs"] == []


def test_duplicate_document_is_409(client: TestClient, tenant: Tenant) -> None:
    doc = docs.cpu()
    url = f"/api/v1/projects/{tenant.name}/results"
    assert client.post(url, json=docs.upload_body(doc), headers=tenant.h("submit")).status_code == 201
    # The same document from another commit (the very same upload again is a retry: test_results).
    assert client.post(url, json=docs.upload_body(doc, commit="c1"), headers=tenant.h("submit")).status_code == 409


def test_413_for_a_body_over_the_limit(pg_url, db, tenant: Tenant) -> None:
    app = bind(create_app(make_settings(pg_url, limits=Limits(json_body_bytes=50_000))), db)
    with TestClient(app) as client:
        r = _up(client, tenant)
        assert r.status_code == 413 and r.json()["error"] == "payload_too_large"

        # chunked, no Content-Length: counted as it streams
        def gen():
            yield b'{"result": ' + b" " * 60_000

        r = client.post(
            f"/api/v1/projects/{tenant.name}/results",
            content=gen(),
            headers={**tenant.h("submit"), "Content-Type": "application/json"},
        )
        assert r.status_code == 413


def test_429_with_retry_after(pg_url, db, tenant: Tenant) -> None:
    app = bind(create_app(make_settings(pg_url, rate_limit=RateLimit(requests_per_minute=6, burst=2))), db)
    with TestClient(app) as client:
        codes = [client.get(f"/api/v1/projects/{tenant.name}/runs", headers=tenant.h("read")) for _ in range(3)]
        assert [c.status_code for c in codes] == [200, 200, 429]
        assert int(codes[2].headers["Retry-After"]) >= 1
        assert codes[2].json()["error"] == "rate_limited"
        # per token: another token of the same project is not limited
        assert client.get(f"/api/v1/projects/{tenant.name}/runs", headers=tenant.h("admin")).status_code == 200


def test_health_ready_metrics(client: TestClient, tenant: Tenant) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    client.get(f"/api/v1/projects/{tenant.name}/runs", headers=tenant.h())
    text = client.get("/metrics").text
    assert 'attnprof_http_requests_total{method="GET",route="/api/v1/projects/{project}/runs",status="200"}' in text
    assert "attnprof_http_request_duration_seconds_bucket" in text
    assert 'attnprof_jobs{state="queued"}' in text


def test_readyz_503_when_the_broker_is_down(pg_url, db) -> None:
    app = bind(create_app(make_settings(pg_url, broker_url="redis://127.0.0.1:1/0")), db)
    with TestClient(app) as client:
        r = client.get("/readyz")
        assert r.status_code == 503 and "broker" in r.json()["detail"]


def test_whoami(client: TestClient, tenant: Tenant) -> None:
    assert client.get("/api/v1/token", headers=tenant.h("read")).json() == {
        "role": "read",
        "project": tenant.name,
        "testbed": None,
    }
