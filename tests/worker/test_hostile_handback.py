"""What a job leaves in its folder, and what it holds, through the real stack: ``attnprof serve``, the analysis worker
and, beside the stack's three, two profile workers of this module's own, as root, so that the privileged jail and a
cgroup per job are in use. The attacks' code is ``tests.hostile_code``'s ``PLANTED``.

One worker (``tb-hostile``, the testbed's only one) runs every attack with small limits (``WALLS``): links from the
job's folder to a root-only file of the host, to ``/proc/self/environ`` and to host folders; ``out/result.json`` as a
FIFO, a link to ``/dev/zero``, a hard link, a gzip bomb; memory in a memfd and in ``/dev/shm``; output;
disk. After each: the job failed with a reason that names what was refused or the limit it passed, soon; nothing of
the host's reached its reason, a stored run or a downloadable trace; and the next job on that worker, another
project's, is done. The other worker (``tb-neighbour``) runs another tenant's job while a job on the first holds as
many threads as it may, as the same job user.

Both workers read a peaks cache in which a calibration was played as stable: each job then skips the host's peaks
measurement (a 256 MiB copy and seconds of matmuls), which nothing here is about.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from attnprof.worker.profile.cgroup import Cgroups, CgroupUnavailable
from tests.hostile_code import (
    ATTACK_NAMES,
    PLANTED,
    TRACED_CASE,
    VICTIM,
    HostFiles,
    Walls,
    attacks,
    findings,
    job_folder,
    judge,
    plant_host_files,
    planted_bundle,
    threads_case,
    took_s,
)
from tests.profiling_support import tar_gz
from tests.worker.stack import (
    ATTNPROF,
    NO_DATABASE,
    Proc,
    Stack,
    seed_project,
    start,
    stop,
    suite,
    wait_for,
    wait_ready,
)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")

WALLS = Walls(memory_mib=768, output_mib=1, disk_mib=32, max_processes=600, timeout_s=60)
HOSTILE_TB = "tb-hostile"
NEIGHBOUR_TB = "tb-neighbour"
QUICK_S = 30.0  # an attack's job ends within this of its start: half its wall-clock limit
FINAL = ("done", "failed", "timed_out", "cancelled")
VICTIM_SPEC = suite(
    "victim",
    TRACED_CASE
    + '[[cases]]\nname = "mine"\ntarget = "honest.kern:make_case"\nq_heads = 2\nseq_q = 64\nhead_dim = 32\n',
)
GiB = 1024**3


@dataclass
class Bed:
    """The two workers of this module, and the next tenant: another project, with its own submit token."""

    stack: Stack
    hostile: Proc
    neighbour: Proc
    scratch: Path  # the hostile worker's scratch root (ATTNPROF_WORKER__SCRATCH_DIR)
    worker_token: str  # the hostile worker's
    tenant: str
    tenant_token: str

    def tenant_http(self) -> httpx.Client:
        return self.stack.http(self.tenant_token)

    def submit_victim(self, testbed: str) -> str:
        with self.tenant_http() as http:
            r = http.post(
                f"/api/v1/projects/{self.tenant}/jobs",
                data={"testbed": testbed, "branch": "main", "commit": "honest01"},
                files={"spec": ("attnprof.toml", VICTIM_SPEC.encode()), "bundle": ("b.tar.gz", tar_gz(VICTIM))},
            )
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def tenant_job(self, job_id: str, timeout_s: float = 120) -> dict[str, Any]:
        def final() -> dict[str, Any] | None:
            with self.tenant_http() as http:
                job: dict[str, Any] = http.get(f"/api/v1/jobs/{job_id}").json()
            return job if job["status"] in FINAL else None

        found: dict[str, Any] = wait_for(f"the next tenant's job {job_id}", final, timeout_s, logs=self.stack.logs)
        return found


def _play_stable_peaks(cache: Path) -> None:
    """Cache this host's peaks from a calibration played as stable (``measure_peaks`` takes the rounds and the
    host-busy reading it is given, as its tests do)."""
    from attnprof.core.measure import environment as env
    from attnprof.core.measure.peaks import load_or_measure, measure_peaks

    device = env.describe_device("cpu")
    key = env.testbed(device, None, "cpu")[0]
    rates = {"dram_gbps": 20.0, "fp32": 0.2, "fp16": 0.2 / 70, "bf16": 0.3}
    peaks = load_or_measure(
        "cpu",
        device.name,
        key,
        cache,
        measure=lambda d: measure_peaks(d, measure_round=lambda: dict(rates), busy_meter=lambda: lambda: 0.0),
    )
    assert peaks.status == "stable" and any(cache.glob("peaks-*.json")), peaks


@pytest.fixture(scope="module")
def bed(stack: Stack) -> Iterator[Bed]:
    cache = stack.tmp / "peaks-played"
    _play_stable_peaks(cache)
    tenant, tenant_token, tokens = seed_project(stack.database_url, "next-tenant", (HOSTILE_TB, NEIGHBOUR_TB))
    procs: list[Proc] = []
    common = {
        **stack.env,
        "ATTNPROF_DATABASE_URL": NO_DATABASE,
        "ATTNPROF_WORKER__CACHE_DIR": str(cache),
        "ATTNPROF_WORKER__TIMEOUT_S": str(WALLS.timeout_s),
    }
    try:
        for label, testbed, limits in (
            ("hostile", HOSTILE_TB, WALLS.env()),
            ("neighbour", NEIGHBOUR_TB, {"ATTNPROF_WORKER__MAX_PROCESSES": str(WALLS.max_processes)}),
        ):
            wenv = {
                **common,
                **limits,
                "ATTNPROF_WORKER_TOKEN": tokens[testbed],
                "ATTNPROF_WORKER__SCRATCH_DIR": str(stack.tmp / f"scratch-{label}"),
            }
            argv = [*ATTNPROF, "worker", "--testbed", testbed, "--device", "cpu"]
            stack.procs[label] = start(label, argv, wenv, stack.tmp / "logs", stack.tmp)
            procs.append(stack.procs[label])
        wait_ready(procs)
        yield Bed(
            stack=stack,
            hostile=stack.procs["hostile"],
            neighbour=stack.procs["neighbour"],
            scratch=stack.tmp / "scratch-hostile",
            worker_token=tokens[HOSTILE_TB],
            tenant=tenant,
            tenant_token=tenant_token,
        )
    finally:
        stop(procs)
        for label in ("hostile", "neighbour"):
            stack.procs.pop(label, None)


@pytest.fixture(scope="module")
def host(bed: Bed) -> HostFiles:
    """The host's secret files, made from the next tenant's first run on the attacks' testbed (also the proof that
    an honest job runs there at all, its peaks read from the cache)."""
    victim = bed.tenant_job(bed.submit_victim(HOSTILE_TB))
    assert victim["status"] == "done", victim
    run = _run(bed, bed.tenant, bed.tenant_token, victim["run_id"])
    assert run["document"]["environment"]["peaks"]["origin"] == "cached", run["document"]["environment"]["peaks"]
    return plant_host_files(bed.stack.tmp / "host-secrets", run["document"])


def _run(bed: Bed, project: str, token: str, run_id: str) -> dict[str, Any]:
    with bed.stack.http(token) as http:
        r = http.get(f"/api/v1/projects/{project}/runs/{run_id}")
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


def _stored(bed: Bed, job: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, bytes]]:
    """The run the job stored (None: none) and every trace downloadable from it."""
    if not job.get("run_id"):
        return None, {}
    run = _run(bed, bed.stack.project, bed.stack.submit_token, job["run_id"])
    traces: dict[str, bytes] = {}
    with bed.stack.http() as http:
        for name in run["traces"]:
            r = http.get(f"/api/v1/projects/{bed.stack.project}/runs/{job['run_id']}/traces/{name}")
            assert r.status_code == 200, r.text
            traces[name] = r.content
    return run, traces


def _vm_hwm_bytes(proc: Proc) -> int:
    """The peak resident memory of a worker process (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {proc.name}")


def _left_behind(bed: Bed, job_id: str) -> list[str]:
    """What the job's attempt left on the host: its folder, a mount, its cgroup."""
    left = [str(p) for p in (bed.scratch / "attnprof-jobs").glob(f"{job_id}-*")]
    left += [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if job_id in line]
    try:
        parents = Cgroups.find().parents
    except CgroupUnavailable:
        parents = ()
    return left + [str(p) for parent in parents for p in parent.glob(f"attnprof-{job_id}-*")]


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _started(bed: Bed, job_id: str) -> None:
    """Wait until the job left the queue: a job submitted after this one queues behind it on the only worker."""
    bed.stack.wait_status(job_id, ("running", *FINAL), timeout_s=120)


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_what_a_job_plants_or_holds_is_refused_and_the_next_tenant_runs(bed: Bed, host: HostFiles, name: str) -> None:
    attack = attacks(host, WALLS)[name]
    peak_before = _vm_hwm_bytes(bed.hostile)
    hostile = bed.stack.submit(suite(f"planted-{name}", attack.cases), testbed=HOSTILE_TB, files=planted_bundle(host))
    _started(bed, hostile)
    victim = bed.submit_victim(HOSTILE_TB)
    job = bed.stack.wait_status(hostile, FINAL, timeout_s=WALLS.timeout_s + 30)
    run, traces = _stored(bed, job)
    forbidden = [host.secret, bed.worker_token, "ATTNPROF_", str(bed.scratch)]
    problems = judge(attack, job, run=run, traces=traces, forbidden=forbidden, within_s=QUICK_S)
    assert not problems, problems
    if attack.no_trace:  # the run is stored; the trace its document names is not, nor the host's file of that name
        assert run is not None and attack.no_trace not in run["traces"], run
        with bed.stack.http() as http:
            r = http.get(f"/api/v1/projects/{bed.stack.project}/runs/{job['run_id']}/traces/{attack.no_trace}")
        assert r.status_code == 404, r.text
    if name == "gzip_bomb":  # 2 GiB inflated would show; the cap keeps the worker's peak far below it
        grew = _vm_hwm_bytes(bed.hostile) - peak_before
        assert grew < GiB, f"the worker's peak resident memory grew by {grew / 2**20:,.0f} MiB"

    # The next job on the same worker is another project's: it runs, after the attack, as if nothing had happened.
    done = bed.tenant_job(victim)
    assert done["status"] == "done" and done["attempts"] == 1, done
    # On the same, single worker, after the attack's attempt (a stored run's job is finished by the analysis worker,
    # which may come a moment after the profile worker has taken the next job).
    assert _at(done["started_at"]) > _at(job["started_at"]), (done, job)
    assert not _left_behind(bed, hostile)


def test_a_job_holding_every_thread_it_may_leaves_another_tenants_job_alone(bed: Bed) -> None:
    crowd = bed.stack.submit(
        suite("crowd", threads_case(count=2 * WALLS.max_processes, hold_s=45)), testbed=HOSTILE_TB, files=PLANTED
    )

    def holding() -> Path | None:
        folder = job_folder(bed.scratch, crowd)
        return folder if folder is not None and (folder / "holding").exists() else None

    folder = wait_for("the crowding job to hold its threads", holding, 60, logs=bed.stack.logs)
    try:
        held = int((folder / "holding").read_text())
        assert held >= 500, held
        # The same job user, another worker of this host, another project, while the first still holds its threads.
        victim = bed.tenant_job(bed.submit_victim(NEIGHBOUR_TB))
        assert bed.stack.job(crowd)["status"] == "running"
    finally:
        (folder / "release").write_text("")
    assert victim["status"] == "done" and victim["attempts"] == 1, victim
    job = bed.stack.wait_status(crowd, FINAL, timeout_s=60)
    assert job["status"] == "failed", job
    found = findings(job["reason"])
    assert found is not None and int(found["threads"]) == held and found["refused"], job["reason"]
    limit = f"the job reached its limit of {WALLS.max_processes:,} processes and threads ("
    assert limit in job["reason"], job["reason"]
    took = took_s(job)
    assert took is not None and took < 50, took
    # The worker cleans up after it reported the failure: nothing of the job stays on the host.
    wait_for("the crowding job's attempt to be cleaned up", lambda: not _left_behind(bed, crowd), 15)
