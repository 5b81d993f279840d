"""Where a zoo run ran and with what: the host, the GPU, the versions, the sources."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import importlib.metadata
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from attnprof.core.documents import ResultDocument
from bench.zoo.records import Provenance

ROOT = Path(__file__).resolve().parents[2]
_SOURCES = ("attnprof.core", "worker", "service", "attnprof", "bench/zoo")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def command() -> str:
    """This process's command line as typed (``python -m bench.zoo.run ...``)."""
    argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    return shlex.join([Path(argv[0]).name, *argv[1:]])


def source_digest() -> str:
    """sha256 of every Python and TOML source of the profiler, the worker, the service and the zoo (16 hex)."""
    digest = hashlib.sha256()
    for top in _SOURCES:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in (".py", ".toml") and path.is_file() and "__pycache__" not in path.parts:
                digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvml() -> tuple[str | None, str | None, str | None]:
    """The first GPU's name and UUID and the driver, read through NVML (no CUDA context is made)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVML, no driver: a CPU host
        return None, None, None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name, uuid, driver = (
            pynvml.nvmlDeviceGetName(handle),
            pynvml.nvmlDeviceGetUUID(handle),
            pynvml.nvmlSystemGetDriverVersion(),
        )
        return tuple(v.decode() if isinstance(v, bytes) else str(v) for v in (name, uuid, driver))  # type: ignore[return-value]
    except Exception:
        return None, None, None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def host(device: str) -> Provenance:
    """What this host says without starting CUDA (an orchestrator's own CUDA context would be another process on the
    GPU for the runs it starts)."""
    gpu, uuid, driver = _nvml() if device == "cuda" else (None, None, None)
    return Provenance(
        date=now(),
        command=command(),
        host=platform.node(),
        device="cuda" if device == "cuda" else "cpu",
        gpu=gpu,
        gpu_uuid=uuid,
        driver=driver,
        torch=_version("torch"),
        triton=_version("triton"),
        python=platform.python_version(),
        source_digest=source_digest(),
        git_commit=git_commit(),
    )


def with_torch(device: str) -> Provenance:
    """``host`` completed from torch in this process (which may start CUDA)."""
    import torch

    found = host(device)
    found.torch = torch.__version__
    if device == "cuda":
        found.gpu = torch.cuda.get_device_name(0)
        found.cuda = torch.version.cuda
        found.cudnn = str(torch.backends.cudnn.version())  # type: ignore[no-untyped-call]
    return found


def fill_from(found: Provenance, doc: ResultDocument) -> None:
    """The GPU and the versions as the run's own result document recorded them."""
    env = doc.environment
    if env.device.kind == "cuda":
        found.gpu = env.device.name
        found.gpu_uuid = env.device.uuid or found.gpu_uuid
    for name in ("driver", "cuda", "cudnn", "torch", "triton"):
        value = getattr(env, name)
        if value:
            setattr(found, name, value)
