"""One change on two testbeds, end to end: real Postgres, real Redis, ``attnprof serve``, the analysis worker and two
real profile workers (profiling on the CPU), one per testbed, standing for two GPU types: each worker passes its
``GPU_FLAVOUR`` to its jobs (``ATTNPROF_WORKER__PASS_ENV``), and the project's kernel runs at a speed that depends on
it, as a kernel tuned for one GPU runs on another.

The suite names both testbeds. A default-branch submission makes each testbed's baseline; a pull request's change
makes the kernel faster on one and slower on the other: one submission, one job per testbed, each compared with its
own testbed's history, and the finding flagged not portable, naming both testbeds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.profiling_support import tar_gz
from tests.worker.stack import Stack, cpu_fleet

pytestmark = pytest.mark.slow

REDIS_URL = "redis://127.0.0.1:6379/9"
BEDS = {"tb-mx-fast": "fast", "tb-mx-slow": "slow"}  # testbed: the GPU flavour its worker stands for
# Enough samples that a 2x change is settled on a busy two-core host.
TIMING = "[suite.timing]\nwarmup = 2\nmin_samples = 20\nmax_samples = 40\nbudget_s = 1.0\ntrace_iters = 1\n"
SUITE = (
    f'[suite]\nname = "mx"\ntestbeds = {list(BEDS)!r}\n\n{TIMING}\n'.replace("'", '"')
    + '[[cases]]\nname = "kernel"\ntarget = "kern.targets:step"\n'
)


def _code(ms: dict[str, float]) -> dict[str, bytes]:
    """The project's kernel: a step that takes ``ms[flavour]`` milliseconds on the GPU flavour it runs on."""
    return {
        "kern/__init__.py": b"",
        "kern/targets.py": f"""import os
import time

import torch

MS = {ms!r}


def step(params, device):
    wait_s = MS[os.environ.get("GPU_FLAVOUR", "fast")] / 1000

    def fn(x):
        time.sleep(wait_s)
        return x + 1

    return fn, (torch.zeros(4),)
""".encode(),
    }


@pytest.fixture(scope="module", name="mx")
def mx_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workers = {
        testbed: (testbed, {"ATTNPROF_WORKER__PASS_ENV": '["GPU_FLAVOUR"]', "GPU_FLAVOUR": flavour})
        for testbed, flavour in BEDS.items()
    }
    tmp = tmp_path_factory.mktemp("matrix")
    with cpu_fleet(tmp, redis_url=REDIS_URL, prefix="mx", testbeds=tuple(BEDS), workers=workers) as s:
        yield s


def _submit(mx: Stack, code: dict[str, bytes], **fields: str) -> dict[str, Any]:
    upload = {"spec": ("attnprof.toml", SUITE.encode()), "bundle": ("src.tar.gz", tar_gz(code))}
    with mx.http() as http:  # no testbed named: the suite's two
        r = http.post(f"/api/v1/projects/{mx.project}/jobs", data={"branch": "main", **fields}, files=upload)
    assert r.status_code == 202, r.text
    answer: dict[str, Any] = r.json()
    return answer


def test_a_change_that_helps_one_gpu_type_and_hurts_the_other_is_flagged_not_portable(mx: Stack) -> None:
    main = uuid.uuid4().hex[:12]
    for _ in range(3):  # each testbed's baseline: three runs of the default branch
        made = _submit(mx, _code({"fast": 4.0, "slow": 4.0}), commit=main)
        assert sorted(j["testbed"] for j in made["jobs"]) == sorted(BEDS) and made["matrix_id"]
        for job in made["jobs"]:
            assert mx.wait_status(job["id"], ("done",), timeout_s=240)["status"] == "done"

    change = _submit(
        mx, _code({"fast": 1.0, "slow": 12.0}), commit=uuid.uuid4().hex[:12], base_commit=main, branch="tune", pr="5"
    )
    verdicts = {j["testbed"]: mx.wait_status(j["id"], ("done",), timeout_s=240)["verdict"] for j in change["jobs"]}
    # Each against its own testbed's baseline: never a fail where it got faster. Two CPU workers profiling at once on
    # a two-core host make their runs suspect (the host is busy), and a suspect run never fails: the slower one warns
    # where a quiet host fails it.
    assert verdicts["tb-mx-fast"] in ("pass", "warn") and verdicts["tb-mx-slow"] in ("fail", "warn"), verdicts
    with mx.http() as http:
        matrix = http.get(f"/api/v1/jobs/{change['id']}/matrix").json()
    assert matrix["complete"] is True and matrix["verdict"] == max(
        verdicts.values(), key=["pass", "warn", "fail"].index
    )
    (flag,) = matrix["not_portable"]
    assert flag["kind"] == "direction" and sorted(flag["testbeds"]) == sorted(BEDS)
    ways = {s["testbed"]: s["way"] for s in flag["sides"]}
    assert ways == {"tb-mx-fast": "faster", "tb-mx-slow": "slower"}
