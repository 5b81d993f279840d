"""A run's baseline is drawn from runs of its own testbed key only: runs measured on another GPU model, stored under
the same testbed name, on the same branch and even the same commit, are never pooled (nearest ancestor, latest
default-branch runs, first run alike). When a run's key has no history, its comparison names the other keys of its
testbed, their device and newest run, in the notes the API returns and the page shows."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from attnprof.core import testbed as keys
from tests.server import documents as docs
from tests.server.tenants import Tenant

H100 = "NVIDIA H100 80GB HBM3"
TESTBED = "gpu-pool"  # one name, uploads from hosts of two GPU models: no worker has keyed it


def _h100(**kw: Any) -> dict[str, Any]:
    """The committed H200 run as if measured on an H100 (its device, testbed meaning and key follow)."""
    doc = docs.h200(**kw)
    env = doc["environment"]
    env["device"]["name"] = H100
    env["testbed"] = {**env["testbed"], "device": H100}
    env["testbed_key"] = keys.testbed_key(env["testbed"])
    return doc


def _up(client: TestClient, tenant: Tenant, doc: dict[str, Any], **kw: Any) -> dict[str, Any]:
    r = client.post(
        f"/api/v1/projects/{tenant.name}/results",
        json=docs.upload_body(doc, testbed=TESTBED, **kw),
        headers=tenant.h("submit"),
    )
    assert r.status_code == 201, r.text
    answer: dict[str, Any] = r.json()
    assert answer["testbed"] == TESTBED
    return answer


def test_runs_of_another_gpu_model_on_one_testbed_branch_and_commit_are_never_pooled(
    client: TestClient, tenant: Tenant
) -> None:
    # The H100 runs read 40% faster: pooled with an H200 candidate, they would fail it.
    h200_m1 = _up(client, tenant, docs.h200(), commit="m1")
    h100_m1 = _up(client, tenant, _h100(slower=0.6), commit="m1")
    h100_m2 = _up(client, tenant, _h100(slower=0.6), commit="m2")
    assert h100_m1["baseline"] is None  # its key's first run: the H200 run of the same commit does not serve
    assert h100_m2["baseline"] == [h100_m1["run_id"]]
    # The nearest ancestor (m2) holds only an H100 run: the H200 pull request is compared with m1's H200 run.
    pr = _up(client, tenant, docs.h200(), branch="pr", commit="p1", base_commit="m2", ancestors=["m1"])
    assert pr["baseline"] == [h200_m1["run_id"]], pr["comparison"]["notes"]
    assert pr["verdict"] == "pass", pr["comparison"]
    assert pr["comparison"]["testbed_baseline"] == [pr["comparison"]["testbed_candidate"]]
    # No base commit: the latest default-branch runs of its key serve, never the newer H100 ones.
    latest = _up(client, tenant, docs.h200(), branch="pr", commit="p2")
    assert latest["baseline"] == [h200_m1["run_id"]]
    # The H100 pull request: H100 runs only.
    pr100 = _up(client, tenant, _h100(slower=0.6), branch="pr", commit="p3", base_commit="m2", ancestors=["m1"])
    assert pr100["baseline"] == [h100_m2["run_id"], h100_m1["run_id"]] and pr100["verdict"] == "pass"
    # A regression on the H200 is still found against its own history.
    slow = _up(client, tenant, docs.h200(slower=1.10), branch="pr", commit="p4", base_commit="m2", ancestors=["m1"])
    assert slow["verdict"] == "fail" and slow["baseline"] == [h200_m1["run_id"]]


def test_the_first_run_of_a_gpu_model_on_a_testbed_names_the_runs_it_was_not_compared_with(
    client: TestClient, tenant: Tenant
) -> None:
    h200 = [_up(client, tenant, docs.h200(), commit=c) for c in ("m1", "m2")]
    first = _up(client, tenant, _h100(slower=0.6), commit="m3", base_commit="m2", ancestors=["m1"])
    assert first["baseline"] is None and first["verdict"] == "pass"  # the first run of its key begins its history
    h200_key = keys.testbed_key(docs.h200()["environment"]["testbed"])
    (note,) = [n for n in first["comparison"]["notes"] if n.startswith("OTHER TESTBED KEY")]
    assert f"key {h200_key} (device NVIDIA H200, driver 580.159.04, mode cuda; newest run {h200[1]['run_id']})" in note
    assert first["comparison"]["testbed_candidate"] in note
    # What the API returns for the comparison holds it too.
    got = client.get(f"/api/v1/projects/{tenant.name}/comparisons/{first['comparison_id']}", headers=tenant.h("read"))
    assert got.status_code == 200 and note in got.json()["document"]["notes"]
    # With history of its own key, the other keys are no longer named: they are not what decided.
    second = _up(client, tenant, _h100(slower=0.6), commit="m4", base_commit="m3")
    assert second["baseline"] == [first["run_id"]]
    assert not any(n.startswith("OTHER TESTBED KEY") for n in second["comparison"]["notes"])


def test_a_baseline_comes_from_its_own_testbed_and_from_another_of_its_key_only_when_it_has_none(
    client: TestClient, tenant: Tenant
) -> None:
    """Two testbeds of one device key (two pools of one GPU model, a matrix's two CPU testbeds on one machine): each
    keeps its own history; a testbed with none yet is compared with the other's, and the comparison says so."""

    def up(testbed: str, doc: dict[str, Any], **kw: Any) -> dict[str, Any]:
        r = client.post(
            f"/api/v1/projects/{tenant.name}/results",
            json=docs.upload_body(doc, testbed=testbed, **kw),
            headers=tenant.h("submit"),
        )
        assert r.status_code == 201, r.text
        answer: dict[str, Any] = r.json()
        return answer

    a1 = up("pool-a", docs.h200(), commit="m1")
    b1 = up("pool-b", docs.h200(slower=1.3), commit="m1")  # no history of its own: pool-a's run of its key serves
    assert b1["baseline"] == [a1["run_id"]]
    assert any("runs of testbed(s) pool-a, on the same device key, serve" in n for n in b1["comparison"]["notes"])
    b2 = up("pool-b", docs.h200(slower=1.3), commit="m2", base_commit="m1")
    assert b2["baseline"] == [b1["run_id"]] and b2["verdict"] == "pass"  # its own history now: the same speed
    a2 = up("pool-a", docs.h200(), commit="m2", base_commit="m1")
    assert a2["baseline"] == [a1["run_id"]] and a2["verdict"] == "pass"  # never pool-b's slower runs
