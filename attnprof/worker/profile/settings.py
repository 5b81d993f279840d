"""The profile worker's settings: what a GPU host reads from its environment (``ATTNPROF_`` prefix, the same names
the service documents), and nothing that opens the database. ``attnprof.worker.cli`` reads them once and passes them on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from attnprof.contract import bundle
from attnprof.contract.secrets import no_placeholder
from attnprof.contract.worker_api import WORKER_ALIVE_S


class ProfileWorker(BaseModel):
    """The profile worker on a GPU host (``ATTNPROF_WORKER__*``). Durations in seconds."""

    device: Literal["auto", "cuda", "cpu"] = Field("auto", description="auto: the GPU if NVML sees one")
    timeout_s: float = Field(3600.0, gt=0, description="wall-clock limit of one job's profiling subprocess")
    memory_limit_mib: int | None = Field(
        None, ge=64, description="resident host memory of the subprocess tree; unset: 75% of the host's memory"
    )
    heartbeat_s: float = Field(10.0, gt=0, description="interval between heartbeats while a job runs")
    scratch_dir: str = Field("", description="parent of the per-job scratch directories; empty: the system's")
    cache_dir: str = Field("", description="the profiler's peaks cache; empty: ~/.cache/attnprof of the worker")
    output_lines: int = Field(40, ge=1, le=1000, description="last lines of the subprocess output kept")
    pass_env: list[str] = Field(
        default_factory=list, description="extra environment variables the subprocess may see (never ATTNPROF_*)"
    )
    trusted_single_tenant: bool = Field(
        False,
        description="the host runs one tenant's trusted code: where no bubblewrap jail can be built, jobs run without "
        "one instead of the worker refusing to start",
    )
    job_user: str = Field(
        "nobody", min_length=1, description="the unprivileged user jobs run as (and their uid inside the jail)"
    )
    jail: Literal["auto", "privileged", "userns", "none"] = Field(
        "auto",
        description="how the jail is built: privileged (bubblewrap as root, needs CAP_SYS_ADMIN), userns (bubblewrap "
        "in a user namespace, started as the job user by a root worker); auto: the first whose self-test passes; "
        "none: no jail, allowed only with trusted_single_tenant",
    )
    max_processes: int = Field(4096, ge=16, description="processes and threads a job may hold at once")
    disk_limit_mib: int = Field(
        8192, ge=16, description="what the job's folder (/job: its bundle, outputs, traces) may hold"
    )
    output_limit_mib: int = Field(64, ge=1, description="what a job may print (stdout and stderr together)")
    cgroup_parent: str = Field(
        "",
        description="the cgroup (a path in the hierarchy, e.g. /attnprof) each job's cgroup is made below, made if "
        "missing; empty: the worker's own cgroup, where the memory and pids controllers must be delegated to it",
    )
    limits: Literal["auto", "cgroup", "watchdog"] = Field(
        "auto",
        description="how a job's memory and processes are bounded: cgroup (a cgroup per job: memory including memfd, "
        "tmpfs and dirty page cache, and processes counted per job); watchdog (the resident memory of the job's "
        "processes, RLIMIT_NPROC per uid), allowed only with trusted_single_tenant; auto: cgroup where one can be "
        "made, else as watchdog",
    )
    tmpfs_mib: int = Field(1024, ge=16, description="size of the job's own /tmp and /dev/shm, each")
    counters: Literal["none", "cached"] = Field(
        "cached",
        description="cached: each kernel >= 5% of a case gets Nsight Compute's class from the project's counter cache "
        "on this host, and ncu replays the ones it lacks in the same job where ncu runs in the jail; none: the "
        "model's class only",
    )
    sandbox_ro_binds: list[str] = Field(
        default_factory=list, description="extra host paths the job sees read-only (a model cache, a toolkit)"
    )
    host: str = Field(
        "",
        max_length=100,
        pattern=r"^[A-Za-z0-9._-]*$",
        description="this host's name as jobs and canaries record it; empty: the machine's hostname (in Kubernetes, "
        "set it to the node's name: a pod's hostname changes with every pod)",
    )
    canary_every_jobs: int = Field(
        20, ge=0, description="run the host's canary again after this many jobs (0: not by count)"
    )
    canary_every_s: float = Field(
        3600.0, ge=0, description="run the host's canary again after this many seconds (0: not by time)"
    )
    canary_scale_file: str = Field(
        "",
        description='for tests only: a JSON file of canary figure to factor (e.g. {"copy_gbps": 0.8}), read at each '
        "canary and applied to its figures before they are sent, to make a host look degraded; the worker's own "
        "file, which no job can reach",
    )


class AliveReports(BaseModel):
    """``ATTNPROF_FAIRNESS__WORKER_ALIVE_S``: how often the worker tells the service it is alive, busy or idle (the
    service's other fairness settings are its own)."""

    worker_alive_s: float = Field(WORKER_ALIVE_S, gt=0, description="seconds between two reports")


class BundleLimits(BaseModel):
    """``ATTNPROF_LIMITS__BUNDLE_*``: the bounds a downloaded bundle is unpacked within (the service checked the same
    ones on arrival). Sizes in bytes."""

    bundle_bytes: int = Field(bundle.DEFAULT_BUNDLE_BYTES, ge=1024)
    bundle_unpacked_bytes: int = Field(
        bundle.DEFAULT_BUNDLE_UNPACKED_BYTES, ge=1024, description="total size of the bundle's files"
    )
    bundle_members: int = Field(bundle.DEFAULT_BUNDLE_MEMBERS, ge=1)


class GpuWorkerSettings(BaseSettings):
    """Everything a profile worker reads from its environment: the broker, the service and its worker token; no
    database URL (a GPU host holds no database credentials)."""

    model_config = SettingsConfigDict(env_prefix="ATTNPROF_", env_nested_delimiter="__", extra="ignore")

    broker_url: str = "filesystem://"
    broker_folder: str = Field("./attnprof-queue", description="message folder of the filesystem:// broker")
    service_url: str = Field("http://127.0.0.1:8000", description="the service, as a profile worker reaches it")
    worker_token: SecretStr | None = Field(None, description="a profile worker's token (bound to its testbed)")
    worker: ProfileWorker = Field(default_factory=ProfileWorker)
    fairness: AliveReports = Field(default_factory=AliveReports)
    limits: BundleLimits = Field(default_factory=BundleLimits)

    @field_validator("worker_token")
    @classmethod
    def _no_placeholder(cls, value: SecretStr | None) -> SecretStr | None:
        return no_placeholder(value)

    def with_worker(self, **changes: object) -> GpuWorkerSettings:
        """These settings with some of ``worker``'s fields changed (the device and jail the start chose), checked as
        the environment's values are."""
        worker = ProfileWorker.model_validate({**self.worker.model_dump(), **changes})
        return self.model_copy(update={"worker": worker})
