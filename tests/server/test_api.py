from __future__ import annotations

import gzip

from fastapi.testclient import TestClient

from tests.server import documents as docs
from tests.server.tenants import Tenant


def _up(client: TestClient, tenant: Tenant, doc: dict, **kw) -> dict:
    r = client.post(
        f"/api/v1/projects/{tenant.name}/results", json=docs.upload_body(doc, **kw), headers=tenant.h("submit")
    )
    assert r.status_code == 201, r.text
    return r.json()


CASE = "sdpa[backend=cudnn,pass=fwd]"


def test_trends_and_kernel_trends_with_paging(client: TestClient, tenant: Tenant) -> None:
    ups = [_up(client, tenant, docs.h200(jitter=0.001 * i), commit=f"c{i}", testbed="h200") for i in range(5)]
    _up(client, tenant, docs.h200(), branch="feature", commit="f1", testbed="h200")
    url = f"/api/v1/projects/{tenant.name}/trends"
    r = client.get(url, params={"case": CASE, "limit": 3, "testbed": "h200"}, headers=tenant.h("read"))
    assert r.status_code == 200, r.text
    page = r.json()
    assert [p["run_id"] for p in page["points"]] == [u["run_id"] for u in ups[:3]]
    assert page["unit"] == "us" and page["points"][0]["p25"] <= page["points"][0]["median"] <= page["points"][0]["p75"]
    rest = client.get(url, params={"case": CASE, "cursor": page["next"]}, headers=tenant.h("read")).json()
    assert [p["run_id"] for p in rest["points"]] == [u["run_id"] for u in ups[3:]] and rest["next"] is None
    bw = client.get(url, params={"case": CASE, "metric": "bandwidth"}, headers=tenant.h("read")).json()
    assert bw["unit"] == "GB/s" and bw["points"][0]["median"] > 0
    feat = client.get(url, params={"case": CASE, "branch": "feature"}, headers=tenant.h("read")).json()
    assert len(feat["points"]) == 1
    key = docs.h200()["cases"][0]["kernels"][0]["key"]
    k = client.get(f"{url}/kernels", params={"case": CASE, "kernel": key}, headers=tenant.h("read")).json()
    assert len(k["points"]) == 5 and k["points"][0]["phase"]
    assert client.get(url, params={"case": CASE, "metric": "nope"}, headers=tenant.h()).status_code == 422
    assert client.get(url, params={"case": CASE, "testbed": "none"}, headers=tenant.h()).status_code == 404
    assert (
        client.get(
            url,
            params={"case": CASE, "since": "2030-01-01T00:00:00Z", "until": "2020-01-01T00:00:00Z"},
            headers=tenant.h(),
        ).status_code
        == 400
    )


def test_baseline_comes_from_the_nearest_ancestor_and_rules_apply(client: TestClient, tenant: Tenant) -> None:
    base = docs.h200()
    a1 = _up(client, tenant, base, commit="a1")
    a2 = _up(client, tenant, docs.h200(), commit="a2")
    cand = _up(client, tenant, docs.h200(), branch="pr", commit="p1", base_commit="a1", ancestors=["a0"])
    assert cand["baseline"] and cand["comparison"]["baseline"] == [base["run"]["id"]]
    assert any("ancestor a1" in n for n in cand["comparison"]["notes"])
    # no ancestor with runs: the latest default-branch runs serve, and the notes say so
    cand2 = _up(client, tenant, docs.h200(), branch="pr", commit="p2", base_commit="zz")
    assert any("latest" in n for n in cand2["comparison"]["notes"])
    assert len(cand2["comparison"]["baseline"]) == 2
    bl = f"/api/v1/projects/{tenant.name}/baselines"
    # exclusion needs a reason; excluded runs never serve
    assert client.post(f"{bl}/exclusions", json={"run_id": a1["run_id"]}, headers=tenant.h()).status_code == 422
    assert (
        client.post(
            f"{bl}/exclusions", json={"run_id": a1["run_id"], "reason": "bad node"}, headers=tenant.h("submit")
        ).status_code
        == 403
    )
    assert (
        client.post(
            f"{bl}/exclusions", json={"run_id": a1["run_id"], "reason": "bad node"}, headers=tenant.h()
        ).status_code
        == 201
    )
    cand3 = _up(client, tenant, docs.h200(), branch="pr", commit="p3", base_commit="a1")
    assert a1["run_id"] not in str(cand3["comparison"]["notes"]) and len(cand3["comparison"]["baseline"]) >= 1
    # a pin overrides everything
    assert client.post(f"{bl}/pins", json={"run_id": a2["run_id"]}, headers=tenant.h()).status_code == 201
    cand4 = _up(client, tenant, docs.h200(), branch="pr", commit="p4", base_commit="a1")
    assert len(cand4["baseline"]) == 1 and cand4["baseline"][0] != a1["run_id"]
    rules = client.get(bl, headers=tenant.h("read")).json()["rules"]
    assert {r["kind"] for r in rules} == {"pin", "exclude"}
    assert client.delete(f"{bl}/pin/{a2['run_id']}", headers=tenant.h()).status_code == 204
    assert client.delete(f"{bl}/pin/{a2['run_id']}", headers=tenant.h()).status_code == 404


def test_accepting_a_change_makes_the_candidate_the_baseline(client: TestClient, tenant: Tenant) -> None:
    url = f"/api/v1/projects/{tenant.name}/results"
    _up(client, tenant, docs.h200(), commit="a1")
    slow = _up(client, tenant, docs.h200(slower=1.2), branch="pr", commit="p1", base_commit="a1")
    assert slow["verdict"] == "fail"
    bl = f"/api/v1/projects/{tenant.name}/baselines/accepted"
    assert client.post(bl, json={"run_id": slow["run_id"], "reason": "intended"}, headers=tenant.h()).status_code == 201
    again = client.post(
        url,
        json=docs.upload_body(docs.h200(slower=1.2), branch="pr", commit="p2", base_commit="a1"),
        headers=tenant.h("submit"),
    ).json()
    assert again["verdict"] != "fail", again["comparison"]["notes"]
    assert again["baseline"] == [slow["run_id"]]


def test_runs_and_traces(client: TestClient, tenant: Tenant, other: Tenant) -> None:
    up = _up(client, tenant, docs.cpu())
    runs = client.get(f"/api/v1/projects/{tenant.name}/runs", headers=tenant.h("read")).json()
    assert [r["id"] for r in runs["runs"]] == [up["run_id"]]
    one = client.get(f"/api/v1/projects/{tenant.name}/runs/{up['run_id']}", headers=tenant.h("read")).json()
    assert one["document"]["schema"] == "attnprof.result/v1"
    name = next(c["trace"] for c in docs.cpu()["cases"] if c["trace"])
    url = f"/api/v1/projects/{tenant.name}/runs/{up['run_id']}/traces/{name}"
    blob = gzip.compress(b'{"traceEvents": []}')
    assert client.put(url, content=blob, headers=tenant.h("read")).status_code == 403
    assert client.put(url, content=b"plain", headers=tenant.h("submit")).status_code == 422
    assert client.put(url + "x", content=blob, headers=tenant.h("submit")).status_code == 404
    assert client.put(url, content=blob, headers=tenant.h("submit")).status_code == 204
    assert client.get(url, headers=tenant.h("read")).content == blob
    assert client.get(url.replace(tenant.name, other.name), headers=other.h()).status_code == 404
    cmp = client.get(f"/api/v1/projects/{tenant.name}/comparisons/{up['comparison_id']}", headers=tenant.h("read"))
    assert cmp.status_code == 200 and cmp.json()["verdict"] == "pass"


def test_noise_floor_is_learnt_and_alerts_found(client: TestClient, tenant: Tenant) -> None:
    ups = []
    for i in range(12):
        slow = 1.0 if i < 6 else 1.3
        jitter = ((i * 7) % 5 - 2) * 0.002
        ups.append(_up(client, tenant, docs.h200(slower=slow, cases=[CASE], jitter=jitter), commit=f"m{i}"))
    settings = ups[-1]["comparison"]["settings"]
    assert settings["noise_floor_source"] == "argument"
    assert 0.005 <= settings["noise_floor"] <= 0.10
    alerts = client.get(f"/api/v1/projects/{tenant.name}/alerts", headers=tenant.h("read")).json()["alerts"]
    found = [a for a in alerts if a["case_id"] == CASE]
    assert found and found[0]["run_id"] == ups[6]["run_id"] and found[0]["change"] > 0.2
