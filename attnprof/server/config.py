"""Settings: one ``Settings`` class read from the environment (``ATTNPROF_`` prefix) once, through ``get_settings``."""

from __future__ import annotations

import re
from functools import lru_cache
from ipaddress import IPv4Network, IPv6Network, ip_network
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from attnprof.contract import bundle
from attnprof.contract.provenance import REPO_CHARS, REPO_PATTERN
from attnprof.contract.secrets import is_placeholder, no_placeholder
from attnprof.contract.worker_api import WORKER_ALIVE_S

MIB = 1024 * 1024


class Limits(BaseModel):
    """Input bounds (docs/architecture.md, "Bounded inputs"). Sizes in bytes."""

    json_body_bytes: int = Field(32 * MIB, ge=1024)
    bundle_bytes: int = Field(bundle.DEFAULT_BUNDLE_BYTES, ge=1024)
    bundle_unpacked_bytes: int = Field(
        bundle.DEFAULT_BUNDLE_UNPACKED_BYTES, ge=1024, description="total size of the bundle's files"
    )
    bundle_members: int = Field(bundle.DEFAULT_BUNDLE_MEMBERS, ge=1)
    trace_bytes: int = Field(64 * MIB, ge=1024)
    ancestors: int = Field(50, ge=0, description="first-parent ancestors accepted with a job or upload")
    page_size_max: int = Field(1000, ge=1)
    body_min_rate_bytes_s: int = Field(
        64 * 1024,
        ge=1,
        description="the slowest a request body over 64 KiB may arrive after its first 10 s; slower, it is abandoned "
        "and its slot freed",
    )
    unfinished_bodies: int = Field(
        16,
        ge=1,
        description="request bodies over 64 KiB that one server process receives at once (each from a request whose "
        "credentials were checked before its body was read); past it: 503 with Retry-After",
    )


class RateLimit(BaseModel):
    """Per-token token bucket, per server process."""

    requests_per_minute: float = Field(1200.0, gt=0)
    burst: int = Field(200, ge=1)


class Analysis(BaseModel):
    baseline_runs: int = Field(3, ge=1, description="runs pooled into a baseline")
    ancestor_commits_pooled: int = Field(10, ge=1, description="ancestors searched to fill the pool")
    noise_history_runs: int = Field(20, ge=3, description="default-branch runs the noise floor is learnt from")
    alert_history_runs: int = Field(40, ge=10, description="default-branch runs searched for change points")
    pause_s: float = Field(
        0.0,
        ge=0,
        description="test knob: the analysis task waits this long, holding its lease, before it records the verdict "
        "(0 in production; the tests kill a worker mid-analysis)",
    )


class Sweep(BaseModel):
    """The sweeper (``jobs.sweep``, ``ATTNPROF_SWEEP__*``): what counts as lost. Durations in seconds."""

    interval_s: float = Field(10.0, gt=0, description="how often beat sends jobs.sweep")
    queued_stale_s: float = Field(60.0, gt=0, description="queued this long with no message in the broker: resend")
    heartbeat_stale_s: float = Field(
        60.0, gt=0, description="a running job's lease: a claim or heartbeat holds it this long; then the worker died"
    )
    analyzing_stale_s: float = Field(
        120.0,
        gt=0,
        description="an analyzing job's lease: the analysis must start this long after the result, and renews it "
        "every third of it while it works; then the analysis is sent again",
    )
    batch: int = Field(200, ge=1, description="jobs handled per sweep and per kind")
    feedback_retry_s: float = Field(
        30.0, gt=0, description="GitHub feedback that failed is retried after this, doubling each time up to 1 h"
    )
    feedback_attempts: int = Field(8, ge=1, description="deliveries of GitHub feedback tried before giving up")


class Fairness(BaseModel):
    """How the GPU pool is shared between projects (``ATTNPROF_FAIRNESS__*``): the dispatcher offers a testbed's
    queued jobs to its free live workers, round-robin across projects. Durations in seconds."""

    max_queued: int = Field(
        500, ge=1, description="queued jobs a project may have at once, all testbeds together; past it: 429"
    )
    max_running: int = Field(
        4,
        ge=1,
        description="jobs of one project running or offered on one testbed at once (a cap even while other workers "
        "of the testbed are idle)",
    )
    cancel_superseded: bool = Field(
        True,
        description="a newer push to a pull request cancels the queued and running jobs of its earlier commits",
    )
    worker_alive_s: float = Field(
        WORKER_ALIVE_S, gt=0, description="how often a profile worker tells the service it is alive"
    )
    worker_live_s: float = Field(
        30.0, gt=0, description="a worker counts as live this long after it last said so (several worker_alive_s)"
    )

    @model_validator(mode="after")
    def _live_outlasts_alive(self) -> Fairness:
        if self.worker_live_s < 2 * self.worker_alive_s:
            raise ValueError(
                f"worker_live_s ({self.worker_live_s:g}) must be at least twice worker_alive_s "
                f"({self.worker_alive_s:g}): one late report would make a worker count as gone"
            )
        return self


class Dashboard(BaseModel):
    """The web pages (``/ui``): sign-in with a project token, kept in a signed session cookie."""

    session_secret: SecretStr | None = Field(
        None,
        description="key that signs session cookies; unset: a random key per process (sign-ins end with a restart, "
        "and several server processes need one shared key)",
    )
    session_ttl_s: int = Field(8 * 3600, ge=60, le=30 * 24 * 3600, description="a sign-in lasts this long")
    cookie_secure: bool = Field(False, description="send the cookie over HTTPS only (set it behind TLS)")
    series_points: int = Field(600, ge=50, le=10_000, description="points a trend chart draws at most")
    github_repositories: dict[str, str] = Field(
        default_factory=dict,
        description="project name -> GitHub repository (owner/name), as JSON: a person signed in with GitHub may "
        "read a project whose repository they can read; a project not named here is never opened by GitHub sign-in",
    )
    github_scope: Literal["repo", ""] = Field(
        "repo",
        description="the OAuth scope GitHub sign-in asks for: 'repo' (GitHub's only scope that lets the app see "
        "which private repositories a person can read; it also grants write access, which attnprof never uses "
        "and never keeps), or '' (no scope: public repositories only)",
    )
    github_check_s: int = Field(
        900,
        ge=60,
        le=24 * 3600,
        description="a GitHub sign-in's repository access is read again this often (a silent round trip through "
        "GitHub for a person still signed in there)",
    )

    @field_validator("github_repositories")
    @classmethod
    def _repositories(cls, value: dict[str, str]) -> dict[str, str]:
        for project, repo in value.items():
            if len(repo) > REPO_CHARS or not re.fullmatch(REPO_PATTERN, repo):
                raise ValueError(f"project {project!r}: {repo!r} is not a GitHub repository (owner/name)")
        return value

    @field_validator("session_secret")
    @classmethod
    def _strong_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and (is_placeholder(value.get_secret_value()) or len(value.get_secret_value()) < 32):
            raise ValueError("must be a real secret of at least 32 characters, or unset")
        return value


class AlertWebhooks(BaseModel):
    """Delivery of new alerts to a project's webhook (``ATTNPROF_ALERT_WEBHOOKS__*``). Durations in seconds."""

    timeout_s: float = Field(10.0, gt=0, le=120, description="one POST to a receiver waits at most this long")
    retry_s: float = Field(30.0, gt=0, description="a refused delivery is retried after this, doubling up to 1 h")
    attempts: int = Field(8, ge=1, description="deliveries of one alert tried before giving up")
    allow_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="networks a webhook may reach besides public addresses, comma-separated CIDRs (10.0.0.0/8, "
        "fd12::/64, 127.0.0.1/32): loopback, link-local, private, shared, multicast and reserved addresses are "
        "refused unless one of these holds them; the cloud metadata service is refused whatever this says",
    )

    @field_validator("allow_networks", mode="before")
    @classmethod
    def _networks(cls, value: Any) -> Any:
        items = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else value
        if not isinstance(items, list):
            return items
        networks = []
        for item in items:
            try:
                networks.append(str(ip_network(str(item).strip(), strict=False)))
            except ValueError as exc:
                raise ValueError(f"{item!r} is not a network (10.0.0.0/8, 127.0.0.1/32, fd12::/64)") from exc
        return networks

    def networks(self) -> list[IPv4Network | IPv6Network]:
        """``allow_networks`` as networks."""
        return [ip_network(n) for n in self.allow_networks]


class Retention(BaseModel):
    """Stored artifacts (``ATTNPROF_RETENTION__*``): the defaults of every project that has set none of its own
    (``/api/v1/projects/{project}/retention``). Null keeps forever, or sets no quota. Result documents, samples and
    comparisons are never swept: trends and baselines are made of them."""

    trace_days: int | None = Field(None, ge=1, le=36500, description="traces of runs older than this are deleted")
    bundle_days: int | None = Field(
        None, ge=1, le=36500, description="source bundles of finished jobs last changed longer ago are deleted"
    )
    quota_bytes: int | None = Field(
        None, ge=1, description="stored artifact bytes (traces and bundles) per project; an upload past it is refused"
    )
    batch: int = Field(500, ge=1, description="traces and bundles deleted per project and per sweep")
    interval_s: float = Field(
        3600.0, gt=0, description="the sweeper enforces retention at most this often (per sweeper process)"
    )


class Bisect(BaseModel):
    """Bisections (``ATTNPROF_BISECT__*``, docs/bisection.md): the sweep starts one for each step that regression
    alerts find, reads commits and trees through GitHub with ``ATTNPROF_GITHUB_TOKEN`` (none set: alerts are not
    bisected; a request still is, from public repositories), and advances the open ones."""

    alerts: bool = Field(True, description="start a bisection for each new regression step (with a GitHub token)")
    alert_max_age_days: float = Field(7.0, gt=0, description="older alerts are not bisected when first seen")
    per_sweep: int = Field(20, ge=1, description="open bisections advanced per sweep")
    workdir: str = Field("./attnprof-bisect", description="where commits' trees are unpacked while they are packed")


class Health(BaseModel):
    """Host health (``ATTNPROF_HEALTH__*``, docs/service.md, "Host health"): how a host's canary is judged against
    the band its testbed's own history sets."""

    window_days: float = Field(7.0, gt=0, description="passing canaries this recent make the band")
    min_canaries: int = Field(3, ge=1, description="a testbed's band needs this many passing canaries (else: learning)")
    tolerance: float = Field(
        0.12,
        gt=0,
        lt=1,
        description="a GPU host may lose this share of the band's reference rate (the best host's) in any figure",
    )
    cpu_tolerance: float = Field(
        0.5, gt=0, lt=1, description="the same on a CPU testbed, whose figures wander with the host's load"
    )
    launch_tolerance: float = Field(
        1.0, gt=0, description="an empty kernel's launch may take this much longer than the reference (jitter)"
    )
    retry_s: float = Field(300.0, gt=0, description="a quarantined host runs its canary again after this")
    notify_days: float = Field(
        30.0,
        gt=0,
        description="a host's quarantine is sent to the webhooks of projects with a job on its testbed this recent",
    )


class Settings(BaseSettings):
    """Everything the service (and the analysis worker beside it) reads from its environment (docs/architecture.md,
    "Settings"). A profile worker reads its own (``attnprof.worker.profile.settings``)."""

    model_config = SettingsConfigDict(env_prefix="ATTNPROF_", env_nested_delimiter="__", extra="ignore")

    database_url: str = "sqlite:///./attnprof.db"
    broker_url: str = "filesystem://"
    broker_folder: str = Field("./attnprof-queue", description="message folder of the filesystem:// broker")
    public_url: str = "http://127.0.0.1:8000"
    github_api_url: str = "https://api.github.com"
    github_token: SecretStr | None = None
    github_webhook_secret: SecretStr | None = None
    github_web_url: str = Field(
        "https://github.com", description="GitHub's web address, where its OAuth sign-in pages are"
    )
    github_client_id: str | None = Field(
        None, max_length=100, description="the GitHub OAuth app's client id: set, the dashboard offers GitHub sign-in"
    )
    github_client_secret: SecretStr | None = Field(None, description="the GitHub OAuth app's client secret")
    max_attempts: int = Field(3, ge=1)
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="addresses or networks of the reverse proxies in front of the service, comma-separated; only a "
        "request from one of them has its client address taken from X-Forwarded-For (for the audit log)",
    )
    limits: Limits = Field(default_factory=Limits)
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    analysis: Analysis = Field(default_factory=Analysis)
    sweep: Sweep = Field(default_factory=Sweep)
    fairness: Fairness = Field(default_factory=Fairness)
    dashboard: Dashboard = Field(default_factory=Dashboard)
    alert_webhooks: AlertWebhooks = Field(default_factory=AlertWebhooks)
    retention: Retention = Field(default_factory=Retention)
    bisect: Bisect = Field(default_factory=Bisect)
    health: Health = Field(default_factory=Health)

    @model_validator(mode="after")
    def _oauth_app_whole(self) -> Settings:
        if (self.github_client_id is None) != (self.github_client_secret is None):
            raise ValueError(
                "github_client_id and github_client_secret go together: set both (GitHub sign-in) or neither"
            )
        return self

    @field_validator("github_token", "github_webhook_secret", "github_client_secret")
    @classmethod
    def _no_placeholder(cls, value: SecretStr | None) -> SecretStr | None:
        return no_placeholder(value)

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _networks(cls, value: Any) -> Any:
        items = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else value
        if isinstance(items, list):
            for item in items:
                try:
                    ip_network(str(item).strip(), strict=False)
                except ValueError as exc:
                    raise ValueError(f"{item!r} is not an address or a network (10.0.0.1, 10.0.0.0/8, ::1)") from exc
        return items

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str) -> str:
        if value.startswith("postgresql://"):
            # psycopg 3 is the driver we ship; the bare scheme would pick psycopg2.
            return "postgresql+psycopg://" + value.removeprefix("postgresql://")
        if not value.startswith(("postgresql+psycopg://", "sqlite://")):
            raise ValueError("must start with postgresql+psycopg:// or sqlite://")
        return value


SHARED_SECRETS = {
    "ATTNPROF_DASHBOARD__SESSION_SECRET": "signs the dashboard's session, CSRF and GitHub sign-in cookies",
}
"""Secrets that a process makes up for itself when they are unset, and that several server processes must share:
a cookie signed by one process is read by another (``--workers`` > 1, or several replicas behind one proxy)."""


def missing_shared_secrets(settings: Settings, processes: int) -> list[str]:
    """The variables of ``SHARED_SECRETS`` that ``processes`` server processes would each invent for themselves
    (empty for one process: its own random key is consistent with itself)."""
    if processes <= 1:
        return []
    found = {"ATTNPROF_DASHBOARD__SESSION_SECRET": settings.dashboard.session_secret}
    return [name for name in SHARED_SECRETS if found[name] is None]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment on first use."""
    return Settings()
