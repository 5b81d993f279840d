"""The trends API gives what the page draws around a case's series: each run's baseline (the level of the runs its
comparison was made against) and the case's minimum effect."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.server import documents as docs
from tests.server.tenants import Tenant

CASE = "sdpa[backend=cudnn,pass=fwd]"


def test_each_point_has_its_baseline_and_the_trend_its_minimum_effect(client: TestClient, tenant: Tenant) -> None:
    commits = [f"{i:02d}" + "b" * 38 for i in range(7)]
    for i, commit in enumerate(commits):
        doc = docs.h200(slower=1.3 if i == 6 else 1.0, cases=[CASE], jitter=0.001 * (i % 3))
        r = client.post(
            f"/api/v1/projects/{tenant.name}/results",
            json=docs.upload_body(doc, commit=commit, ancestors=commits[:i][::-1]),
            headers=tenant.h("submit"),
        )
        assert r.status_code == 201, r.text
    answer = client.get(f"/api/v1/projects/{tenant.name}/trends", params={"case": CASE}, headers=tenant.h("read"))
    assert answer.status_code == 200, answer.text
    trend = answer.json()
    assert trend["min_effect"] == 0.02 and trend["unit"] == "us"
    points = trend["points"]
    assert points[0]["baseline"] is None  # the first run of all was compared with nothing
    assert points[1]["baseline"] == pytest.approx(points[0]["median"])  # its one ancestor with runs
    assert points[6]["median"] / points[6]["baseline"] - 1 == pytest.approx(0.3, abs=0.01)
    assert abs(points[5]["median"] / points[5]["baseline"] - 1) < 0.01
    bandwidth = client.get(
        f"/api/v1/projects/{tenant.name}/trends", params={"case": CASE, "metric": "bandwidth"}, headers=tenant.h()
    ).json()
    assert bandwidth["points"][6]["median"] / bandwidth["points"][6]["baseline"] < 0.8  # GB/s fell with the time
