"""End to end: real Postgres, real Redis, ``attnprof serve`` and real Celery worker processes profiling on CPU.

The tests share one running stack (module scope) and run in file order.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from attnprof.core import testbed as keys
from tests.profiling_support import tar_gz
from tests.worker.stack import (
    ATTNPROF,
    FAULTS_TIMEOUT_S,
    FAULTY,
    NO_DATABASE,
    SDPA_CASE,
    Stack,
    custom_case,
    host_pid_named,
    seed_project,
    sql,
    suite,
    wait_for,
)

pytestmark = pytest.mark.slow
PRIVATE = {"model/__init__.py": b"", "model/weights.py": b"weights = 'another project keeps this to itself'\n"}


def _runs_of(stack: Stack, job_id: str) -> list[tuple[str, int]]:
    return [(r, a) for r, a in sql(stack.database_url, "SELECT id, attempt FROM runs WHERE job_id = %s", job_id)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): read its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_worker_token_cannot_claim_another_testbeds_job(stack: Stack) -> None:
    job_id = stack.submit(suite("idle", SDPA_CASE), testbed="tb-idle")
    ((_, _, secret),) = [m for m in stack.messages("profile.tb-idle") if m[0] == job_id]
    with stack.http(stack.worker_tokens["tb-faults"]) as other:
        r = other.post(f"/internal/jobs/{job_id}/claim", json={"attempt": 1, "worker": "intruder", "secret": secret})
    assert r.status_code == 404, r.text
    with stack.http(stack.worker_tokens["tb-main"]) as other:
        assert other.get(f"/internal/jobs/{job_id}/bundle").status_code == 401
    with stack.http() as user:  # a project token is not a worker token
        claim = {"attempt": 1, "worker": "x", "secret": secret}
        assert user.post(f"/internal/jobs/{job_id}/claim", json=claim).status_code == 403
    assert stack.job(job_id)["status"] == "queued"
    with stack.http() as user:
        assert user.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200


def test_a_stolen_worker_token_and_a_job_id_read_from_redis_open_nothing(stack: Stack) -> None:
    """What a hostile job could take from its worker, its testbed's worker token and the broker's URL, plus another
    project's queued job id read from Redis (the unacknowledged hash, a log): no claim, no bundle, no job route."""
    victim_project, victim_submit, _ = seed_project(stack.database_url, "victim", ("tb-idle",))
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {victim_submit}"}) as victim:
        r = victim.post(
            f"/api/v1/projects/{victim_project}/jobs",
            data={"testbed": "tb-idle", "branch": "main", "commit": "secret01"},
            files={
                "spec": ("attnprof.toml", suite("idle", SDPA_CASE).encode()),
                "bundle": ("b.tar.gz", tar_gz(PRIVATE)),
            },
        )
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert any(m[0] == job_id for m in stack.messages("profile.tb-idle"))
    stolen = stack.worker_tokens["tb-idle"]  # valid for every job of its testbed
    with stack.http(stolen) as thief:
        for body in ({"attempt": 1, "worker": "thief"}, {"attempt": 1, "worker": "thief", "secret": "apc_guess"}):
            r = thief.post(f"/internal/jobs/{job_id}/claim", json=body)
            assert r.status_code == 404 and r.json()["detail"] == f"no job {job_id} for this worker's testbed"
        bundle = thief.get(f"/internal/jobs/{job_id}/bundle")
        assert bundle.status_code == 401 and b"weights" not in bundle.content
        for route, body in (("heartbeat", {"attempt": 1}), ("failure", {"attempt": 1, "reason": "x", "retry": True})):
            assert thief.post(f"/internal/jobs/{job_id}/{route}", json=body).status_code == 401
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {victim_submit}"}) as victim:
        job = victim.get(f"/api/v1/jobs/{job_id}").json()
        assert job["status"] == "queued" and job["attempts"] == 0
        assert victim.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200


def test_submitted_jobs_reach_done_and_the_second_compares_with_the_first(stack: Stack, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "mypkg").mkdir(parents=True)
    (source / "mypkg" / "__init__.py").write_text("")
    (source / "mypkg" / "kern.py").write_text(
        "import torch\nimport torch.nn.functional as F\n\n\n"
        "def make_case(params, device):\n"
        "    q = torch.randn(1, params['q_heads'], params['seq_q'], params['head_dim'], device=device)\n"
        "    return F.scaled_dot_product_attention, (q, q.clone(), q.clone())\n"
    )
    spec = source / "attnprof.toml"
    spec.write_text(
        suite(
            "flow",
            SDPA_CASE
            + '[[cases]]\nname = "mine"\ntarget = "mypkg.kern:make_case"\nq_heads = 2\nseq_q = 64\nhead_dim = 32\n',
        )
    )
    env = {**stack.env, "ATTNPROF_SERVER": stack.url, "ATTNPROF_TOKEN": stack.submit_token}
    env.pop("ATTNPROF_DATABASE_URL")  # a client holds no database URL

    def submit(commit: str, *extra: str) -> tuple[int, dict]:
        argv = [*ATTNPROF, "submit", str(spec), "--source", str(source), "--testbed", "tb-main"]
        argv += ["--branch", "main", "--commit", commit, "--wait", "--timeout", "150", "--json", *extra]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=200)
        assert done.stdout, done.stderr
        return done.returncode, json.loads(done.stdout)

    code, first = submit("c0ffee01")
    assert code == 0, first
    job1 = first["job"]
    assert job1["status"] == "done" and job1["verdict"] == "pass" and job1["attempts"] == 1
    assert first["comparison"]["document"]["baseline"] is None
    with stack.http() as http:
        run = http.get(f"/api/v1/projects/{stack.project}/runs/{job1['run_id']}").json()
    assert run["document"]["schema"] == "attnprof.result/v1"
    assert {c["id"]: c["status"] for c in run["document"]["cases"]} == {"sdpa": "ok", "mine": "ok"}
    assert set(run["traces"]) == {c["trace"] for c in run["document"]["cases"]}

    code, second = submit("c0ffee02", "--base-commit", "c0ffee01")
    assert code in (0, 1), second  # CPU timings on a shared machine may move; the baseline is the point
    job2 = second["job"]
    assert job2["status"] == "done"
    assert second["comparison"]["baseline"] == [job1["run_id"]]
    assert second["comparison"]["document"]["baseline"] == [run["document"]["run"]["id"]]

    # The worker token that ran the job cannot post a result for it (only the attempt's job token could).
    with stack.http(stack.worker_tokens["tb-main"]) as worker:
        forged = worker.post(f"/internal/jobs/{job1['id']}/result", json={"attempt": 1, "result": run["document"]})
    assert forged.status_code == 401
    assert _runs_of(stack, job1["id"]) == [(job1["run_id"], 1)]
    # No process logged a claim secret or a job token (what Celery shows of a message's arguments hides the secret).
    assert not [p.name for p in stack.logs if "apc_" in p.text() or "apj_" in p.text()]
    assert stack.job(job1["id"])["status"] == "done"


def test_the_worker_refuses_to_start_where_it_does_not_fit(stack: Stack) -> None:
    env = {**stack.env, "ATTNPROF_DATABASE_URL": NO_DATABASE, "ATTNPROF_WORKER_TOKEN": stack.worker_tokens["tb-main"]}

    def check(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        argv = [*ATTNPROF, "worker", *args, "--check", "--wait-for-service", "0"]
        return subprocess.run(argv, env={**env, **extra}, capture_output=True, text=True, timeout=60)

    ok = check("--testbed", "tb-main", "--device", "cpu")
    assert ok.returncode == 0 and re.search(r"threads: testbed key [0-9a-f]{16} matches", ok.stderr), ok.stderr
    wrong = check("--testbed", "tb-faults", "--device", "cpu")
    assert wrong.returncode == 2 and "serves testbed 'tb-main', not 'tb-faults'" in wrong.stderr
    assert "NVML finds no GPU" in check("--testbed", "tb-main", "--device", "cuda").stderr
    assert "one worker per GPU" in check("--testbed", "tb-main", CUDA_VISIBLE_DEVICES="0,1").stderr
    refused = check("--testbed", "tb-main", ATTNPROF_WORKER_TOKEN="ap_not_a_token")
    assert refused.returncode == 2 and "refused the worker token" in refused.stderr
    assert check("--analysis", "--testbed", "tb-main").returncode == 2


def test_the_workers_key_their_testbed_and_a_forged_upload_changes_nothing(stack: Stack) -> None:
    # The two workers of tb-main told the service their device as they started: one keyed the testbed, the other
    # found it keyed with its own device. Its jobs' runs (measured in the jail) carry that key.
    said = [stack.procs[name].text() for name in ("main-1", "main-2")]
    assert sum("testbed tb-main: keyed with this worker's device" in text for text in said) == 1, said
    assert sum("testbed tb-main: its key is this worker's device's" in text for text in said) == 1, said
    ((key, meaning),) = sql(stack.database_url, "SELECT key, meaning FROM testbeds WHERE name = %s", "tb-main")
    assert meaning["mode"] == "cpu" and f"(key {key})" in "".join(said)
    ran = "SELECT DISTINCT r.testbed_key FROM runs r JOIN testbeds t ON t.id = r.testbed_id WHERE t.name = %s"
    assert {k for (k,) in sql(stack.database_url, ran, "tb-main")} <= {key}

    # An upload naming tb-main, measured (or written) on another device, is refused and changes nothing.
    forged = json.loads((Path(__file__).parents[1] / "data" / "service" / "cpu-run-1.json").read_text())
    forged["run"]["id"] = str(uuid.uuid4())
    forged["environment"]["testbed"] = {"device": "FORGED-GPU", "driver": "999.1", "mode": "cuda"}
    forged["environment"]["testbed_key"] = keys.testbed_key(forged["environment"]["testbed"])
    with stack.http() as http:
        r = http.post(
            f"/api/v1/projects/{stack.project}/results",
            json={"result": forged, "branch": "main", "commit": "f0", "testbed": "tb-main"},
        )
    assert r.status_code == 422 and r.json()["detail"].startswith("environment.testbed_key: "), r.text
    assert f"testbed tb-main is key {key}" in r.json()["detail"]
    assert sql(stack.database_url, "SELECT key, meaning FROM testbeds WHERE name = %s", "tb-main") == [(key, meaning)]

    # A worker of tb-main starting now still fits it.
    env = {**stack.env, "ATTNPROF_DATABASE_URL": NO_DATABASE, "ATTNPROF_WORKER_TOKEN": stack.worker_tokens["tb-main"]}
    argv = [*ATTNPROF, "worker", "--testbed", "tb-main", "--device", "cpu", "--check", "--wait-for-service", "0"]
    started = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0 and f"testbed key {key} matches" in started.stderr, started.stderr


def test_submit_exit_codes_without_a_verdict(stack: Stack, tmp_path: Path) -> None:
    spec = tmp_path / "attnprof.toml"
    spec.write_text(suite("idle", SDPA_CASE))
    env = {**stack.env, "ATTNPROF_SERVER": stack.url, "ATTNPROF_TOKEN": stack.submit_token}

    def submit(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [*ATTNPROF, "submit", str(spec), "--branch", "b", "--commit", "c1", *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)

    waited = submit("--testbed", "tb-idle", "--wait", "--timeout", "2")  # no worker serves tb-idle
    assert waited.returncode == 3, waited.stderr
    assert "no verdict: the wait ran out while the job was queued" in waited.stdout
    queued = submit("--testbed", "tb-idle", "--json")
    assert queued.returncode == 0 and json.loads(queued.stdout)["job"]["status"] == "queued"
    spec.write_text(suite("bad", SDPA_CASE.replace("head_dim", "hed_dim")))
    bad = submit("--testbed", "tb-idle", "--wait")
    assert bad.returncode == 2 and "422" in bad.stderr and "hed_dim" in bad.stderr
    assert submit("--wait").returncode == 2  # no testbed


def test_hang_times_out_a_lost_message_is_resent_a_raising_target_fails(stack: Stack, tmp_path: Path) -> None:
    marker = f"hang{uuid.uuid4().hex[:8]}"
    hang = suite("hang", custom_case("hang", "faulty.targets:hang", {"marker": marker}))
    hang_id = stack.submit(hang, testbed="tb-faults", files=FAULTY, branch="faults")
    stack.wait_status(hang_id, ("running",), 30)
    # The worker is busy with the hang: the next job's message waits in Redis. Lose it.
    boom_id = stack.submit(suite("boom", custom_case("boom", "faulty.targets:boom")), testbed="tb-faults", files=FAULTY)
    assert [boom_id, 1] in [m[:2] for m in stack.messages("profile.tb-faults")]
    r = stack.redis()
    r.delete("profile.tb-faults")
    r.close()
    # The sweeper sees the job queued with no message for it, and sends it again.
    wait_for(
        "the sweeper to resend",
        lambda: [boom_id, 1] in [m[:2] for m in stack.messages("profile.tb-faults")],
        20,
        logs=stack.logs,
    )
    assert "sent profile again" in stack.procs["analysis"].text()

    hung_pid = int(wait_for("the hanging factory to start", lambda: host_pid_named(marker), 30))
    job = stack.wait_status(hang_id, ("timed_out", "failed", "done"), FAULTS_TIMEOUT_S + 30)
    assert job["status"] == "timed_out", job
    assert f"wall-clock limit of {FAULTS_TIMEOUT_S:.0f} s" in job["reason"]
    assert not _alive(hung_pid)

    # The same worker takes the next job: the one whose message was lost and sent again.
    job = stack.wait_status(boom_id, ("failed", "done", "timed_out"), 60)
    assert job["status"] == "failed", job
    assert "every case failed (1): boom: RuntimeError" in job["reason"]
    assert "boom from the user's factory" in job["reason"]
    assert "ATTNPROF variables seen: none" in job["reason"]  # the subprocess's environment holds no secret
    assert job["attempts"] == 1 and job["run_id"] is None


def test_cancel_stops_the_subprocess_and_the_scratch_is_removed(stack: Stack, tmp_path: Path) -> None:
    marker = f"cancel{uuid.uuid4().hex[:8]}"
    spec = suite("cancel", custom_case("hang", "faulty.targets:hang", {"marker": marker}))
    job_id = stack.submit(spec, testbed="tb-faults", files=FAULTY, branch="faults")
    stack.wait_status(job_id, ("running",), 30)
    pid = int(wait_for("the hanging factory to start", lambda: host_pid_named(marker), 30))
    scratch = stack.tmp / "scratch-faults" / "attnprof-jobs"
    assert any(p.name.startswith(job_id) for p in scratch.iterdir())
    cancelled_at = time.monotonic()
    with stack.http() as http:
        assert http.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
    wait_for("the subprocess to be killed", lambda: not _alive(pid), 10)
    assert time.monotonic() - cancelled_at < FAULTS_TIMEOUT_S  # stopped by the cancel, not by the time limit
    wait_for("the scratch directory to go", lambda: not any(p.name.startswith(job_id) for p in scratch.iterdir()), 10)
    job = stack.job(job_id)
    assert job["status"] == "cancelled" and job["run_id"] is None


def test_a_worker_killed_mid_job_is_replaced_and_the_job_completes_once(stack: Stack) -> None:
    job_id = stack.submit(suite("killed", SDPA_CASE), testbed="tb-main", branch="kill")
    stack.wait_status(job_id, ("running",), 30)
    claimed_by = sql(stack.database_url, "SELECT claimed_by FROM jobs WHERE id = %s", job_id)[0][0]
    victim = next(p for p in stack.procs.values() if f"/pid{p.popen.pid}" in (claimed_by or ""))
    survivor = next(stack.procs[n] for n in ("main-1", "main-2") if stack.procs[n] is not victim)
    scratch = stack.tmp / "scratch-main" / "attnprof-jobs"
    first = wait_for(
        "the attempt's scratch directory", lambda: [p for p in scratch.iterdir() if p.name.startswith(job_id)], 20
    )
    victim.popen.send_signal(signal.SIGKILL)
    victim.popen.wait()
    # The profiler subprocess dies with its worker (no orphan keeps the device busy).
    wait_for(
        "the orphaned profiler to die",
        lambda: not subprocess.run(["pgrep", "-f", first[0].name], capture_output=True).stdout,
        10,
    )

    job = stack.wait_status(job_id, ("done", "failed"), 90)
    assert job["status"] == "done", job
    assert job["attempts"] == 2
    assert "attempt 1 lost its worker" in (job["reason"] or "")
    assert _runs_of(stack, job_id) == [(job["run_id"], 2)]  # stored exactly once, by the second attempt
    assert (
        f"/pid{survivor.popen.pid}"
        in sql(stack.database_url, "SELECT claimed_by FROM jobs WHERE id = %s", job_id)[0][0]
    )
    # The dead worker could not remove its scratch directory; the next worker to start a job on the host did.
    assert not first[0].exists()
    assert "left by a worker that is gone" in survivor.text()
