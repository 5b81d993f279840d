"""docker-compose.yml and Dockerfile.gpu, parsed: the services, their commands and their environment agree
with the code (the settings' names, the verbs and their options), and a GPU worker holds no database secret."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from attnprof.cli import VERBS
from attnprof.server.config import Settings
from attnprof.worker.profile.settings import GpuWorkerSettings

REPO = Path(__file__).resolve().parents[2]
BROKER_URL = "redis://:${REDIS_PASSWORD:?set REDIS_PASSWORD}@redis:6379/0"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return data


@pytest.fixture(scope="module")
def dockerfile() -> dict[str, dict[str, Any]]:
    """Stages of Dockerfile.gpu: their ENV names, COPY sources, and ENTRYPOINT + CMD (exec form)."""
    text = (REPO / "Dockerfile.gpu").read_text().replace("\\\n", " ")
    stages: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word == "FROM":
            name = rest.split(" AS ")[1].strip()
            current = stages[name] = {"env": {}, "copy": [], "entrypoint": [], "cmd": [], "run": []}
        elif word == "ENV":
            for k, v in re.findall(r"(\w+)=(\S+)", rest):
                current["env"][k] = v
        elif word == "COPY":
            current["copy"].append(rest.split()[0])
        elif word in ("ENTRYPOINT", "CMD"):
            current[word.lower()] = __import__("json").loads(rest)
        elif word == "RUN":
            current["run"].append(rest)
    return stages


def _setting_exists(name: str) -> bool:
    """Whether ``ATTNPROF_...`` names a field of the service's ``Settings`` or of a profile worker's
    ``GpuWorkerSettings`` (``__`` reaches into a nested group)."""
    return _field_of(Settings, name) or _field_of(GpuWorkerSettings, name)


def _field_of(settings: type[Any], name: str) -> bool:
    path = name.removeprefix("ATTNPROF_").lower().split("__")
    model: Any = settings
    for part in path:
        fields = model.model_fields
        if part not in fields:
            return False
        model = fields[part].annotation
    return True


def _options(argv: list[str]) -> tuple[str, set[str]]:
    """The verb of an ``attnprof`` command line and the options its Typer command accepts."""
    assert argv[0] == "attnprof", argv
    verb = argv[1]
    module = __import__(VERBS[verb][0], fromlist=["app"])
    group = typer.main.get_command(module.app)
    cmd = group.commands[verb]  # type: ignore[attr-defined]
    if hasattr(cmd, "commands"):  # a group: db upgrade, admin ...
        cmd = cmd.commands[argv[2]]
    return verb, {o for p in cmd.params for o in p.opts + p.secondary_opts}


def _check_command(argv: list[str]) -> None:
    verb, known = _options(argv)
    used = {a for a in argv[2:] if a.startswith("--")}
    assert used <= known, (verb, used - known)


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    return {k: str(v) for k, v in env.items()}


def test_the_services_of_a_deployment(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {
        "postgres",
        "redis",
        "migrate",
        "service",
        "analysis-worker",
        "gpu-worker",
        "proxy",
    }
    for name, svc in compose["services"].items():
        if "build" in svc:
            assert svc["build"]["dockerfile"] == "Dockerfile.gpu", name


def test_every_attnprof_variable_is_a_setting(compose: dict[str, Any], dockerfile: dict[str, dict[str, Any]]) -> None:
    names = {k for svc in compose["services"].values() for k in _env(svc) if k.startswith("ATTNPROF_")}
    names |= {k for stage in dockerfile.values() for k in stage["env"] if k.startswith("ATTNPROF_")}
    assert names, "no settings at all?"
    assert {n for n in names if not _setting_exists(n)} == set()
    assert _setting_exists("ATTNPROF_WORKER__TIMEOUT_S") and not _setting_exists("ATTNPROF_WORKER__NOPE")


def test_commands_use_real_verbs_and_options(compose: dict[str, Any], dockerfile: dict[str, dict[str, Any]]) -> None:
    services = compose["services"]
    for name in ("migrate", "service", "analysis-worker"):
        _check_command(services[name]["command"])
    assert services["analysis-worker"]["command"][1:3] == ["worker", "--analysis"]
    gpu = dockerfile["gpu-worker"]
    worker_argv = gpu["entrypoint"] + services["gpu-worker"]["command"]
    _check_command(worker_argv)
    assert worker_argv[:3] == ["attnprof", "worker", "--testbed"]
    _check_command(dockerfile["server"]["cmd"])


def test_the_server_side_holds_the_database_and_the_gpu_worker_does_not(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("migrate", "service", "analysis-worker"):
        env = _env(services[name])
        assert env["ATTNPROF_DATABASE_URL"].startswith("postgresql+psycopg://"), name
        assert env["ATTNPROF_BROKER_URL"] == BROKER_URL, name
    worker = _env(services["gpu-worker"])
    assert set(worker) >= {"ATTNPROF_BROKER_URL", "ATTNPROF_SERVICE_URL", "ATTNPROF_WORKER_TOKEN"}
    assert worker["ATTNPROF_BROKER_URL"] == BROKER_URL
    assert worker["ATTNPROF_SERVICE_URL"] == "http://service:8000"
    assert not any("DATABASE" in k or "POSTGRES" in k or "postgres" in v for k, v in worker.items())
    assert {n for n in worker if n.startswith("ATTNPROF_") and not _field_of(GpuWorkerSettings, n)} == set()
    assert not _field_of(GpuWorkerSettings, "ATTNPROF_DATABASE_URL")
    assert "POSTGRES_PASSWORD" in services["postgres"]["environment"]


def test_one_gpu_per_profile_worker(compose: dict[str, Any]) -> None:
    worker = compose["services"]["gpu-worker"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"] and len(device["device_ids"]) == 1
    assert worker["build"]["target"] == "gpu-worker" and worker["init"] is True


def test_the_images(dockerfile: dict[str, dict[str, Any]]) -> None:
    assert set(dockerfile) == {"server", "gpu-worker"}
    for stage in dockerfile.values():
        for src in stage["copy"]:
            assert (REPO / src).exists(), src
    assert any('".[server]"' in r for r in dockerfile["server"]["run"])
    assert any('".[profile,server]"' in r for r in dockerfile["gpu-worker"]["run"])
    assert dockerfile["gpu-worker"]["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # the service answers where compose and the healthcheck expect it
    assert shlex.join(dockerfile["server"]["cmd"]).endswith("--port 8000")


def test_redis_requires_the_password_every_client_is_given(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--requirepass") + 1] == "${REDIS_PASSWORD:?set REDIS_PASSWORD}"
    assert redis["environment"]["REDISCLI_AUTH"] == "${REDIS_PASSWORD:?set REDIS_PASSWORD}"  # the healthcheck's
    for name, svc in compose["services"].items():
        url = _env(svc).get("ATTNPROF_BROKER_URL")
        assert url is None or url == BROKER_URL, name


def test_the_gpu_worker_container_can_build_the_jail(compose: dict[str, Any], dockerfile: dict[str, Any]) -> None:
    """What bubblewrap needs of Docker (attnprof/worker/profile/jail.py): namespaces and mounts past the default
    seccomp profile and AppArmor, and an unmasked /proc for the job's own; no added capability; a job user other than
    root."""
    worker = compose["services"]["gpu-worker"]
    assert set(worker["security_opt"]) >= {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"}
    assert "cap_add" not in worker and not worker.get("privileged")
    assert _env(worker)["ATTNPROF_WORKER__JAIL"] == "userns"
    gpu = dockerfile["gpu-worker"]
    assert gpu["env"]["ATTNPROF_WORKER__JOB_USER"] == "attnprof-job"
    assert any("bubblewrap" in r and "useradd --system" in r and "attnprof-job" in r for r in gpu["run"])
    assert GpuWorkerSettings(worker={"jail": "userns", "job_user": "attnprof-job"}).worker.jail == "userns"


def test_the_kubernetes_manifests_use_real_settings_verbs_and_one_gpu_per_profile_worker() -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "k8s" / "attnprof.yaml").read_text()) if d]
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "Job")}
    assert {"attnprof-migrate", "attnprof-server", "attnprof-analysis-worker"} <= set(pods)
    names = set()
    for spec in pods.values():
        for container in spec["containers"]:
            names |= {e["name"] for e in container.get("env", []) if e["name"].startswith("ATTNPROF_")}
            if "command" in container:
                _check_command(container["command"])
            # nothing secret written in the manifests: every secret setting comes from a Secret
            for e in container.get("env", []):
                if e["name"].endswith(("_URL", "_SECRET", "_TOKEN")) and e["name"] != "ATTNPROF_SERVICE_URL":
                    assert "secretKeyRef" in e.get("valueFrom", {}), e
    assert names and {n for n in names if not _setting_exists(n)} == set()
    workers = {n: s for n, s in pods.items() if n.startswith("attnprof-profile-worker-")}
    assert set(workers) == {"attnprof-profile-worker-h100", "attnprof-profile-worker-h200"}
    for name, spec in workers.items():
        (container,) = spec["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert container["args"] == ["--testbed", name.rsplit("-", 1)[1]]
    server = pods["attnprof-server"]["containers"][0]
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
