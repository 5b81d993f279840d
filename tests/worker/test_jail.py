"""The jail a job runs in (bubblewrap), attacked from inside the way a hostile job would: every attempt fails.

These run the real bubblewrap (``.ci/run`` installs it) through ``sandbox.run``, as the profile worker does.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from attnprof.core.documents import load_result
from attnprof.worker.profile import jail as jails
from attnprof.worker.profile import outcome, sandbox
from attnprof.worker.profile import scratch as scratches
from attnprof.worker.profile.settings import GpuWorkerSettings, ProfileWorker

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")
H200_RESULT = Path(__file__).resolve().parents[1] / "data" / "h200" / "attnprof" / "result.json"


@pytest.fixture(scope="module")
def jail() -> jails.Jail:
    """The jail a worker builds here; on a GPU host (``ATTNPROF_TEST_JAIL_GPU=1``, bench/jail_h200.sh) with its GPU's
    device nodes passed in, and the carried packages (``BENCH_SITE``) bound."""
    devices: list[str] = []
    if os.environ.get("ATTNPROF_TEST_JAIL_GPU") == "1":
        from attnprof.worker.profile.device import probe_minor

        devices = jails.gpu_nodes(probe_minor())
    site = os.environ.get("BENCH_SITE")
    return jails.Jail.build(max_processes=256, devices=devices, extra_ro_binds=[site] if site else [])


@pytest.fixture
def scratch_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("jobs")
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def make_scratch(root: Path, name: str, attempt: int) -> scratches.Scratch:
    return scratches.make(root, name, attempt, disk_bytes=0)


def _run(
    jail: jails.Jail,
    scratch: scratches.Scratch,
    code: str,
    *,
    timeout_s: float = 60,
    env: dict[str, str] | None = None,
    counters: Path | None = None,
):
    (scratch.job / "src" / "hostile.py").write_text(textwrap.dedent(code))
    jail.prepare(scratch.job, etc=scratch.etc)
    command = [sys.executable, "-I", str(jails.JOB_ROOT / "src" / "hostile.py")]
    base = sandbox.scrubbed_env(
        os.environ, home=jails.JOB_ROOT / "home", tmp=jails.JOB_ROOT / "tmp", pythonpath=jails.JOB_ROOT / "src"
    )
    return sandbox.run(
        jail.argv(
            command, scratch=scratch.job, etc=scratch.etc, peaks=None, cwd=jails.JOB_ROOT / "src", counters=counters
        ),
        cwd=scratch.path,
        env={**base, **jail.env(), **(env or {})},
        limits=sandbox.ProcessLimits(timeout_s=timeout_s, memory_bytes=2**33, max_processes=jail.max_processes),
        lines=50,
        run_as=jail.run_as,
    )


def _verdicts(finished: sandbox.Finished) -> dict[str, str]:
    """The ``what: outcome`` lines the hostile script printed."""
    pairs = (line.split(": ", 1) for line in finished.tail if ": " in line)
    return {k.strip(): v.strip() for k, v in pairs}


def test_the_self_test_passes_here(jail: jails.Jail, scratch_root: Path) -> None:
    jail.self_test(scratch_root, forbidden=[Path.home(), scratch_root], addresses=[("127.0.0.1", 6379)])


def test_a_jail_that_cannot_start_fails_the_self_test(jail: jails.Jail, scratch_root: Path) -> None:
    broken = jails.Jail(**{**jail.__dict__, "bwrap": "/bin/false"})
    with pytest.raises(jails.JailUnavailable, match="bubblewrap could not start a job"):
        broken.self_test(scratch_root)


def test_a_job_user_that_does_not_exist_is_named() -> None:
    with pytest.raises(jails.JailUnavailable, match="no-such-attnprof-user"):
        jails.Jail.build(job_user="no-such-attnprof-user")


def test_the_job_cannot_read_the_worker_or_other_jobs(
    jail: jails.Jail, scratch_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = "ap_canary_" + secrets.token_hex(8)
    monkeypatch.setenv("ATTNPROF_WORKER_TOKEN", canary)  # what the worker process holds
    home_file = Path.home() / f".attnprof-canary-{secrets.token_hex(4)}"
    home_file.write_text(canary)
    other = make_scratch(scratch_root, "other-job", 1)
    (other.job / "src" / "secret_model.py").write_text(canary)
    mine = make_scratch(scratch_root, "hostile-job", 1)
    try:
        done = _run(
            jail,
            mine,
            f"""
            import glob, os
            def attempt(what, fn):
                try:
                    got = fn()
                    print(what + ": LEAKED" if {canary!r} in str(got) else what + ": nothing")
                except Exception as e:
                    print(what + ": refused " + type(e).__name__)
            attempt("parent environ", lambda: open("/proc/%d/environ" % {os.getpid()}).read())
            attempt("every environ", lambda: [open(p).read() for p in glob.glob("/proc/*/environ")])
            attempt("other job", lambda: open({str(other.job / "src" / "secret_model.py")!r}).read())
            others = {str(scratch_root)!r} + "/*/job/src/*"
            attempt("other job glob", lambda: [open(p).read() for p in glob.glob(others)])
            attempt("worker home", lambda: open({str(home_file)!r}).read())
            attempt("shadow", lambda: open("/etc/shadow").read())
            attempt("postgres data", lambda: os.listdir("/var/lib/postgresql"))
            attempt("worker code", lambda: os.listdir({str(Path(sandbox.__file__).parent)!r}))
            import pwd
            attempt("own user", lambda: pwd.getpwuid(os.getuid()).pw_name)
            attempt("cpu topology", lambda: open("/sys/devices/system/cpu/online").read())
            print("pids:", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
            """,
        )
    finally:
        home_file.unlink()
    said = _verdicts(done)
    assert done.exit_code == 0, done.tail
    for what in ("parent environ", "every environ", "other job", "other job glob", "worker home", "shadow"):
        assert said[what] in ("nothing",) or said[what].startswith("refused"), (what, said[what])
    assert said["postgres data"].startswith("refused") and said["worker code"].startswith("refused")
    assert said["shadow"] == "refused FileNotFoundError"  # not there at all, not merely unreadable
    assert said["own user"] == "nothing"  # its passwd entry reads (torch.compile needs it)
    assert said["cpu topology"] == "nothing"  # what thread counts come from reads too
    assert max(eval(said["pids"])) < 64  # a PID namespace of its own


def test_the_job_has_no_network(jail: jails.Jail, scratch_root: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        done = _run(
            jail,
            make_scratch(scratch_root, "net-job", 1),
            f"""
            import socket
            for name, port in (("redis", 6379), ("postgres", 5432), ("service", {port})):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    print(name + ": CONNECTED")
                except OSError as e:
                    print(name + ": refused " + type(e).__name__)
            try:
                socket.create_connection(("1.1.1.1", 53), timeout=2).close()
                print("outside: CONNECTED")
            except OSError as e:
                print("outside: refused " + type(e).__name__)
            for path in ("/var/run/postgresql/.s.PGSQL.5432", "/run/postgresql/.s.PGSQL.5432"):
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(path)
                    print("unix " + path + ": CONNECTED")
                except OSError as e:
                    print("unix " + path + ": refused " + type(e).__name__)
            """,
        )
    finally:
        listener.close()
    said = _verdicts(done)
    assert done.exit_code == 0, done.tail
    assert said and all(v.startswith("refused") for v in said.values()), said


def test_the_job_writes_only_its_scratch_folder(jail: jails.Jail, scratch_root: Path) -> None:
    marker = f"attnprof-escape-{secrets.token_hex(4)}"
    scratch = make_scratch(scratch_root, "write-job", 1)
    done = _run(
        jail,
        scratch,
        f"""
        import os
        for path in ("/usr/{marker}", "/{marker}", "/etc/{marker}", "/root/{marker}", "{scratch_root}/{marker}",
                     "/tmp/{marker}", "/job/{marker}"):
            try:
                with open(path, "w") as f:
                    f.write("x")
                print(path + ": written")
            except OSError as e:
                print(path + ": refused " + type(e).__name__)
        """,
    )
    said = _verdicts(done)
    assert done.exit_code == 0, done.tail
    assert said[f"/job/{marker}"] == "written" and (scratch.job / marker).exists()
    assert said[f"/tmp/{marker}"] == "written" and not Path("/tmp", marker).exists()  # its own /tmp
    for path, verdict in said.items():
        if path not in (f"/job/{marker}", f"/tmp/{marker}"):
            assert verdict.startswith("refused"), (path, verdict)
    assert not (scratch_root / marker).exists() and not Path("/", marker).exists()
    if jail.as_root:
        assert (scratch.job / marker).stat().st_uid == jail.job_uid != os.geteuid()


def test_a_daemon_left_behind_dies_with_the_job(jail: jails.Jail, scratch_root: Path) -> None:
    marker = f"attnprof-daemon-{secrets.token_hex(4)}"
    scratch = make_scratch(scratch_root, "daemon-job", 1)
    done = _run(
        jail,
        scratch,
        f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                sys.argv[0] = "{marker}"
                time.sleep(3)
                open("/job/{marker}", "w").write("survived")
                os._exit(0)
            os._exit(0)
        time.sleep(0.5)
        print("parent: exits")
        """,
    )
    assert done.exit_code == 0, done.tail
    time.sleep(4)
    assert not (scratch.job / marker).exists(), "a process of the job outlived it"
    left = [p for p in done.pids if Path(f"/proc/{p}").exists() and _state(p) != "Z"]
    assert not left, left


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_processes_are_bounded(jail: jails.Jail, scratch_root: Path) -> None:
    done = _run(
        jail,
        make_scratch(scratch_root, "bomb-job", 1),
        """
        import threading, time
        n = 0
        try:
            for _ in range(2000):
                threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
                n += 1
            print("threads: all 2000")
        except RuntimeError as e:
            print("threads: stopped at %d" % n)
        """,
    )
    said = _verdicts(done)
    assert said["threads"].startswith("stopped at"), said
    assert int(said["threads"].split()[-1]) < jail.max_processes


def test_gpu_processes_are_judged_by_the_worker() -> None:
    from attnprof.worker.profile.device import GpuWatch

    watch = GpuWatch()  # no GPU here: it reads nothing, and what it was told stands
    watch.candidates = {4100, 977, 5000}
    job = frozenset({4000, 4100, 5000})  # 5000 joined the tree after NVML saw it: the job's after all
    assert watch.foreign(job) == [977]
    document = load_result(H200_RESULT)
    assert document.run.suspect is None
    outcome.note_foreign_gpu_processes(document, watch.foreign(job))
    assert document.run.suspect == ["1 other process(es) on the GPU while the job ran (host PIDs 977)"]
    alone = load_result(H200_RESULT)
    outcome.note_foreign_gpu_processes(alone, [])
    assert alone.run.suspect is None  # the job's own processes are not others
    watch.close()


def test_the_hidden_paths_skip_what_the_jail_binds(jail: jails.Jail, tmp_path: Path) -> None:
    inside = jail.ro_binds[0]
    hidden = jail.hidden([inside, tmp_path, tmp_path / "missing"])
    assert inside not in hidden and tmp_path in hidden and tmp_path / "missing" not in hidden


@pytest.fixture(autouse=True)
def _clean(scratch_root: Path) -> Iterator[None]:
    yield
    for path in scratch_root.iterdir():
        scratches.remove(path)


@pytest.fixture
def worker_settings(tmp_path: Path, peaks_cache: Path) -> GpuWorkerSettings:
    """A CPU profile worker's settings as the start has them once the device is chosen, given in code."""
    return GpuWorkerSettings(
        worker_token=SecretStr("ap_" + secrets.token_hex(16)),
        broker_url="redis://127.0.0.1:6379/0",
        worker=ProfileWorker(
            device="cpu",
            jail="auto",
            scratch_dir=str(tmp_path),
            cache_dir=str(peaks_cache),
            cgroup_parent=os.environ.get("ATTNPROF_WORKER__CGROUP_PARENT", ""),
        ),
    )


def test_a_worker_refuses_to_start_where_no_jail_can_be_built(
    worker_settings: GpuWorkerSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    from attnprof.worker import cli

    with pytest.raises(typer.Exit) as stopped:
        cli._jail_and_peaks(worker_settings.with_worker(job_user="no-such-attnprof-user"))
    assert stopped.value.exit_code == 2
    err = capsys.readouterr().err
    assert "no jail for jobs can be built here" in err and "no-such-attnprof-user" in err
    assert "TRUSTED_SINGLE_TENANT" in err


def test_a_trusted_single_tenant_worker_starts_without_a_jail_and_says_so(
    worker_settings: GpuWorkerSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnprof.worker import cli
    from attnprof.worker.profile.profile import ProfileConfig

    given = worker_settings.with_worker(job_user="no-such-attnprof-user", trusted_single_tenant=True)
    chosen = cli._jail_and_peaks(given)
    err = capsys.readouterr().err
    assert "jobs run WITHOUT a sandbox" in err and "peaks:" in err
    assert chosen.worker.jail == "none" and given.worker.jail == "auto"
    assert ProfileConfig.from_settings(chosen).jail is None


def test_a_worker_starts_with_the_jail_and_measures_the_peaks_first(
    worker_settings: GpuWorkerSettings, peaks_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnprof.worker import cli
    from attnprof.worker.profile.profile import ProfileConfig

    chosen = cli._jail_and_peaks(worker_settings)
    err = capsys.readouterr().err
    assert "self-test passed" in err
    # the trusted step measured the peaks: cached, or, on a host too busy to confirm them, not cached with the
    # reason said (the worker starts all the same; each job then measures its own)
    cached = list(peaks_cache.glob("peaks-*.json"))
    assert cached or "were not cached: other processes used" in err, f"the trusted step measured no peaks: {err}"
    assert chosen.worker.jail in ("privileged", "userns") and f"bubblewrap ({chosen.worker.jail})" in err
    cfg = ProfileConfig.from_settings(chosen)
    assert cfg.jail is not None and cfg.jail.strategy == chosen.worker.jail


def test_the_projects_counter_cache_is_read_only_and_the_only_one_the_job_sees(
    jail: jails.Jail, scratch_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The job reads its project's counter cache at /counters and cannot change it; the cache of another project on
    the same host is nowhere in the jail."""
    by_project = tmp_path_factory.mktemp("counters-by-project")
    by_project.chmod(0o755)
    mine, theirs = by_project / "mine", by_project / "theirs"
    for folder, text in ((mine, "mine"), (theirs, "theirs-" + secrets.token_hex(8))):
        folder.mkdir(mode=0o755)
        (folder / "h200.json").write_text(text)
        (folder / "h200.json").chmod(0o644)
    scratch = make_scratch(scratch_root, "counters-job", 1)
    code = f"""
        import os
        print("read:", open("/counters/h200.json").read())
        try:
            open("/counters/h200.json", "w").write("poisoned")
            print("write: allowed")
        except OSError as exc:
            print("write: refused", exc.errno)
        found = []
        for root, dirs, files in os.walk("/", onerror=lambda e: None):
            # the host's system folders are bound whole and read-only (the self-test covers them); the rest is walked
            if root.startswith(("/proc", "/sys", "/dev", "/usr", "/lib", "/lib64", "/bin", "/sbin")):
                dirs[:] = []
                continue
            for name in files:
                try:
                    head = open(os.path.join(root, name), errors="ignore").read(200)
                    if "{(theirs / "h200.json").read_text()}" in head:
                        found.append(os.path.join(root, name))
                except OSError:
                    pass
        print("theirs:", found or "nowhere")
        """
    finished = _run(jail, scratch, code, counters=mine, timeout_s=120)
    said = _verdicts(finished)
    assert said["read"] == "mine", finished.tail
    assert said["write"].startswith("refused"), finished.tail
    assert said["theirs"] == "nowhere", finished.tail
    assert (mine / "h200.json").read_text() == "mine"
