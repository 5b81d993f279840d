"""A hostile job through the real stack (service, Celery profile workers, the bubblewrap jail): every attack fails,
and the next job, another project's, runs untouched. The jobs' code is in ``hostile_code``."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from tests.hostile_code import ATTACKS, HOSTILE, MARKER, VICTIM, attack_args, daemons_alive, findings, leaked
from tests.profiling_support import tar_gz
from tests.worker.stack import (
    SDPA_CASE,
    Stack,
    custom_case,
    seed_project,
    suite,
)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")


def test_a_hostile_job_fails_every_attack_and_the_next_tenant_is_untouched(stack: Stack) -> None:
    canary = Path.home() / f".{MARKER}"
    canary.write_text("the worker's secret")
    scratch_root = stack.tmp / "scratch-main"
    port = stack.url.rsplit(":", 1)[1]
    redis_port = stack.env["ATTNPROF_BROKER_URL"].rsplit(":", 1)[1].split("/")[0]
    args = attack_args(canary=canary, scratch_root=scratch_root, service_port=port, redis_port=redis_port)
    try:
        hostile = stack.submit(
            suite("hostile", custom_case("attack", "evil.targets:attack", args)), testbed="tb-main", files=HOSTILE
        )
        job = stack.wait_status(hostile, ("failed", "done"), timeout_s=120)
    finally:
        canary.unlink()
    found = findings(job["reason"])
    assert found is not None, job["reason"]
    assert set(found) == set(ATTACKS)
    assert not leaked(found), leaked(found)
    assert not (scratch_root / MARKER).exists() and not Path("/usr", MARKER).exists()

    # The daemon it left behind died with it: no process carries its marker.
    time.sleep(2)
    assert not daemons_alive()

    # Another project's job on the same workers runs as if nothing had happened.
    victim_project, victim_token, _ = seed_project(stack.database_url, "next-tenant", ())
    spec = suite(
        "victim",
        SDPA_CASE + '[[cases]]\nname = "mine"\ntarget = "honest.kern:make_case"\nq_heads = 2\n'
        "seq_q = 64\nhead_dim = 32\n",
    )
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {victim_token}"}, timeout=30) as victim:
        r = victim.post(
            f"/api/v1/projects/{victim_project}/jobs",
            data={"testbed": "tb-main", "branch": "main", "commit": "honest01"},
            files={"spec": ("attnprof.toml", spec.encode()), "bundle": ("b.tar.gz", tar_gz(VICTIM))},
        )
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        deadline = time.monotonic() + 120
        while (done := victim.get(f"/api/v1/jobs/{job_id}").json())["status"] not in ("done", "failed", "timed_out"):
            assert time.monotonic() < deadline, done
            time.sleep(0.5)
    assert done["status"] == "done", done
    assert done["attempts"] == 1
    assert not list(scratch_root.glob("*/src/sitecustomize.py"))
