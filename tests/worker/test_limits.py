"""A job's limits from inside the real jail, each with the job's own cgroup as the profile worker makes it: memory that
no resident set shows (a memfd, files in the jail's tmpfs), processes counted per job rather than per uid, output,
and the job's folder. Every job here tries to pass its limit; each is stopped for the limit it passed, soon after.

These run the real bubblewrap and make cgroups below this process's own (a root worker's setting, as ``.ci/run``
has): where no cgroup can be made here, the tests say why and are skipped.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnprof.worker.profile import jail as jails
from attnprof.worker.profile import outcome, sandbox
from attnprof.worker.profile import scratch as scratches
from attnprof.worker.profile.cgroup import Cgroups, CgroupUnavailable, JobCgroup

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")

MiB = 1024 * 1024
MEMORY_BYTES = 128 * MiB  # the jobs' memory limit: small, so that passing it is quick and light
MAX_PROCESSES = 64
QUICK_S = 10.0  # a job stopped at a limit is stopped within this (those that would go on sleep for a minute)


@pytest.fixture(scope="module")
def cgroups() -> Cgroups:
    try:
        return Cgroups.find(os.environ.get("ATTNPROF_WORKER__CGROUP_PARENT", ""))
    except CgroupUnavailable as exc:
        pytest.skip(f"no cgroup can be made for a job here: {exc}")


@pytest.fixture(scope="module")
def jail() -> jails.Jail:
    return jails.Jail.build(max_processes=MAX_PROCESSES)


@pytest.fixture
def scratch_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("jobs")
    root.chmod(0o755)
    yield root
    for path in root.iterdir():
        scratches.remove(path)
    shutil.rmtree(root, ignore_errors=True)
    assert str(root) not in Path("/proc/self/mountinfo").read_text(), "a job's folder is still mounted"


@dataclass
class Job:
    """One jailed job's pieces: its attempt folder, its cgroup (None: the watchdog alone), its command."""

    scratch: scratches.Scratch
    cgroup: JobCgroup | None
    argv: list[str]
    env: dict[str, str]
    args_fd: int


MakeJob = Callable[..., AbstractContextManager[Job]]


@pytest.fixture
def job(jail: jails.Jail, cgroups: Cgroups, scratch_root: Path) -> Iterator[MakeJob]:
    """``job(code, memory_bytes=, max_processes=, cgroup=True, disk_bytes=0)``: a context that sets up one jailed job
    running ``code`` (the job's folder, its cgroup as the worker makes one), and removes both after."""
    made: list[JobCgroup] = []

    @contextmanager
    def make(
        code: str,
        *,
        memory_bytes: int = MEMORY_BYTES,
        max_processes: int = MAX_PROCESSES,
        cgroup: bool = True,
        disk_bytes: int = 0,
    ) -> Iterator[Job]:
        scratch = scratches.make(scratch_root, f"limits-{secrets.token_hex(3)}", 1, disk_bytes=disk_bytes)
        (scratch.job / "src" / "hostile.py").write_text(textwrap.dedent(code))
        jail.prepare(scratch.job, etc=scratch.etc)
        command = [sys.executable, "-I", str(jails.JOB_ROOT / "src" / "hostile.py")]
        env = sandbox.scrubbed_env(
            os.environ, home=jails.JOB_ROOT / "home", tmp=jails.JOB_ROOT / "tmp", pythonpath=jails.JOB_ROOT / "src"
        )
        argv, args_fd = jails.hidden_argv(
            jail.argv(command, scratch=scratch.job, etc=scratch.etc, peaks=None, cwd=jails.JOB_ROOT / "src")
        )
        group = None
        if cgroup:
            group = cgroups.create(
                f"attnprof-test-{os.getpid()}-{secrets.token_hex(3)}",
                memory_bytes=memory_bytes,
                max_processes=max_processes,
            )
            made.append(group)
        try:
            yield Job(scratch, group, argv, {**env, **jail.env()}, args_fd)
        finally:
            os.close(args_fd)
            if group is not None:
                group.remove()
            scratches.remove(scratch.path)

    yield make
    left = [d for group in made for d in group.dirs if d.exists()]
    assert not left, f"cgroups left behind: {left}"


def _run(jail: jails.Jail, job: Job, limits: sandbox.ProcessLimits) -> sandbox.Finished:
    return sandbox.run(
        job.argv,
        cwd=job.scratch.path,
        env=job.env,
        limits=limits,
        lines=20,
        run_as=jail.run_as,
        cgroup=job.cgroup,
        disk_bytes=job.scratch.used_bytes,
        pass_fds=(job.args_fd,),
    )


def _limits(*, timeout_s: float = 120, memory_bytes: int = MEMORY_BYTES, **more: int) -> sandbox.ProcessLimits:
    return sandbox.ProcessLimits(timeout_s=timeout_s, memory_bytes=memory_bytes, poll_s=0.1, **more)


def _reason(done: sandbox.Finished, **limits: int) -> str:
    """The failure reason the worker would report for ``done`` (no result document)."""
    decided = outcome.decide(done, None, timeout_s=120, memory_limit_bytes=MEMORY_BYTES, **limits)
    assert isinstance(decided, outcome.JobFailure)
    return decided.reason


MEMFD = """
import os, time
fd = os.memfd_create("hidden")
chunk = b"m" * (1 << 20)
for i in range(3 * 128):  # three times the limit, in a file no process maps: no resident set shows it
    os.write(fd, chunk)
with open("/proc/self/status") as f:
    print("rss", [line.split()[1] for line in f if line.startswith("VmRSS")][0], "kB", flush=True)
print("memfd held 384 MiB", flush=True)
"""


def test_a_memfd_past_the_limit_is_stopped_for_memory(jail: jails.Jail, job: MakeJob) -> None:
    # The resident-set watchdog alone, at the same limit: the job holds three times the limit and goes on.
    with job(MEMFD, cgroup=False) as unseen:
        watched = _run(jail, unseen, _limits())
    assert "memfd held 384 MiB" in watched.tail, watched
    assert watched.stopped is None and watched.exit_code == 0, watched
    assert watched.peak_rss_bytes < MEMORY_BYTES  # what it reads is far under the limit
    # With the job's cgroup the kernel charges the memfd to the job: stopped at the limit, at once.
    with job(MEMFD) as charged:
        done = _run(jail, charged, _limits())
    assert done.stopped == "memory", done
    assert "memfd held 384 MiB" not in done.tail
    assert done.wall_s < QUICK_S, done.wall_s
    reason = _reason(done)
    assert reason.startswith("out of host memory") and "limit of 128 MiB" in reason, reason


def test_files_in_the_jails_tmp_and_shm_count_against_the_memory_limit(
    jail: jails.Jail,
    job: MakeJob,
) -> None:
    code = """
    import time
    chunk = b"t" * (1 << 20)
    for path in ("/dev/shm/fill", "/tmp/fill"):  # each under the limit, both together over it
        with open(path, "wb") as f:
            for _ in range(96):
                f.write(chunk)
        print("wrote", path, flush=True)
    print("both written", flush=True)
    time.sleep(60)
    """
    with job(code) as charged:
        done = _run(jail, charged, _limits())
        assert done.stopped == "memory", done
        assert "both written" not in done.tail and done.wall_s < QUICK_S, done
        # The jail's tmpfs went with its mount namespace: nothing the job wrote is still charged to it.
        assert charged.cgroup is not None
        deadline = time.monotonic() + 5
        while (held := charged.cgroup.memory_bytes()) > 16 * MiB and time.monotonic() < deadline:
            time.sleep(0.05)
        assert held <= 16 * MiB, held
    assert "limit of 128 MiB" in _reason(done)


HOLDER = """
import os, threading, time
release = threading.Event()
n = 0
try:
    for _ in range(58):
        threading.Thread(target=release.wait, daemon=True).start()
        n += 1
except RuntimeError:
    pass
print("held", n, flush=True)
open("/job/holding", "w").close()
started = time.monotonic()
while not os.path.exists("/job/release") and time.monotonic() - started < 60:
    time.sleep(0.02)
"""

STARTER = """
import threading
release = threading.Event()
n = 0
try:
    for _ in range(40):
        threading.Thread(target=release.wait, daemon=True).start()
        n += 1
except RuntimeError:
    pass
release.set()
print("started", n)
"""


def _side_by_side(jail: jails.Jail, holder: Job, starter: Job) -> tuple[sandbox.Finished, sandbox.Finished]:
    """Run ``holder`` until it holds its threads, then ``starter`` beside it, then let ``holder`` go."""
    limits = _limits(max_processes=MAX_PROCESSES)
    held: dict[str, sandbox.Finished] = {}
    thread = threading.Thread(target=lambda: held.update(done=_run(jail, holder, limits)))
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not (holder.scratch.job / "holding").exists():
            assert thread.is_alive() and time.monotonic() < deadline, "the first job never held its threads"
            time.sleep(0.02)
        second = _run(jail, starter, limits)
    finally:
        (holder.scratch.job / "release").write_text("")
        thread.join(timeout=60)
    return held["done"], second


def test_jobs_of_one_uid_each_have_their_own_process_limit(
    jail: jails.Jail,
    job: MakeJob,
) -> None:
    # Without a cgroup each, the limit is RLIMIT_NPROC, counted over every process of the job user: the first job's
    # threads leave the second next to none.
    with job(HOLDER, cgroup=False) as holder, job(STARTER, cgroup=False) as starter:
        first, second = _side_by_side(jail, holder, starter)
    assert "held 58" in first.tail, first
    assert "started 40" not in second.tail, second
    # With a cgroup each (the worker's), both jobs have their own 64: the second starts all its threads.
    with job(HOLDER) as holder, job(STARTER) as starter:
        first, second = _side_by_side(jail, holder, starter)
    assert "held 58" in first.tail and first.exit_code == 0, first
    assert "started 40" in second.tail and second.exit_code == 0, second
    assert first.processes_refused == second.processes_refused == 0


def test_a_job_past_its_own_process_limit_is_refused_and_counted(
    jail: jails.Jail,
    job: MakeJob,
) -> None:
    code = """
    import threading
    release = threading.Event()
    n = 0
    try:
        for _ in range(200):
            threading.Thread(target=release.wait, daemon=True).start()
            n += 1
    except RuntimeError as e:
        print("refused:", e)
    print("threads", n)
    """
    with job(code, max_processes=32) as bounded:
        done = _run(jail, bounded, _limits(max_processes=32))
    said = [line for line in done.tail if line.startswith("threads")]
    assert said and int(said[0].split()[1]) < 32, done.tail
    assert any(line.startswith("refused:") for line in done.tail), done.tail
    assert done.processes_refused > 0, done
    reason = _reason(done, max_processes=32)
    assert "the job reached its limit of 32 processes and threads" in reason, reason


def test_output_past_the_limit_stops_the_job(jail: jails.Jail, job: MakeJob) -> None:
    code = """
    import sys, time
    line = "y" * 1023 + "\\n"
    for _ in range(3 * 1024):  # 3 MiB
        sys.stdout.write(line)
    sys.stdout.flush()
    print("printed it all", flush=True)
    time.sleep(60)
    """
    with job(code) as loud:
        done = _run(jail, loud, _limits(output_bytes=MiB))
    assert done.stopped == "output", done
    assert done.wall_s < QUICK_S, done.wall_s
    assert done.output_bytes > MiB
    assert all(len(line) <= 400 for line in done.tail)  # the tail the worker keeps is cut line by line
    reason = _reason(done, output_limit_bytes=MiB)
    assert reason.startswith("too much output") and "limit of 1 MiB" in reason, reason


def test_a_job_that_fills_its_folder_is_stopped_for_disk(
    jail: jails.Jail,
    job: MakeJob,
    scratch_root: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the job's folder is a tmpfs of its quota on a root worker only")
    code = """
    import time
    n = 0
    try:
        with open("/job/fill", "wb") as f:
            for _ in range(64):
                f.write(b"d" * (1 << 20))
                f.flush()
                n += 1
    except OSError as e:
        print("refused after", n, "MiB:", e.strerror, flush=True)
    print("wrote", n, "MiB", flush=True)
    time.sleep(60)
    """
    with job(code, memory_bytes=256 * MiB, disk_bytes=32 * MiB) as filler:
        assert filler.scratch.mounted
        mounted = Path("/proc/self/mountinfo").read_text()
        assert f" {filler.scratch.job} " in mounted, "the job's folder is not a mount of its own"
        done = _run(jail, filler, _limits(memory_bytes=256 * MiB, disk_bytes=32 * MiB))
        said = [line for line in done.tail if line.startswith("wrote")]
        assert said and int(said[0].split()[1]) <= 32, done.tail  # the kernel's quota: no more reached the host
        assert any("No space left on device" in line for line in done.tail), done.tail
        assert done.stopped == "disk", done
        assert done.wall_s < QUICK_S, done.wall_s
        assert done.disk_bytes >= 32 * MiB
        reason = _reason(done, disk_limit_bytes=32 * MiB)
        assert reason.startswith("out of disk") and "quota of 32 MiB" in reason, reason
        folder = filler.scratch.path
    assert not folder.exists()
    assert str(scratch_root) not in Path("/proc/self/mountinfo").read_text()


def test_a_cgroup_left_by_a_gone_worker_is_reaped_and_never_another_namespaces(cgroups: Cgroups) -> None:
    from attnprof.worker.profile import owner

    mine = owner.tag()
    pid, namespace = (int(x) for x in owner.TAG.fullmatch(mine).groups())  # type: ignore[union-attr]
    dead = cgroups.create(f"attnprof-dead-a1-p999999n{namespace}", memory_bytes=64 << 20, max_processes=16)
    foreign = cgroups.create("attnprof-foreign-a1-p999999n1", memory_bytes=64 << 20, max_processes=16)
    live = cgroups.create(f"attnprof-live-a1-p{pid}n{namespace}", memory_bytes=64 << 20, max_processes=16)
    try:
        removed = cgroups.reap_stale()
        assert f"attnprof-dead-a1-p999999n{namespace}" in removed
        assert not any(d.exists() for d in dead.dirs)
        assert all(d.exists() for d in foreign.dirs) and all(d.exists() for d in live.dirs)
    finally:
        for made in (dead, foreign, live):
            made.remove()
