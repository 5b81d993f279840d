"""What NVML lists while ``attnprof ab`` runs beside a stranger, recorded on a GPU host as a test fixture.

    python -m bench.own_processes_gpu --out DIR     # a GPU host; writes DIR/own-processes.json

A stranger (another process holding a CUDA context) starts first; then ``python -m attnprof.core ab`` runs a tiny
SDPA suite on two copies of one tree. While it runs, NVML's compute processes and the process table
(``attnprof.core.own_processes.process_table``) are sampled together every 0.2 s. The file holds the samples, the
coordinator's and the stranger's pids, and what each side's result document says about other processes, so that
``tests/core/test_own_processes.py`` judges on the CPU what the GPU listed: both sides and the coordinator are the job's
own, the stranger is the one other process, and each side's document counts exactly it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attnprof.core.own_processes import process_table

SUITE = """[suite]
name = "own"

[[cases]]
name = "sdpa"
target = "sdpa"
q_heads = 8
seq_q = 1024
head_dim = 64
"""
STRANGER = "import sys, time, torch; torch.zeros(1, device='cuda'); print('ready', flush=True); time.sleep(600)"


def _walk(value: Any, key: str) -> Iterator[Any]:
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key:
                yield v
            yield from _walk(v, key)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v, key)


def _side(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    return {
        "other_processes": list(_walk(doc, "other_processes")),
        "gpu_pids": list(_walk(doc, "gpu_pids")),
        "suspect_reasons": [r for rs in _walk(doc, "suspect_reasons") for r in rs],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    args.out.mkdir(parents=True, exist_ok=True)
    stranger = subprocess.Popen([sys.executable, "-c", STRANGER], stdout=subprocess.PIPE, text=True)
    assert stranger.stdout is not None and stranger.stdout.readline().strip() == "ready"
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        suite = root / "attnprof.toml"
        suite.write_text(SUITE)
        for name in ("base", "head"):
            (root / name).mkdir()
        out = root / "ab"
        argv_ab = [
            sys.executable,
            "-m",
            "attnprof.core",
            "ab",
            str(suite),
            "--base",
            str(root / "base"),
            "--head",
            str(root / "head"),
            "--out",
            str(out),
            "--device",
            "cuda",
            "--quiet",
        ]
        coordinator = subprocess.Popen(argv_ab, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        while coordinator.poll() is None:
            pids = sorted({int(p.pid) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)})
            table = process_table()
            if len(pids) >= 2:
                samples.append(
                    {
                        "nvml_pids": pids,
                        "table": {str(pid): [p.parent, p.session] for pid, p in table.items()},
                    }
                )
            time.sleep(0.2)
        output = coordinator.stdout.read().decode(errors="replace") if coordinator.stdout else ""
        sides = {
            name: _side(out / f) for name, f in (("base", "base.json"), ("head", "result.json")) if (out / f).exists()
        }
    stranger.kill()
    stranger.wait()
    # Keep the samples that list the most pids (both sides and the stranger), at most twelve, for a small fixture.
    most = max((len(s["nvml_pids"]) for s in samples), default=0)
    kept = [s for s in samples if len(s["nvml_pids"]) == most][:12]
    record = {
        "gpu": pynvml.nvmlDeviceGetName(handle),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "date": time.strftime("%Y-%m-%d"),
        "command": "python -m bench.own_processes_gpu --out DIR",
        "coordinator": coordinator.pid,
        "stranger": stranger.pid,
        "ab_exit": coordinator.returncode,
        "ab_output_tail": output[-2000:],
        "sides": sides,
        "samples": kept,
    }
    (args.out / "own-processes.json").write_text(json.dumps(record, indent=1, default=str))
    print(json.dumps({k: record[k] for k in ("gpu", "coordinator", "stranger", "ab_exit", "sides")}, default=str))
    namespace = os.readlink("/proc/self/ns/pid")
    print(f"{len(samples)} samples, {len(kept)} kept with {most} pids; pid namespace {namespace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
