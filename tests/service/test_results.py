from __future__ import annotations

import svcdocs as docs
from fastapi.testclient import TestClient
from svcconf import Tenant


def test_first_upload_passes_with_no_baseline(client: TestClient, tenant: Tenant) -> None:
    r = client.post(
        f"/api/v1/projects/{tenant.name}/results", json=docs.upload_body(docs.h200()), headers=tenant.h("submit")
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["verdict"] == "pass"
    assert body["baseline"] is None
    assert body["run_id"] and body["comparison_id"]


def test_ten_percent_slower_fails_naming_the_case(client: TestClient, tenant: Tenant) -> None:
    base = docs.h200()
    url = f"/api/v1/projects/{tenant.name}/results"
    first = client.post(url, json=docs.upload_body(base, commit="a1"), headers=tenant.h("submit")).json()
    case = "sdpa[backend=cudnn,pass=fwd]"
    slow = docs.variant(base, slower=1.10, cases=[case])
    r = client.post(
        url, json=docs.upload_body(slow, branch="feature", commit="b1", base_commit="a1"), headers=tenant.h("submit")
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["verdict"] == "fail", body["comparison"]["findings"]
    assert body["baseline"] == [first["run_id"]] or body["baseline"]
    failing = {f["case"] for f in body["comparison"]["findings"] if f["verdict"] == "fail"}
    assert failing == {case}
