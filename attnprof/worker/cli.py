"""The ``worker`` and ``demo`` verbs.

``attnprof worker --testbed NAME``: a profile worker, one process per GPU (``--pool=solo``, one message at a
time, the GPU given by ``CUDA_VISIBLE_DEVICES`` or ``--gpu``). Before it takes a job it asks the service
for its token's testbed and checks, through NVML and without starting CUDA, that the GPU matches the
testbed's key; it refuses to start otherwise. Once its jail and peaks are ready it tells the service its device,
which keys a testbed that has no key yet (a testbed's key is its workers' word, never a result document's).
Settings: ``ATTNPROF_BROKER_URL``, ``ATTNPROF_SERVICE_URL``, ``ATTNPROF_WORKER_TOKEN`` and ``ATTNPROF_WORKER__*``
(``attnprof.worker.profile.settings``; no database). The settings are read once here; what the start chooses (the
device, the jail) is passed on in them, never written back to the environment.

``attnprof worker --analysis``: the analysis worker (database access) with beat, which sends ``jobs.sweep``.

Only typer and the standard library are imported at module level.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from attnprof.worker.profile.device import LocalDevice
    from attnprof.worker.profile.health import Health
    from attnprof.worker.profile.settings import GpuWorkerSettings

app = typer.Typer(add_completion=False, no_args_is_help=True, help="attnprof worker verbs.")
EXIT_BAD_INPUT = 2


class DeviceChoice(StrEnum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


def _die(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


@app.command()
def worker(
    testbed: Annotated[str | None, typer.Option(help="run a profile worker for this testbed (its token's)")] = None,
    analysis: Annotated[bool, typer.Option("--analysis", help="run the analysis worker instead")] = False,
    device: Annotated[
        DeviceChoice | None, typer.Option(help="profile on: auto (the GPU if NVML finds one), cuda or cpu")
    ] = None,
    gpu: Annotated[
        str | None, typer.Option(help="the one GPU to use (index or UUID): sets CUDA_VISIBLE_DEVICES")
    ] = None,
    beat: Annotated[bool, typer.Option("--beat/--no-beat", help="with --analysis: also run beat (the sweeper)")] = True,
    beat_schedule: Annotated[Path | None, typer.Option(help="beat's schedule file")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="with --analysis: analyses at once (threads)")] = 2,
    loglevel: Annotated[str, typer.Option(help="Celery's log level")] = "info",
    check: Annotated[bool, typer.Option("--check", help="check the device against the testbed, then exit")] = False,
    wait_for_service: Annotated[
        float, typer.Option(min=0, help="seconds to wait for the service to answer at start (it may start later)")
    ] = 60.0,
) -> None:
    """Run a profile worker (--testbed) or the analysis worker (--analysis) until stopped."""
    if (testbed is None) == (not analysis):
        raise _die("give --testbed NAME (a profile worker) or --analysis (the analysis worker)")
    if analysis:
        _analysis(beat, beat_schedule, concurrency, loglevel)
        return
    assert testbed is not None
    _profile(testbed, device, gpu, loglevel, check, wait_for_service)


def _profile(
    testbed: str, device: DeviceChoice | None, gpu: str | None, loglevel: str, check_only: bool, wait_s: float
) -> None:
    # The GPU is a choice of device, not a setting: CUDA reads these in the profiler's subprocesses, which inherit
    # this process's environment, so the environment is where they go.
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip().isdigit():
        # NVML numbers GPUs in PCI bus order; make CUDA (in the profiler's subprocess) number them the same way.
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    from attnprof.worker.profile import device as gpus
    from attnprof.worker.profile.api import ServiceAPIError, Unreachable, WorkerAPI
    from attnprof.worker.profile.settings import GpuWorkerSettings

    settings = GpuWorkerSettings()
    if settings.worker_token is None or not settings.worker_token.get_secret_value().strip():
        raise _die(
            "ATTNPROF_WORKER_TOKEN is not set (make one with: attnprof admin create-worker-token --testbed NAME)"
        )
    choice = (device.value if device else None) or settings.worker.device
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with WorkerAPI(settings.service_url, settings.worker_token.get_secret_value(), retries=1) as api:
                found = api.testbed()
            break
        except Unreachable as exc:
            if time.monotonic() >= deadline:
                raise _die(
                    f"cannot reach the service at {settings.service_url} (ATTNPROF_SERVICE_URL): {exc}"
                ) from None
            time.sleep(1.0)
        except ServiceAPIError as exc:
            raise _die(f"the service refused the worker token: {exc}") from None
    if found.name != testbed:
        raise _die(f"this worker token serves testbed {found.name!r}, not {testbed!r}")
    try:
        probed = gpus.probe_gpu() if choice != "cpu" else None
        mode = gpus.profile_mode(choice, probed)
        here = probed if mode == "cuda" and probed is not None else gpus.probe_cpu(_plain_env())
        why = gpus.check(found, here)
    except (gpus.DeviceMismatch, gpus.DeviceUnknown) as exc:
        raise _die(str(exc)) from None
    typer.echo(f"testbed {testbed}: {why}", err=True)
    settings = _jail_and_peaks(settings.with_worker(device=mode))
    if check_only:
        return
    _register(settings, testbed, here)
    from attnprof.worker.profile import health as hosts
    from attnprof.worker.profile.app import make_app

    health = _health(settings, testbed, mode)
    health.until_healthy(say=lambda line: typer.echo(line, err=True))
    celery = make_app(settings, health)
    _say_alive_while_consuming(settings, testbed, health)
    device_tag = os.environ.get("CUDA_VISIBLE_DEVICES", "cpu" if mode == "cpu" else "0").replace(",", "_")
    celery.worker_main(
        [
            "worker",
            "--pool=solo",
            "--concurrency=1",
            "--prefetch-multiplier=1",
            "-Q",
            f"profile.{testbed}",
            "-n",
            f"profile.{testbed}.{device_tag}.{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            loglevel,
        ]
    )
    if health.quarantined:  # it stopped consuming: back once its canary passes, as it was started
        typer.echo("this host is quarantined: the worker consumes nothing until its canary passes", err=True)
        health.until_healthy(say=lambda line: typer.echo(line, err=True))
        hosts.restart()


def _health(settings: GpuWorkerSettings, testbed: str, mode: str) -> Health:
    """The host's canary schedule, with the service that judges it."""
    from attnprof.worker.profile.api import WorkerAPI
    from attnprof.worker.profile.health import Health
    from attnprof.worker.profile.profile import worker_name

    assert settings.worker_token is not None
    token = settings.worker_token.get_secret_value()
    w = settings.worker
    return Health(
        lambda: WorkerAPI(settings.service_url, token),
        worker=worker_name(w.host),
        testbed=testbed,
        device=mode,
        env=_plain_env(),
        every_jobs=w.canary_every_jobs,
        every_s=w.canary_every_s,
        scale_file=w.canary_scale_file,
    )


def _register(settings: GpuWorkerSettings, testbed: str, here: LocalDevice) -> None:
    """Tell the service the device this worker probed (outside the jail, before any job), with the worker token:
    a testbed with no key takes it; one keyed by another device meanwhile (another worker) is refused by the
    service, and the worker then does not start."""
    from attnprof.worker.profile.api import ServiceAPIError, WorkerAPI

    assert settings.worker_token is not None
    try:
        with WorkerAPI(settings.service_url, settings.worker_token.get_secret_value()) as api:
            answer = api.register(here.key(), here.meaning())
    except ServiceAPIError as exc:
        raise _die(f"testbed {testbed}: {exc}") from None
    what = "keyed with this worker's device" if answer.keyed else "its key is this worker's device's"
    typer.echo(f"testbed {testbed}: {what} (key {answer.key})", err=True)


def _say_alive_while_consuming(settings: GpuWorkerSettings, testbed: str, health: Health) -> None:
    """From when Celery consumes until it shuts down, a thread tells the service every
    ``ATTNPROF_FAIRNESS__WORKER_ALIVE_S`` that this worker is alive (busy or idle): the dispatcher offers the
    testbed as many jobs as it has live workers free. Another runs the host's canary when it falls due while
    idle."""
    from celery.signals import worker_ready, worker_shutting_down  # type: ignore[import-untyped]

    from attnprof.worker.profile.api import WorkerAPI
    from attnprof.worker.profile.profile import Liveness, worker_name

    assert settings.worker_token is not None
    token = settings.worker_token.get_secret_value()
    liveness = Liveness(
        lambda: WorkerAPI(settings.service_url, token, retries=0),
        worker=worker_name(settings.worker.host),
        testbed=testbed,
        interval_s=settings.fairness.worker_alive_s,
    )

    def consuming(**_: object) -> None:
        liveness.start()
        health.watch()

    def stopping(**_: object) -> None:
        liveness.finish()
        health.finish()

    worker_ready.connect(consuming, weak=False)
    worker_shutting_down.connect(stopping, weak=False)


def _jail_and_peaks(settings: GpuWorkerSettings) -> GpuWorkerSettings:
    """Build the jail and prove it holds (a probe through it), then measure the peaks (on ``settings.worker.device``)
    in a trusted step with no user code: jobs see the peaks cache read-only. Refuses to go on, saying why, where no
    jail can be built, unless the host is declared trusted and single-tenant. With ``ATTNPROF_WORKER__JAIL=auto`` a
    root worker tries the privileged jail, then the user-namespace one, and keeps the first that passes.

    Returns ``settings`` with the jail it chose (``worker.jail``: the strategy that passed, or ``none``): every job's
    jail is built that way."""
    import importlib.util
    from urllib.parse import urlsplit

    from attnprof.worker.profile import jail as jails
    from attnprof.worker.profile.profile import ProfileConfig, job_jail

    mode = settings.worker.device
    strategies: list[str] = [settings.worker.jail]
    if settings.worker.jail == "auto" and os.geteuid() == 0:
        strategies = ["privileged", "userns"]
    failures: list[str] = []
    cfg: ProfileConfig | None = None
    chosen = settings
    for strategy in strategies:
        chosen = settings if strategy == "auto" else settings.with_worker(jail=strategy)
        try:
            jail = job_jail(chosen)
        except jails.JailUnavailable as exc:
            failures.append(f"{strategy}: {exc}")
            continue
        if jail is None:
            chosen = chosen.with_worker(jail="none")
            cfg = ProfileConfig.from_settings(chosen)
            break
        chosen = chosen.with_worker(jail=jail.strategy)
        cfg = ProfileConfig.from_settings(chosen)
        addresses = []
        for url in (settings.broker_url, settings.service_url):
            parts = urlsplit(url)
            if parts.hostname and parts.port:
                addresses.append((parts.hostname, parts.port))
        # The worker's and the service's code (a checkout's, or the installed packages'), found without importing
        # the service's: a profile worker loads none of it.
        server = importlib.util.find_spec("attnprof.server")
        code = [Path(__file__).resolve().parent]
        if server is not None and server.origin:
            code.append(Path(server.origin).resolve().parent)
        try:
            jail.self_test(
                cfg.scratch_root, forbidden=[Path.home(), cfg.scratch_root, cfg.cache_dir, *code], addresses=addresses
            )
        except jails.JailUnavailable as exc:
            failures.append(f"{jail.strategy}: {exc}")
            cfg = None
            continue
        typer.echo(f"jail: bubblewrap ({jail.strategy}), jobs run as {jail.job_user}; self-test passed", err=True)
        break
    if cfg is None:
        if not settings.worker.trusted_single_tenant:
            raise _die(
                "no jail for jobs can be built here: " + " | ".join(failures) + ". Set "
                "ATTNPROF_WORKER__TRUSTED_SINGLE_TENANT=true only on a host that runs one tenant's trusted code"
            )
        chosen = settings.with_worker(jail="none")
        cfg = ProfileConfig.from_settings(chosen)
    if cfg.jail is None:
        typer.echo(
            "WARNING: no jail can be built here: jobs run WITHOUT a sandbox, as ATTNPROF_WORKER__TRUSTED_SINGLE_TENANT "
            "allows. Never do this on a host shared by several tenants."
            + (f" ({' | '.join(failures)})" if failures else ""),
            err=True,
        )
    command = [sys.executable, "-m", "attnprof.core", "calibrate", "--device", mode, "--cache-dir", str(cfg.cache_dir)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=_plain_env())
    if done.returncode != 0:
        raise _die(f"measuring the peaks failed: {(done.stderr or done.stdout).strip()[-500:]}")
    typer.echo(f"peaks: {done.stdout.strip()}", err=True)
    if done.stderr.strip():  # not cached (a busy host): the worker starts, and each job measures its own peaks
        typer.echo(done.stderr.strip()[-500:], err=True)
    return chosen


def _plain_env() -> dict[str, str]:
    """The calibration's environment: no secret of the worker's, and the profiler importable the way the worker
    imports it (its own ``PYTHONPATH`` too: this step runs the worker's code, no user's)."""
    from attnprof.worker.profile.jail import profiler_parent
    from attnprof.worker.profile.sandbox import scrubbed_env

    parent = profiler_parent()
    tmp = Path(tempfile.gettempdir())
    own = [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return scrubbed_env(os.environ, home=Path.home(), tmp=tmp, pythonpath=parent or tmp, library_paths=own)


def _analysis(beat: bool, schedule: Path | None, concurrency: int, loglevel: str) -> None:
    from attnprof.server.config import get_settings
    from attnprof.worker.analysis.app import make_app

    celery = make_app(get_settings())

    argv = [
        "worker",
        "--pool=threads",
        f"--concurrency={concurrency}",
        "-Q",
        "analysis",
        "-n",
        f"analysis.{os.getpid()}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        loglevel,
    ]
    if beat:
        path = schedule or Path(tempfile.gettempdir()) / "attnprof-beat-schedule"
        argv += ["-B", "-s", str(path)]
    celery.worker_main(argv)


@app.command()
def demo(
    once: Annotated[bool, typer.Option("--once", help="stop after printing the verdicts (for CI and scripts)")] = False,
    port: Annotated[int, typer.Option(help="the service's port (0: a free one)")] = 8000,
    workdir: Annotated[Path, typer.Option("--dir", help="where the demo keeps its database, queue and logs")] = Path(
        "out/demo"
    ),
) -> None:
    """The whole flow on one machine, no Postgres or Redis: service, Celery workers, two submitted jobs."""
    from attnprof.worker.demo import run_demo

    raise typer.Exit(run_demo(workdir=workdir, port=port, once=once))
