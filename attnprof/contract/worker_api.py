"""The worker API's bodies (``/internal/*``, ``attnprof.contract.routes``): what a profile worker sends the service
and what it answers.

Shared by the service (its routes validate with them, and answer with them) and the GPU workers (which validate
each answer with its model, ``attnprof.worker.profile.api``); pydantic only. The result documents travel as JSON
objects here (the contract cannot import ``attnprof.core``): the worker sends them from their models and the service
parses them with the same models on receipt.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from attnprof.contract.ids import JobId, RunId

INT_MAX = 2**31 - 1  # Postgres ``integer``: attempt numbers are stored in one


class Claim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: int = Field(ge=1, le=INT_MAX)
    worker: str = Field(min_length=1, max_length=200, description="host and GPU of the worker")
    secret: str = Field(
        "",
        max_length=200,
        description="the claim secret of the profile.run message (its third argument); one that is missing or not "
        "the job's latest message's is answered as an unknown job is (404)",
    )


class ClaimAnswer(BaseModel):
    id: JobId
    attempt: int
    spec: str
    bundle_sha256: str | None
    paired: bool = Field(
        False,
        description="a paired job: profile the head (the bundle) and its merge base (the base bundle, "
        "GET .../bundle?tree=base) interleaved, and send the base's and the paired document with the result",
    )
    base_bundle_sha256: str | None = Field(None, description="a paired job's base bundle (null: not paired)")
    repo: str | None
    commit: str
    testbed: str
    project: str | None = Field(
        None, description="the job's project: its counter cache is the project's own (null from an older service)"
    )
    token: str = Field(
        description="the job token (Bearer) of this attempt, shown once: it alone opens the job's bundle, heartbeat, "
        "result, failure and trace routes, until the attempt ends"
    )
    lease_s: float = Field(description="the attempt holds the job this long past each heartbeat, in seconds")


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: int = Field(ge=1, le=INT_MAX)


class HeartbeatAnswer(BaseModel):
    status: str
    cancelled: bool = Field(description="stop the work: the job was cancelled")


class WorkerResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: int = Field(ge=1, le=INT_MAX)
    result: dict[str, Any] = Field(description="the attnprof.result/v1 document: of a paired job, the head's")
    base: dict[str, Any] | None = Field(
        None,
        description="a paired job's base side (attnprof.result/v1): stored with the run, never as one; required for "
        "a paired job, refused for another",
    )
    paired: dict[str, Any] | None = Field(
        None, description="a paired job's attnprof.paired/v1 document joining base and result; required with base"
    )


class WorkerResultAnswer(BaseModel):
    run_id: RunId
    status: str
    duplicate: bool = Field(description="this attempt's result was already stored; nothing was added")


class Failure(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: int = Field(ge=1, le=INT_MAX)
    reason: str = Field(min_length=1, max_length=10_000)
    timed_out: bool = False
    retry: bool = Field(False, description="the failure is the host's, not the job's: try again if attempts remain")


class WorkerTestbed(BaseModel):
    name: str
    key: str | None = Field(
        description="the testbed key, set by the first of its workers to start (``POST /internal/testbed/key``); null "
        "before one has"
    )
    meaning: dict[str, Any] | None = Field(description="what the key hashes (device, driver, mode), in words")


_MeaningName = Annotated[str, StringConstraints(min_length=1, max_length=50)]
_MeaningValue = Annotated[str, StringConstraints(max_length=300)]


class WorkerDevice(BaseModel):
    """The device a profile worker found at start, outside the jail and before it takes a job: the testbed key its
    runs will carry and what that key hashes. Only a worker token sends it: a testbed's key is its workers' word,
    never a result document's."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(
        pattern=r"^[0-9a-f]{16}$", description="the testbed key (``attnprof.core.testbed.testbed_key`` of meaning)"
    )
    meaning: dict[_MeaningName, _MeaningValue] = Field(
        min_length=1, max_length=10, description="what the key hashes: device, driver, mode (and threads on a CPU)"
    )


class WorkerDeviceAnswer(WorkerTestbed):
    keyed: bool = Field(
        description="true: the testbed had no key and now has this device's; false: it already had this key"
    )


# How often a profile worker says it is alive by default (``ATTNPROF_FAIRNESS__WORKER_ALIVE_S``, in seconds): the
# service's default for how long a worker counts as live is checked against the same number.
WORKER_ALIVE_S = 5.0


_PROCESS = re.compile(r"/pid\d+(?=/|$)")


def host_of(worker: str) -> str:
    """A worker's host: its name (host, process and GPU: ``node-3/pid812/gpu0``) without the process
    (``node-3/gpu0``), so that a worker that restarts is the same host."""
    return _PROCESS.sub("", worker)


class Alive(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker: str = Field(min_length=1, max_length=200, description="host, process and GPU of the worker")
    testbed: str = Field(min_length=1, max_length=100, description="the testbed it serves (its token's)")


class AliveAnswer(BaseModel):
    testbed: str
    live_workers: int = Field(description="workers of the testbed live now, this one included")
    live_s: float = Field(description="a worker counts as live this long after it last said so, in seconds")


# A canary's figures by name (``attnprof.core.measure.canary``): what a worker may send, and which way is better.
CANARY_FIGURES: dict[str, bool] = {
    "copy_gbps": True,
    "matmul_tflops_fp32": True,
    "matmul_tflops_fp16": True,
    "matmul_tflops_bf16": True,
    "launch_us": False,
    "attention_us": False,
}
"""Each figure a canary reports and whether higher is better."""

_Figure = Annotated[float, Field(gt=0, lt=1e9)]
_Short = Annotated[str, StringConstraints(max_length=300)]


class CanaryClocks(BaseModel):
    """NVML's readings while the canary ran (all null on a CPU)."""

    model_config = ConfigDict(extra="forbid")

    sm_mhz_median: float | None = Field(None, ge=0, lt=1e5, description="SM clock while the matmuls ran, median")
    sm_mhz_min: float | None = Field(None, ge=0, lt=1e5, description="SM clock while the matmuls ran, lowest")
    mem_mhz: float | None = Field(None, ge=0, lt=1e5)
    temperature_c_max: float | None = Field(None, ge=-50, lt=200)
    power_w_max: float | None = Field(None, ge=0, lt=1e5)
    throttle_reasons: list[Annotated[str, StringConstraints(max_length=50)]] = Field(
        default_factory=list, max_length=16
    )
    samples: int = Field(0, ge=0, le=10**6)


class Canary(BaseModel):
    """A canary a profile worker ran on its host (outside the jail, no user code): its figures, its clocks and what
    it cost. The service judges it against its testbed's band and answers whether the host may take jobs."""

    model_config = ConfigDict(extra="forbid")

    worker: str = Field(min_length=1, max_length=200, description="host, process and GPU of the worker")
    testbed: str = Field(min_length=1, max_length=100, description="the testbed it serves (its token's)")
    device: str = Field(min_length=1, max_length=200, description="the device's name")
    mode: Literal["cuda", "cpu"]
    figures: dict[str, _Figure] = Field(description="each of CANARY_FIGURES the canary measured")
    clocks: CanaryClocks = Field(default_factory=CanaryClocks)
    method: dict[Annotated[str, StringConstraints(max_length=50)], _Short] = Field(default_factory=dict, max_length=16)
    seconds: float = Field(ge=0, lt=3600, description="the canary's wall time: what it cost the device")

    @field_validator("figures")
    @classmethod
    def _known(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(CANARY_FIGURES))
        if unknown:
            raise ValueError(f"unknown figure(s) {unknown}: allowed are {sorted(CANARY_FIGURES)}")
        if not value:
            raise ValueError(f"no figure: send at least one of {sorted(CANARY_FIGURES)}")
        return value


class CanaryAnswer(BaseModel):
    """The service's judgement of a canary."""

    host: str = Field(description="the host the canary judged (the worker's name without its process)")
    state: Literal["healthy", "learning", "quarantined"] = Field(
        description="healthy: inside its testbed's band; learning: too little history for a band yet, taken as "
        "healthy; quarantined: outside the band, the host claims no jobs until a canary passes"
    )
    reasons: list[str] = Field(description="why it is quarantined: each figure outside its band, each throttle")
    retry_s: float = Field(description="a quarantined host runs its canary again after this many seconds")
