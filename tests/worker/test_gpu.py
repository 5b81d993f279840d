"""The device check a profile worker makes before it starts: NVML for a GPU (no CUDA context), the profiler's own
code in a subprocess for a CPU's thread count."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from attnprof.contract.worker_api import WorkerTestbed
from attnprof.core import testbed as keys
from attnprof.core.testbed import cpu_model
from attnprof.worker.profile import device as gpu
from attnprof.worker.profile.device import DeviceMismatch, LocalDevice

REPO = Path(__file__).resolve().parents[2]
H200 = LocalDevice(mode="cuda", name="NVIDIA H200", driver="580.159.04")


def _testbed(meaning: dict | None, name: str = "h200") -> WorkerTestbed:
    return WorkerTestbed(name=name, key=keys.testbed_key(meaning) if meaning else None, meaning=meaning)


def test_the_key_is_the_profilers() -> None:
    # Documents that `attnprof profile` wrote on the H200 and on a CPU host: the worker's formula must agree.
    recorded = [
        REPO / "tests/data/h200/attnprof/result.json",
        REPO / "bench/reports/data/h200-2026-11-29/set-b/run2.json.gz",
        REPO / "tests/data/service/cpu-run-1.json",
    ]
    for path in recorded:
        raw = path.read_bytes()
        env = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)["environment"]
        assert keys.testbed_key(env["testbed"]) == env["testbed_key"], path
    assert H200.key() == "605db806abde3bc2"


def test_a_matching_gpu_starts_and_a_different_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpu.profile_mode("auto", H200) == "cuda"
    assert "matches" in gpu.check(_testbed(H200.meaning()), H200)
    other = LocalDevice(mode="cuda", name="NVIDIA H100 80GB HBM3", driver="580.159.04")
    with pytest.raises(DeviceMismatch, match=r"this GPU does not match testbed h200.*H100"):
        gpu.check(_testbed(H200.meaning()), other)
    newer_driver = LocalDevice(mode="cuda", name="NVIDIA H200", driver="590.1")
    with pytest.raises(DeviceMismatch, match=r"driver 590\.1"):
        gpu.check(_testbed(H200.meaning()), newer_driver)


def test_a_testbed_with_no_key_takes_the_first_workers_device() -> None:
    assert gpu.check(_testbed(None, "new"), H200) == (
        "testbed new has no key yet: this worker keys it as it starts, with its CUDA "
        f"(device NVIDIA H200, driver 580.159.04, mode cuda; key {H200.key()})"
    )


def test_one_gpu_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(DeviceMismatch, match="one worker per GPU"):
        gpu.profile_mode("auto", H200)


def test_cpu_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(DeviceMismatch, match="NVML finds no GPU"):
        gpu.profile_mode("cuda", None)
    assert gpu.profile_mode("auto", None) == "cpu" and gpu.profile_mode("cpu", H200) == "cpu"
    here = LocalDevice(mode="cpu", name=cpu_model(), driver=None, threads=2)
    assert here.meaning() == {"device": cpu_model(), "driver": "none", "mode": "cpu", "threads": "2"}
    with pytest.raises(DeviceMismatch, match="would profile on the CPU"):
        gpu.check(_testbed(H200.meaning()), here)
    assert gpu.check(_testbed(here.meaning(), "cpu"), here) == (
        f"CPU {cpu_model()}, 2 threads: testbed key {here.key()} matches"
    )
    elsewhere = {**here.meaning(), "device": "Some Other CPU"}
    with pytest.raises(DeviceMismatch, match="Some Other CPU"):
        gpu.check(_testbed(elsewhere, "cpu"), here)
    # The key hashes the thread count: a host whose profiler would use another one measures another testbed.
    more = LocalDevice(mode="cpu", name=cpu_model(), driver=None, threads=8)
    with pytest.raises(DeviceMismatch, match=r"this CPU does not match testbed cpu.*would use 8 threads"):
        gpu.check(_testbed(here.meaning(), "cpu"), more)


def test_the_cpu_probe_reads_the_thread_count_the_profiler_uses() -> None:
    # The probe runs the profiler's own code in a subprocess, with the environment it is given (a job's).
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
    one = gpu.probe_cpu({**env, "OMP_NUM_THREADS": "1"})
    assert one == LocalDevice(mode="cpu", name=cpu_model(), driver=None, threads=1)
    assert one.key() == keys.testbed_key(keys.testbed_meaning(cpu_model(), None, "cpu", 1))
    default = gpu.probe_cpu(env)
    assert default.threads is not None and default.threads >= 1
    assert default.key() == keys.testbed_key(keys.testbed_meaning(cpu_model(), None, "cpu", default.threads))
    with pytest.raises(gpu.DeviceUnknown, match="probing the CPU failed"):
        gpu.probe_cpu({**env, "PYTHONHOME": "/nonexistent"})  # no Python can start
    with pytest.raises(gpu.DeviceUnknown, match="probing the CPU failed"):
        gpu.probe_cpu(env, timeout_s=0.01)


def test_probing_a_host_without_a_gpu_finds_none() -> None:
    # No driver here: NVML cannot start, and nothing raises.
    assert gpu.probe_gpu() is None


def test_a_gpu_worker_whose_gpu_nvml_cannot_name_gets_no_jail(monkeypatch) -> None:
    import pytest

    from attnprof.worker.profile import device
    from attnprof.worker.profile import jail as jails
    from attnprof.worker.profile.profile import job_jail
    from attnprof.worker.profile.settings import GpuWorkerSettings, ProfileWorker

    # Without the GPU's own node the jail would be handed every GPU of the host, other tenants' included.
    monkeypatch.setattr(device, "probe_minor", lambda: None)
    settings = GpuWorkerSettings(worker=ProfileWorker(device="cuda"))
    with pytest.raises(jails.JailUnavailable, match="cannot name this worker's GPU"):
        job_jail(settings)
