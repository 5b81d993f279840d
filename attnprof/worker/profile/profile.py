"""One attempt of a profiling job on a GPU host: the plain code behind the ``profile.run`` task.

claim with the worker token and the message's one-time claim secret (queued → running; a stale or duplicate
delivery is dropped), which answers with the attempt's job token → heartbeats in a thread (a cancel, or a 409 or
401 saying the attempt is over, stops the subprocess) → fetch the bundle and unpack it, checked,
into a scratch directory → run ``python -m attnprof.core profile`` in the sandbox (a paired job: its base bundle
too, and the paired run, ``attnprof.worker.profile.paired``) → upload the result document and its traces, or the
failure with its reason. The scratch directory is removed whatever happens.

Talks to the service over HTTP with the worker token (the claim) and the job token (everything after it) only: a
GPU host holds no database credentials.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import socket
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from attnprof.contract import bundle as archive
from attnprof.contract.ids import JobId
from attnprof.contract.worker_api import ClaimAnswer
from attnprof.core.counter_cache import CounterCache, counters_path, store_measured
from attnprof.core.documents import ResultDocument
from attnprof.worker.profile import cgroup as cgroups
from attnprof.worker.profile import handback, outcome, owner, paired, sandbox
from attnprof.worker.profile import jail as jails
from attnprof.worker.profile import scratch as scratches
from attnprof.worker.profile.api import Refused, ServiceAPIError, Stale, Unreachable, WorkerAPI
from attnprof.worker.profile.device import GpuWatch
from attnprof.worker.profile.settings import GpuWorkerSettings

log = logging.getLogger(__name__)

Outcome = Literal["uploaded", "failed", "cancelled", "lost", "dropped", "unreachable"]
SPEC_NAME = "attnprof.toml"


def default_memory_limit_bytes() -> int:
    """75% of the host's physical memory (the rest is the worker's, the system's and the page cache's)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 16 * 1024**3
    return int(total * 0.75)


def worker_name(host: str = "") -> str:
    """Host (``host``, else the machine's name), process and GPU of this worker, as recorded on the jobs it claims
    and its canaries (the service's host is this without the process: ``attnprof.contract.worker_api.host_of``)."""
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not gpu:  # a container given its GPU by NVIDIA's runtime (Kubernetes' device plugin): its UUID
        given = os.environ.get("NVIDIA_VISIBLE_DEVICES", "").strip()
        gpu = "" if given.lower() in ("", "all", "none", "void") else given
    return f"{host or socket.gethostname()}/pid{os.getpid()}" + (f"/gpu{gpu}" if gpu else "")


@dataclass(frozen=True)
class ProfileConfig:
    """What one profile worker needs, read from the settings once per task."""

    service_url: str
    token: str
    device: str
    timeout_s: float
    memory_limit_bytes: int
    heartbeat_s: float
    scratch_root: Path
    cache_dir: Path
    output_lines: int
    pass_env: tuple[str, ...]
    bundle_bytes: int
    bundle_unpacked_bytes: int
    bundle_members: int
    jail: jails.Jail | None = None
    max_processes: int = 0
    disk_limit_bytes: int = 0
    output_limit_bytes: int = 64 * 1024 * 1024
    cgroups: cgroups.Cgroups | None = None
    worker: str = field(default_factory=worker_name)
    counters: str = "none"

    @classmethod
    def from_settings(cls, settings: GpuWorkerSettings) -> ProfileConfig:
        w = settings.worker
        if settings.worker_token is None or not settings.worker_token.get_secret_value().strip():
            raise RuntimeError("ATTNPROF_WORKER_TOKEN is not set: a profile worker needs its testbed's worker token")
        return cls(
            service_url=settings.service_url,
            token=settings.worker_token.get_secret_value(),
            device=w.device,
            timeout_s=w.timeout_s,
            memory_limit_bytes=w.memory_limit_mib * 1024 * 1024 if w.memory_limit_mib else default_memory_limit_bytes(),
            heartbeat_s=w.heartbeat_s,
            scratch_root=Path(w.scratch_dir or tempfile.gettempdir()) / "attnprof-jobs",
            cache_dir=Path(w.cache_dir) if w.cache_dir else Path.home() / ".cache" / "attnprof",
            output_lines=w.output_lines,
            pass_env=tuple(w.pass_env),
            bundle_bytes=settings.limits.bundle_bytes,
            bundle_unpacked_bytes=settings.limits.bundle_unpacked_bytes,
            bundle_members=settings.limits.bundle_members,
            jail=(jail := job_jail(settings)),
            max_processes=w.max_processes,
            disk_limit_bytes=w.disk_limit_mib * 1024 * 1024,
            output_limit_bytes=w.output_limit_mib * 1024 * 1024,
            cgroups=job_cgroups(w.limits, w.cgroup_parent, trusted=w.trusted_single_tenant or jail is None),
            counters=w.counters,
            worker=worker_name(w.host),
        )


def job_jail(settings: GpuWorkerSettings) -> jails.Jail | None:
    """The jail for this worker's jobs; ``None`` only on a host declared trusted and single-tenant where none can
    be built. Raises ``JailUnavailable`` otherwise."""
    w = settings.worker
    if w.jail == "none":
        if not w.trusted_single_tenant:
            raise jails.JailUnavailable("ATTNPROF_WORKER__JAIL=none needs ATTNPROF_WORKER__TRUSTED_SINGLE_TENANT=true")
        return None
    devices: list[str] = []
    if w.device != "cpu":
        from attnprof.worker.profile.device import probe_minor

        minor = probe_minor()
        if minor is None:
            # Without the GPU's own node the jail would be given every GPU of the host, other tenants' included.
            raise jails.JailUnavailable(
                "NVML cannot name this worker's GPU (its minor number): a jail would be given every GPU of the "
                "host; check the driver, pynvml and CUDA_VISIBLE_DEVICES (an index or a GPU- UUID)"
            )
        devices = jails.gpu_nodes(minor)
    try:
        return jails.Jail.build(
            job_user=w.job_user,
            devices=devices,
            extra_ro_binds=w.sandbox_ro_binds,
            tmpfs_mib=w.tmpfs_mib,
            max_processes=w.max_processes,
            strategy=None if w.jail == "auto" else w.jail,
        )
    except jails.JailUnavailable:
        if w.trusted_single_tenant:
            return None
        raise


@functools.lru_cache(maxsize=4)
def job_cgroups(mode: str, parent: str = "", *, trusted: bool) -> cgroups.Cgroups | None:
    """Where each job's cgroup is made (found and self-tested once per worker process); ``None`` where jobs are
    bounded by the watchdog alone, which only a trusted single-tenant host may do. Raises ``JailUnavailable`` (the
    worker refuses to start) where no cgroup can be made and none may be done without."""
    if mode == "watchdog":
        if not trusted:
            raise jails.JailUnavailable(
                "ATTNPROF_WORKER__LIMITS=watchdog needs ATTNPROF_WORKER__TRUSTED_SINGLE_TENANT=true: the watchdog "
                "sees neither memfd nor tmpfs, and a uid's process limit is shared by every job of that uid"
            )
        return None
    try:
        found = cgroups.Cgroups.find(parent)
        found.self_test()
        return found
    except (cgroups.CgroupUnavailable, OSError) as exc:
        if mode == "auto" and trusted:
            log.warning("no cgroup for jobs (%s): the watchdog alone bounds them on this trusted host", exc)
            return None
        raise jails.JailUnavailable(
            f"no cgroup can be made for a job's limits: {exc}. A root worker needs the memory and pids controllers "
            "(cgroup v2, or v1 hierarchies) writable; ATTNPROF_WORKER__LIMITS=watchdog is for a trusted single-tenant "
            "host only"
        ) from None


class HeartbeatThread(threading.Thread):
    """Beats every ``interval_s`` while the attempt runs; sets ``stop`` when the job was cancelled (``cancelled``)
    or is no longer this attempt's (``lost``: the sweeper gave it to another attempt, or it is gone)."""

    def __init__(self, api: Callable[[], WorkerAPI], job_id: JobId, attempt: int, interval_s: float) -> None:
        super().__init__(name=f"heartbeat-{job_id}", daemon=True)
        self._api = api
        self._job_id = job_id
        self._attempt = attempt
        self._interval_s = interval_s
        self._done = threading.Event()
        self.stop = threading.Event()
        self.cancelled = False
        self.lost = ""

    def run(self) -> None:
        with self._api() as api:
            while not self._done.wait(self._interval_s):
                try:
                    if api.heartbeat(self._job_id, self._attempt).cancelled:
                        self.cancelled = True
                        self.stop.set()
                        return
                except Stale as exc:
                    self.lost = str(exc)
                    self.stop.set()
                    return
                except (Unreachable, Refused) as exc:  # keep beating: the sweeper decides when silence means death
                    log.warning("heartbeat of job %s attempt %s failed: %s", self._job_id, self._attempt, exc)

    def finish(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join(timeout=self._interval_s + 5)


class Liveness(threading.Thread):
    """Tells the service every ``interval_s``, busy or idle, that this worker of ``testbed`` is alive, until
    ``finish``: the dispatcher offers a testbed as many jobs as it has live workers free. A report that fails is
    logged (once, until one is answered again) and the next one is the retry."""

    def __init__(self, api: Callable[[], WorkerAPI], *, worker: str, testbed: str, interval_s: float) -> None:
        super().__init__(name="liveness", daemon=True)
        self._api = api
        self._worker = worker
        self._testbed = testbed
        self._interval_s = interval_s
        self._done = threading.Event()
        self.answered = 0

    def run(self) -> None:
        failing = ""
        with self._api() as api:
            while True:
                try:
                    api.alive(self._worker, self._testbed)
                    self.answered += 1
                    if failing:
                        log.info("the service hears this worker again")
                        failing = ""
                except ServiceAPIError as exc:
                    if str(exc) != failing:
                        log.warning("cannot tell the service this worker is alive: %s", exc)
                    failing = str(exc)
                if self._done.wait(self._interval_s):
                    return

    def finish(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join(timeout=self._interval_s + 5)


def profiler_argv(
    cfg: ProfileConfig, root: Path, cache_dir: Path, *, is_paired: bool = False, counters_dir: Path | None = None
) -> list[str]:
    """The profiling command, with the scratch folder at ``root`` and the peaks cache at ``cache_dir`` (as the job
    sees them: inside the jail, ``/job`` and ``/peaks``); a paired job's profiles its two trees interleaved. With
    ``counters_dir`` (the project's counter cache, ``/counters`` in the jail) and the worker's counters setting
    ``cached``, an unpaired profile reads its kernels' counter classes there and replays the rest under ncu."""
    if is_paired:
        return paired.ab_argv(root, cache_dir, device=cfg.device, pid_namespace=cfg.jail is not None)
    argv = [
        sys.executable,
        "-m",
        "attnprof.core",
        "profile",
        str(root / SPEC_NAME),
        "--device",
        cfg.device,
        "--out",
        str(root / "out" / "result.json"),
        "--trace-dir",
        str(root / "out" / "traces"),
        "--cache-dir",
        str(cache_dir),
        "--quiet",
    ]
    if cfg.counters == "cached" and counters_dir is not None:
        argv += ["--counters", "cached", "--counters-dir", str(counters_dir)]
    return [*argv, "--pid-namespace"] if cfg.jail is not None else argv


def project_counters(cfg: ProfileConfig, project: str | None) -> Path | None:
    """The host folder of ``project``'s counter cache (made here), or None where the worker takes no counters. One
    folder per project: a job's document is its own output, so what it says a kernel's counters are may only ever
    be read back by the same project's jobs."""
    if cfg.counters != "cached" or not project:
        return None
    folder = cfg.cache_dir / "counters-by-project" / hashlib.sha256(project.encode()).hexdigest()[:32]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def keep_counters(folder: Path | None, document: ResultDocument) -> int:
    """Put the counters ncu read in this job into the project's cache on this host; how many kernels."""
    if folder is None:
        return 0
    cache = CounterCache.load(counters_path(folder, document.environment.testbed_key))
    stored = store_measured(document.cases, cache, document.environment)
    try:
        cache.save()
    except OSError as exc:
        log.warning("the counter cache %s was not written: %s", cache.path, exc)
    return stored


def run_job(
    job_id: JobId, attempt: int, claim_secret: str, cfg: ProfileConfig, api: Callable[[], WorkerAPI] | None = None
) -> Outcome:
    """Run attempt ``attempt`` of job ``job_id``, claimed with its message's ``claim_secret``, and report its result
    or failure to the service."""
    connect = api or (lambda: WorkerAPI(cfg.service_url, cfg.token))
    for path in scratches.reap_stale(cfg.scratch_root):
        log.warning("removed %s, left by a worker that is gone", path)
    for name in cfg.cgroups.reap_stale() if cfg.cgroups is not None else []:
        log.warning("removed the cgroup %s, left by a worker that is gone", name)
    with connect() as worker_http:
        try:
            claim = worker_http.claim(job_id, attempt, cfg.worker, claim_secret)
        except Stale as exc:
            log.info("job %s attempt %s: not claimed (%s): dropping the message", job_id, attempt, exc)
            return "dropped"
        except (Unreachable, Refused) as exc:
            # The row stays queued; the sweeper sends the job again once the service answers.
            log.error("job %s attempt %s: cannot claim: %s", job_id, attempt, exc)
            return "unreachable"
        # From here on only the attempt's job token opens the job: the worker token opened the claim alone.
        attempt_api = functools.partial(worker_http.for_job, claim.token)
    with attempt_api() as http:
        beat = HeartbeatThread(attempt_api, job_id, attempt, cfg.heartbeat_s)
        scratch: scratches.Scratch | None = None
        try:
            beat.start()
            scratch = scratches.make(cfg.scratch_root, job_id, attempt, disk_bytes=cfg.disk_limit_bytes)
            return _attempt(http, claim, job_id, attempt, cfg, scratch, beat)
        except (Stale, Unreachable, Refused) as exc:
            # The job stays running without heartbeats: the sweeper gives it to the next attempt.
            log.error("job %s attempt %s: the service did not take the outcome: %s", job_id, attempt, exc)
            return "unreachable" if isinstance(exc, Unreachable) else "lost"
        except Exception as exc:
            log.exception("job %s attempt %s: the worker failed", job_id, attempt)
            failure = outcome.JobFailure(f"the worker failed: {type(exc).__name__}: {exc}", retry=True)
            try:
                _report(http, job_id, attempt, failure)
            except ServiceAPIError as report_exc:
                log.error("job %s attempt %s: the failure was not recorded: %s", job_id, attempt, report_exc)
            return "failed"
        finally:
            beat.finish()
            if scratch is not None:
                scratches.remove(scratch.path)


def _report(http: WorkerAPI, job_id: JobId, attempt: int, failure: outcome.JobFailure) -> None:
    """Record the failed attempt; a 409/404 (cancelled meanwhile, or another attempt's now) is not an error."""
    try:
        http.failure(job_id, attempt, failure.reason, timed_out=failure.timed_out, retry=failure.retry)
    except Stale as exc:
        log.info("job %s attempt %s: failure not recorded: %s", job_id, attempt, exc)


def _attempt(
    http: WorkerAPI,
    claim: ClaimAnswer,
    job_id: JobId,
    attempt: int,
    cfg: ProfileConfig,
    scratch: scratches.Scratch,
    beat: HeartbeatThread,
) -> Outcome:
    job = scratch.job
    src = job / "src"
    if claim.bundle_sha256:
        try:
            data = http.bundle(job_id, max_bytes=cfg.bundle_bytes)
        except (Unreachable, Refused) as exc:
            _report(http, job_id, attempt, outcome.JobFailure(f"could not download the bundle: {exc}", retry=True))
            return "failed"
        try:
            archive.unpack(
                data,
                src,
                max_bytes=cfg.bundle_bytes,
                max_unpacked_bytes=cfg.bundle_unpacked_bytes,
                max_members=cfg.bundle_members,
            )
        except archive.BundleRefused as exc:
            _report(http, job_id, attempt, outcome.JobFailure(f"the bundle was refused on the worker: {exc}"))
            return "failed"
    is_paired = claim.paired
    if is_paired:
        refused = paired.fetch_base(
            http,
            job_id,
            job,
            max_bytes=cfg.bundle_bytes,
            max_unpacked_bytes=cfg.bundle_unpacked_bytes,
            max_members=cfg.bundle_members,
        )
        if refused is not None:
            _report(http, job_id, attempt, refused)
            return "failed"
    (job / SPEC_NAME).write_text(claim.spec)
    if beat.stop.is_set():
        return "cancelled" if beat.cancelled else "lost"
    counters = None if is_paired else project_counters(cfg, claim.project)
    finished, foreign = _run_jailed(job_id, attempt, cfg, scratch, beat, is_paired=is_paired, counters=counters)
    if finished.stopped == "cancelled" or beat.stop.is_set():
        why = "cancelled" if beat.cancelled else f"lost ({beat.lost})"
        log.info("job %s attempt %s: %s: the subprocess was stopped", job_id, attempt, why)
        return "cancelled" if beat.cancelled else "lost"
    # From here on the job's folder is what the job left: read only through handback (no link followed, only
    # regular files, every read bounded).
    with handback.Folder(job) as folder:
        document = outcome.read_document(folder, "out/result.json")
        if isinstance(document, ResultDocument):
            outcome.note_foreign_gpu_processes(document, foreign)
        decided = outcome.decide(
            finished,
            document,
            timeout_s=cfg.timeout_s,
            memory_limit_bytes=cfg.memory_limit_bytes,
            disk_limit_bytes=cfg.disk_limit_bytes,
            output_limit_bytes=cfg.output_limit_bytes,
            max_processes=cfg.max_processes,
        )
        base, pairs = None, None
        if is_paired and isinstance(decided, ResultDocument):
            sides = paired.read_sides(folder, decided)
            if isinstance(sides, outcome.JobFailure):
                decided = outcome.JobFailure(outcome.with_output(sides.reason, finished.tail))
            else:
                base, pairs = sides
        if isinstance(decided, outcome.JobFailure):
            _report(http, job_id, attempt, decided)
            log.info("job %s attempt %s: failed: %s", job_id, attempt, decided.reason.splitlines()[0])
            return "failed"
        answer = http.result(job_id, attempt, decided, base=base, paired=pairs)
        keep_counters(counters, decided)
        _upload_traces(http, job_id, attempt, decided, folder)
    log.info("job %s attempt %s: result stored as run %s in %.1f s", job_id, attempt, answer.run_id, finished.wall_s)
    return "uploaded"


def _run_jailed(
    job_id: JobId,
    attempt: int,
    cfg: ProfileConfig,
    scratch: scratches.Scratch,
    beat: HeartbeatThread,
    *,
    is_paired: bool,
    counters: Path | None = None,
) -> tuple[sandbox.Finished, list[int]]:
    """Run the profiler over the job's folder, in the jail and the job's cgroup when the worker has them; how it
    ended, and the host PIDs seen on the GPU meanwhile that were not the job's."""
    job = scratch.job
    # Inside the jail the job's folder is /job and the peaks cache /peaks (read-only); without one (a trusted
    # single-tenant host) the real paths.
    root = jails.JOB_ROOT if cfg.jail is not None else job
    parent = jails.profiler_parent()
    env = sandbox.scrubbed_env(
        os.environ,
        home=root / "home",
        tmp=root / "tmp",
        pythonpath=root / "src",
        extra=cfg.pass_env,
        library_paths=[parent] if parent else [],
    )
    limits = sandbox.ProcessLimits(
        timeout_s=cfg.timeout_s,
        memory_bytes=cfg.memory_limit_bytes,
        max_processes=cfg.max_processes,
        output_bytes=cfg.output_limit_bytes,
        disk_bytes=cfg.disk_limit_bytes,
    )
    args_fd: int | None = None
    if cfg.jail is not None:
        env.update(cfg.jail.env())
        cfg.jail.prepare(job, etc=scratch.etc)
        argv, args_fd = jails.hidden_argv(
            cfg.jail.argv(
                profiler_argv(
                    cfg, root, jails.PEAKS_DIR, is_paired=is_paired, counters_dir=counters and jails.COUNTERS_DIR
                ),
                scratch=job,
                etc=scratch.etc,
                peaks=cfg.cache_dir,
                cwd=root / "src",
                counters=counters,
            )
        )
    else:
        argv = profiler_argv(cfg, root, cfg.cache_dir, is_paired=is_paired, counters_dir=counters)
    log.info("job %s attempt %s: profiling in %s", job_id, attempt, scratch.path)
    watch = GpuWatch() if cfg.jail is not None and cfg.device != "cpu" else None
    cgroup = (
        cfg.cgroups.create(
            f"attnprof-{job_id}-a{attempt}-{owner.tag()}",
            memory_bytes=cfg.memory_limit_bytes,
            max_processes=cfg.max_processes,
        )
        if cfg.cgroups is not None
        else None
    )
    try:
        finished = sandbox.run(
            argv,
            cwd=job / "src",
            env=env,
            limits=limits,
            stop=beat.stop,
            lines=cfg.output_lines,
            run_as=cfg.jail.run_as if cfg.jail is not None else None,
            watch=watch,
            cgroup=cgroup,
            disk_bytes=scratch.used_bytes,
            pass_fds=() if args_fd is None else (args_fd,),
        )
    finally:
        if args_fd is not None:
            os.close(args_fd)
        if cgroup is not None:
            cgroup.remove()
        if watch is not None:
            watch.close()
    return finished, watch.foreign(finished.pids) if watch is not None else []


# What the worker reads of one trace before handing it on: the service's default limit for a trace; a larger one
# is skipped here as the service would refuse it there.
TRACE_MAX_BYTES = 64 * 1024 * 1024
# A trace's name: one plain component, nothing a URL path or the trace folder would read another way.
_TRACE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")


def _upload_traces(
    http: WorkerAPI, job_id: JobId, attempt: int, document: ResultDocument, folder: handback.Folder
) -> None:
    for name in sorted({c.trace for c in document.cases if c.trace}):
        # The document is the user's process's output: a name is one plain component of the trace folder, and the
        # file is read without following a link on the way (handback).
        if not _TRACE_NAME.fullmatch(name):
            log.warning(
                "job %s: trace %r not stored: a trace's name is letters, digits, '.', '_' and '-'", job_id, name
            )
            continue
        try:
            data = folder.read(f"out/traces/{name}", max_bytes=TRACE_MAX_BYTES)
        except handback.Refused as exc:
            log.warning("job %s: trace %s not stored: %s", job_id, name, exc)
            continue
        try:
            http.trace(job_id, attempt, name, data)
        except Refused as exc:  # a trace over the limit: the run is stored without it
            log.warning("job %s: trace %s not stored: %s", job_id, name, exc)
