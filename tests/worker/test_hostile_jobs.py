"""A hostile job through the real stack (service, Celery profile workers, the bubblewrap jail): every attack fails,
and the next job, another project's, runs untouched.

The hostile suite's factory attacks from inside the profiler, then raises with what it found, so its findings come
back as the job's failure reason (the only channel out of the jail besides the result document).
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import time
from pathlib import Path

import httpx
import pytest
from profiling_support import tar_gz
from wkstack import (  # noqa: F401 (the fixtures)
    SDPA_CASE,
    Stack,
    custom_case,
    db_fixture,
    engine_fixture,
    pg_url_fixture,
    seed_project,
    stack_fixture,
    suite,
)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")

MARKER = "attnprof-hostile-" + secrets.token_hex(4)

HOSTILE = {
    "evil/__init__.py": b"",
    "evil/targets.py": f'''import glob, json, os, socket, sys, time

MARKER = "{MARKER}"


def _try(found, what, fn):
    try:
        got = fn()
        found[what] = "LEAKED: " + str(got)[:200]
    except Exception as e:
        found[what] = "refused: " + type(e).__name__


def _connect(port):
    socket.create_connection(("127.0.0.1", int(port)), timeout=2).close()
    return "connected"


def _daemon(scratch_root):
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    sys.argv[0] = MARKER
    for _ in range(60):  # a minute of trying to plant code in every job folder it can find
        for folder in glob.glob(scratch_root + "/*/src") + glob.glob("/job/../*/src"):
            try:
                with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
                    f.write("raise SystemExit('planted')")
            except OSError:
                pass
        time.sleep(1)
    os._exit(0)


def attack(params, device):
    a = params["args"]
    found = {{}}
    def environ():
        leaked = []
        for path in glob.glob("/proc/*/environ"):
            try:
                text = open(path, "rb").read()
            except OSError:
                continue
            if b"ATTNPROF_" in text:
                leaked.append(path)
        if leaked:
            return leaked
        raise PermissionError("no ATTNPROF_ variable in any readable environ")
    _try(found, "environ", environ)
    _try(found, "worker home", lambda: open(a["canary"]).read())
    _try(found, "scratch root", lambda: os.listdir(a["scratch_root"]))
    _try(found, "shadow", lambda: open("/etc/shadow").read())
    _try(found, "redis", lambda: _connect(a["redis_port"]))
    _try(found, "postgres", lambda: _connect(5432))
    _try(found, "service", lambda: _connect(a["service_port"]))
    _try(found, "write usr", lambda: open("/usr/" + MARKER, "w").write("x"))
    _try(found, "write scratch root", lambda: open(a["scratch_root"] + "/" + MARKER, "w").write("x"))
    _daemon(a["scratch_root"])
    raise RuntimeError("REPORT " + json.dumps(found))
'''.encode(),
}

VICTIM = {
    "honest/__init__.py": b"",
    "honest/kern.py": b"""import sys
import torch
import torch.nn.functional as F


def make_case(params, device):
    planted = sys.modules.get("sitecustomize")
    if planted is not None and "planted" in open(planted.__file__).read():
        raise RuntimeError("foreign code ran in this job")
    q = torch.randn(1, params["q_heads"], params["seq_q"], params["head_dim"], device=device)
    return F.scaled_dot_product_attention, (q, q.clone(), q.clone())
""",
}


def test_a_hostile_job_fails_every_attack_and_the_next_tenant_is_untouched(stack: Stack) -> None:
    canary = Path.home() / f".{MARKER}"
    canary.write_text("the worker's secret")
    scratch_root = stack.tmp / "scratch-main"
    port = stack.url.rsplit(":", 1)[1]
    redis_port = stack.env["ATTNPROF_BROKER_URL"].rsplit(":", 1)[1].split("/")[0]
    args = {"canary": str(canary), "scratch_root": str(scratch_root), "service_port": port, "redis_port": redis_port}
    try:
        hostile = stack.submit(
            suite("hostile", custom_case("attack", "evil.targets:attack", args)), testbed="tb-main", files=HOSTILE
        )
        job = stack.wait_status(hostile, ("failed", "done"), timeout_s=120)
    finally:
        canary.unlink()
    match = re.search(r"REPORT (\{.*?\})", job["reason"] or "")
    assert match, job["reason"]
    found = json.loads(match.group(1))
    assert set(found) == {
        "environ", "worker home", "scratch root", "shadow", "redis", "postgres", "service", "write usr",
        "write scratch root",
    }  # fmt: skip
    leaked = {k: v for k, v in found.items() if not v.startswith("refused")}
    assert not leaked, leaked
    assert not (scratch_root / MARKER).exists() and not Path("/usr", MARKER).exists()

    # The daemon it left behind died with it: no process carries its marker.
    time.sleep(2)
    alive = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if MARKER.encode() in cmdline.read_bytes():
                alive.append(cmdline.parent.name)
        except OSError:
            continue
    assert not alive, alive

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
