"""Host health through the worker API: the canaries of a testbed's hosts make its band; a host outside it (a 15%
bandwidth spread, clocks capped, a thermal slowdown) is quarantined: its workers are not live, its claims are
refused and the job goes back to the queue, its runs since its last passing canary are marked and serve no
baseline, a job waiting on it says why, each project using the testbed is told through its webhook; a canary that
passes again releases it. The band's rule is visible with its numbers."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from attnprof.contract.worker_api import host_of
from attnprof.server.baselines import repository as baseline_rows
from attnprof.server.comparisons.models import AlertWebhook
from attnprof.server.config import AlertWebhooks
from attnprof.server.db import make_sessionmaker, utcnow
from attnprof.server.hosts import band, notices
from attnprof.server.jobs.models import Job
from attnprof.server.projects import repository as projects
from attnprof.server.runs.models import Run
from attnprof.server.testbeds.models import Canary, Host, HostNotice
from tests.claiming import bearer, claim_secret
from tests.server import documents as docs
from tests.server.stack import REDIS_URL
from tests.server.tenants import Tenant

SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "prefill"\ntarget = "sdpa"\nq_heads = 4\nseq_q = 128\nhead_dim = 64\n'
GOOD = {
    "copy_gbps": 4300.0,
    "matmul_tflops_fp32": 50.0,
    "matmul_tflops_fp16": 790.0,
    "matmul_tflops_bf16": 790.0,
    "launch_us": 2.5,
    "attention_us": 610.0,
}
CLOCKS = {"sm_mhz_median": 1980.0, "sm_mhz_min": 1965.0, "throttle_reasons": ["sw_power_cap"], "samples": 40}
TOL = band.Tolerances(0.10, 1.0)


def _canary(
    client: TestClient, wtok: str, testbed: str, worker: str, *, scale: dict[str, float] | None = None, **clocks: Any
) -> dict[str, Any]:
    figures = {k: v * (scale or {}).get(k, 1.0) for k, v in GOOD.items()}
    body = {
        "worker": worker,
        "testbed": testbed,
        "device": "NVIDIA H100 80GB HBM3",
        "mode": "cuda",
        "figures": figures,
        "clocks": {**CLOCKS, **clocks},
        "method": {"copy_gbps": "device copy of 2048 MiB"},
        "seconds": 6.5,
    }
    r = client.post("/internal/canary", json=body, headers=bearer(wtok))
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def _submit(client: TestClient, tenant: Tenant, testbed: str) -> str:
    r = client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode())},
        data={"testbed": testbed, "branch": "main", "commit": uuid.uuid4().hex[:12]},
        headers=tenant.h("submit"),
    )
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _run_on(client: TestClient, tenant: Tenant, testbed: str, wtok: str, worker: str) -> str:
    """A job of ``tenant`` claimed by ``worker`` and given a result: its run's id."""
    job_id = _submit(client, tenant, testbed)
    body = {"attempt": 1, "worker": worker, "secret": claim_secret(REDIS_URL, testbed, job_id)}
    r = client.post(f"/internal/jobs/{job_id}/claim", json=body, headers=bearer(wtok))
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    r = client.post(
        f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": docs.h200()}, headers=bearer(token)
    )
    assert r.status_code == 200, r.text
    return str(r.json()["run_id"])


def _alive(client: TestClient, wtok: str, testbed: str, worker: str) -> int:
    r = client.post("/internal/alive", json={"worker": worker, "testbed": testbed}, headers=bearer(wtok))
    assert r.status_code == 200, r.text
    return int(r.json()["live_workers"])


# --- the band, as a rule --------------------------------------------------------------------------------------


def test_the_band_is_the_best_hosts_median_less_the_tolerance_and_says_so() -> None:
    history = [(h, {"copy_gbps": v, "launch_us": 3.0}) for h in ("a", "b", "c") for v in (3300.0, 3350.0, 3400.0)]
    history += [("d", {"copy_gbps": 2850.0, "launch_us": 2.0})] * 3  # one slow host in the history does not set it
    bounds = band.bands(history, TOL)
    copy = bounds["copy_gbps"]
    assert copy.reference == 3350.0 and copy.reference_host == "a" and copy.hosts == 4 and copy.canaries == 12
    assert copy.bound == pytest.approx(3015.0)
    assert "copy_gbps >= 3,015 GB/s (0.90 x 3,350, the median of host a, the best of 4 host(s)" in copy.rule()
    assert bounds["launch_us"].reference == 2.0 and bounds["launch_us"].bound == 4.0  # lower is better: the fastest
    # A 15% bandwidth spread fails; 5% passes; a thermal slowdown fails whatever the figures.
    assert band.judge({"copy_gbps": 3350 * 0.85}, [], bounds)[0].startswith("copy_gbps 2,848 GB/s is 15% under")
    assert band.judge({"copy_gbps": 3350 * 0.95, "launch_us": 3.9}, ["sw_power_cap"], bounds) == []
    assert band.judge({}, ["hw_thermal_slowdown"], bounds) == ["throttled while measuring: hw_thermal_slowdown"]


def test_a_workers_host_is_its_name_without_the_process() -> None:
    assert host_of("node-3/pid812/gpu0") == "node-3/gpu0"
    assert host_of("node-3/pid812") == "node-3"
    assert host_of("pid7-box/pid812/gpu1") == "pid7-box/gpu1"


# --- through the service --------------------------------------------------------------------------------------


def test_a_host_fifteen_percent_slower_is_quarantined_and_released(
    client: TestClient, db: Session, tenant: Tenant, worker_token: tuple[str, str]
) -> None:
    testbed, wtok = worker_token
    first = [_canary(client, wtok, testbed, f"node-{h}/pid{i}/gpu0") for i, h in enumerate("abc")]
    assert [a["state"] for a in first] == ["learning", "learning", "learning"]
    assert _canary(client, wtok, testbed, "node-a/pid9/gpu0")["state"] == "healthy"  # a restart: the same host
    for h in "abcd":
        _alive(client, wtok, testbed, f"node-{h}/pid1/gpu0")
    marked_before = _run_on(client, tenant, testbed, wtok, "node-d/pid1/gpu0")
    assert _canary(client, wtok, testbed, "node-d/pid1/gpu0")["state"] == "healthy"
    runs = [_run_on(client, tenant, testbed, wtok, "node-d/pid1/gpu0") for _ in range(2)]
    other = _run_on(client, tenant, testbed, wtok, "node-a/pid1/gpu0")

    answer = _canary(client, wtok, testbed, "node-d/pid1/gpu0", scale={"copy_gbps": 0.85, "attention_us": 1.15})
    assert answer["state"] == "quarantined" and answer["host"] == "node-d/gpu0" and answer["retry_s"] == 300.0
    assert answer["reasons"][0].startswith("attention_us 702 us is 15% over the best host's 610")
    assert (
        "copy_gbps 3,655 GB/s is 15% under the best host's 4,300: outside copy_gbps >= 3,784 GB/s"
        in (answer["reasons"][1])
    )
    db.expire_all()
    host = db.scalars(select(Host).where(Host.name == "node-d/gpu0")).one()
    assert host.state == "quarantined" and host.quarantined_at is not None and "copy_gbps" in (host.reason or "")
    # Its runs since its last passing canary are marked and serve no baseline; the others' and older ones are not.
    notes = {r.id: r.host_note for r in db.scalars(select(Run).where(Run.id.in_([*runs, other, marked_before])))}
    assert all(notes[r] and "host node-d/gpu0 failed its canary" in notes[r] for r in runs)  # type: ignore[operator]
    assert notes[other] is None and notes[marked_before] is None
    run = db.get(Run, other)
    assert run is not None
    window = baseline_rows.Window(run.project_id, run.testbed_key, utcnow() + timedelta(seconds=1))
    served = {r.id for r in baseline_rows.latest_runs(db, window, branch="main", limit=50)}
    assert other in served and marked_before in served and not served & set(runs)

    # Its worker is not live; its claim is refused and the job waits again for another host.
    assert _alive(client, wtok, testbed, "node-d/pid1/gpu0") == 3
    job_id = _submit(client, tenant, testbed)
    secret = claim_secret(REDIS_URL, testbed, job_id)
    r = client.post(
        f"/internal/jobs/{job_id}/claim",
        json={"attempt": 1, "worker": "node-d/pid1/gpu0", "secret": secret},
        headers=bearer(wtok),
    )
    assert r.status_code == 409 and "host node-d/gpu0 is quarantined" in r.json()["detail"], r.text
    db.expire_all()
    job = db.get(Job, job_id)
    assert job is not None and job.status == "queued" and job.attempts == 0
    assert claim_secret(REDIS_URL, testbed, job_id) != secret  # offered again, with a new secret

    # Back inside the band: released, live again.
    assert _canary(client, wtok, testbed, "node-d/pid1/gpu0")["state"] == "healthy"
    db.expire_all()
    assert db.scalars(select(Host).where(Host.name == "node-d/gpu0")).one().state == "healthy"
    assert _alive(client, wtok, testbed, "node-d/pid1/gpu0") == 4


def test_capped_clocks_and_thermal_slowdown_fail_the_canary(client: TestClient, worker_token: tuple[str, str]) -> None:
    testbed, wtok = worker_token
    for h in "abc":
        _canary(client, wtok, testbed, f"n{h}/pid1/gpu0")
    capped = _canary(
        client,
        wtok,
        testbed,
        "nx/pid1/gpu0",
        scale={"matmul_tflops_bf16": 0.8, "matmul_tflops_fp16": 0.8},
        sm_mhz_median=1590.0,
    )
    assert capped["state"] == "quarantined"
    assert any(r.startswith("sm_mhz_median 1,590 MHz is 20% under the best host's 1,980") for r in capped["reasons"])
    assert any(r.startswith("matmul_tflops_bf16 632 TFLOP/s is 20% under") for r in capped["reasons"])
    hot = _canary(client, wtok, testbed, "ny/pid1/gpu0", throttle_reasons=["sw_power_cap", "hw_thermal_slowdown"])
    assert hot["state"] == "quarantined" and hot["reasons"] == ["throttled while measuring: hw_thermal_slowdown"]


def test_a_job_waiting_on_a_testbed_whose_hosts_are_all_quarantined_says_why(
    client: TestClient, tenant: Tenant, worker_token: tuple[str, str]
) -> None:
    testbed, wtok = worker_token
    for h in "abc":
        _canary(client, wtok, testbed, f"m{h}/pid1/gpu0")
    assert _canary(client, wtok, testbed, "only/pid1/gpu0", scale={"copy_gbps": 0.7})["state"] == "quarantined"
    _alive(client, wtok, testbed, "only/pid1/gpu0")
    job_id = _submit(client, tenant, testbed)
    notice = client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()["notice"]
    assert notice.startswith(f"every live worker of testbed {testbed} is on a quarantined host (only/gpu0: copy_gbps")
    assert notice.endswith("the job waits in the queue until a host passes its canary again")


def test_a_canary_for_another_testbed_or_with_unknown_figures_is_refused(
    client: TestClient, db: Session, worker_token: tuple[str, str]
) -> None:
    testbed, wtok = worker_token
    base = {"worker": "w/pid1", "device": "cpu", "mode": "cpu", "seconds": 1.0}
    other = client.post(
        "/internal/canary", json={**base, "testbed": "elsewhere", "figures": GOOD}, headers=bearer(wtok)
    )
    assert other.status_code == 409 and "serves testbed" in other.json()["detail"]
    odd = client.post(
        "/internal/canary", json={**base, "testbed": testbed, "figures": {"pi": 3.14}}, headers=bearer(wtok)
    )
    assert odd.status_code == 422 and "unknown figure(s) ['pi']" in odd.text
    negative = client.post(
        "/internal/canary", json={**base, "testbed": testbed, "figures": {"copy_gbps": -1}}, headers=bearer(wtok)
    )
    assert negative.status_code == 422 and "figures.copy_gbps" in negative.text
    assert db.scalars(select(Canary).where(Canary.worker == "w/pid1")).all() == []  # nothing stored


# --- the webhook ----------------------------------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    got: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    finally:
        server.shutdown()
        server.server_close()


def test_projects_using_the_testbed_are_told_through_their_webhook(
    client: TestClient,
    db: Session,
    tenant: Tenant,
    other: Tenant,
    worker_token: tuple[str, str],
    receiver: tuple[str, list[dict[str, Any]]],
) -> None:
    url, got = receiver
    testbed, wtok = worker_token
    ids = {t.name: projects.get_by_name(db, t.name).id for t in (tenant, other)}  # type: ignore[union-attr]
    for t in (tenant, other):
        db.add(AlertWebhook(project_id=ids[t.name], url=url, secret="s" * 32))
    db.commit()
    for h in "abc":
        _canary(client, wtok, testbed, f"k{h}/pid1/gpu0")
    _run_on(client, tenant, testbed, wtok, "kd/pid1/gpu0")  # only tenant used the testbed
    _canary(client, wtok, testbed, "kd/pid1/gpu0", scale={"copy_gbps": 0.8})
    db.expire_all()
    owed = db.scalars(select(HostNotice).where(HostNotice.host == "kd/gpu0")).all()
    assert [(n.project_id, n.kind, n.runs_marked) for n in owed] == [(ids[tenant.name], "quarantined", 1)]
    cfg = AlertWebhooks(allow_networks=["127.0.0.0/8"])
    sessions = make_sessionmaker(db.get_bind())  # type: ignore[arg-type]
    counts = notices.deliver_owed(sessions, cfg, "http://attnprof.test", [owed[0].id])
    assert counts["host_notices_delivered"] == 1, counts
    body = got[-1]
    assert body["text"].startswith(f"Host kd/gpu0 of testbed {testbed} is quarantined: copy_gbps")
    assert body["host"]["runs_marked"] == 1 and body["host"]["url"].endswith(f"/ui/p/{tenant.name}/fleet")
    assert notices.deliver_owed(sessions, cfg, "http://attnprof.test", [owed[0].id])["host_notices_delivered"] == 0
    _canary(client, wtok, testbed, "kd/pid1/gpu0")
    db.expire_all()
    released = db.scalars(select(HostNotice).where(HostNotice.kind == "released", HostNotice.host == "kd/gpu0")).one()
    assert notices.deliver_owed(sessions, cfg, "http://attnprof.test", [released.id])["host_notices_delivered"] == 1
    assert got[-1]["text"] == f"Host kd/gpu0 of testbed {testbed} is back: it {released.reason}"


def test_the_hosts_and_their_band_are_read_through_the_api(
    client: TestClient, tenant: Tenant, worker_token: tuple[str, str]
) -> None:
    testbed, wtok = worker_token
    for h in "abc":
        _canary(client, wtok, testbed, f"r{h}/pid1/gpu0")
    _canary(client, wtok, testbed, "rd/pid1/gpu0", scale={"copy_gbps": 0.8})
    r = client.get(f"/api/v1/testbeds/{testbed}/hosts", headers=tenant.h("read"))
    assert r.status_code == 200, r.text
    got = r.json()
    states = {h["name"]: h["state"] for h in got["hosts"]}
    assert states == {"ra/gpu0": "learning", "rb/gpu0": "learning", "rc/gpu0": "learning", "rd/gpu0": "quarantined"}
    held = next(h for h in got["hosts"] if h["name"] == "rd/gpu0")
    assert held["last_canary"]["figures"]["copy_gbps"] == 4300.0 * 0.8 and held["reason"].startswith("copy_gbps")
    copy = got["band"]["cuda"]["copy_gbps"]
    assert copy["reference"] == 4300.0 and copy["bound"] == pytest.approx(3784.0) and copy["hosts"] == 3
    assert copy["rule"].startswith("copy_gbps >= 3,784 GB/s (0.88 x 4,300, the median of host ra/gpu0")
    assert got["band"]["cuda"]["attention_us"]["rule"].startswith("attention_us <= 693 us (610 / 0.88")
    assert got["canary_seconds_30d"] == pytest.approx(4 * 6.5)
    assert client.get("/api/v1/testbeds/nowhere/hosts", headers=tenant.h("read")).status_code == 404
    assert client.get(f"/api/v1/testbeds/{testbed}/hosts").status_code == 401
