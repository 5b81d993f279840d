"""The device check a profile worker makes before it starts (NVML, no CUDA context)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.gpu import device as gpu
from worker.gpu.device import DeviceMismatch, LocalDevice

REPO = Path(__file__).resolve().parents[2]
H200 = LocalDevice(mode="cuda", name="NVIDIA H200", driver="580.159.04")


def _testbed(meaning: dict | None, name: str = "h200") -> dict:
    return {"name": name, "key": gpu.testbed_key(meaning) if meaning else None, "meaning": meaning}


def test_the_key_is_the_profilers() -> None:
    # Documents that `attnprof profile` wrote on the H200 and on a CPU host: the worker's formula must agree.
    recorded = [
        REPO / "tests/data/h200/attnprof/result.json",
        REPO / "bench/reports/data/h200-2026-11-29/set-b/run2.json",
        REPO / "tests/data/service/cpu-run-1.json",
    ]
    for path in recorded:
        env = json.loads(path.read_text())["environment"]
        assert gpu.testbed_key(env["testbed"]) == env["testbed_key"], path
    assert H200.key() == "605db806abde3bc2"


def test_a_matching_gpu_starts_and_a_different_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    mode, why = gpu.check(_testbed(H200.meaning()), "auto", H200)
    assert mode == "cuda" and "matches" in why
    other = LocalDevice(mode="cuda", name="NVIDIA H100 80GB HBM3", driver="580.159.04")
    with pytest.raises(DeviceMismatch, match=r"this GPU does not match testbed h200.*H100"):
        gpu.check(_testbed(H200.meaning()), "auto", other)
    newer_driver = LocalDevice(mode="cuda", name="NVIDIA H200", driver="590.1")
    with pytest.raises(DeviceMismatch, match=r"driver 590\.1"):
        gpu.check(_testbed(H200.meaning()), "cuda", newer_driver)


def test_one_gpu_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(DeviceMismatch, match="one worker per GPU"):
        gpu.check(_testbed(H200.meaning()), "auto", H200)


def test_cpu_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(DeviceMismatch, match="NVML finds no GPU"):
        gpu.check(_testbed(None), "cuda", None)
    assert gpu.check(_testbed(None, "new"), "auto", None)[0] == "cpu"  # no key yet: the first run sets it
    with pytest.raises(DeviceMismatch, match="would profile on the CPU"):
        gpu.check(_testbed(H200.meaning()), "cpu", None)
    here = {"device": gpu.cpu_model(), "driver": "none", "mode": "cpu", "threads": "2"}
    assert gpu.check(_testbed(here, "cpu"), "cpu", None) == (
        "cpu",
        f"CPU {gpu.cpu_model()}: the testbed's CPU model matches",
    )
    elsewhere = {**here, "device": "Some Other CPU"}
    with pytest.raises(DeviceMismatch, match="Some Other CPU"):
        gpu.check(_testbed(elsewhere, "cpu"), "auto", None)


def test_probing_a_host_without_a_gpu_finds_none() -> None:
    # No driver here: NVML cannot start, and nothing raises.
    assert gpu.probe_gpu() is None
