"""The worker API's bodies (``/internal/*``, ``attnprof.contract.routes``): what a profile worker sends the service
and what it answers.

Shared by the service (its routes validate with them, and answer with them) and the GPU workers (which validate
each answer with its model, ``attnprof.worker.profile.api``); pydantic only. The result documents travel as JSON
objects here (the contract cannot import ``attnprof.core``): the worker sends them from their models and the service
parses them with the same models on receipt.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

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


class Alive(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker: str = Field(min_length=1, max_length=200, description="host, process and GPU of the worker")
    testbed: str = Field(min_length=1, max_length=100, description="the testbed it serves (its token's)")


class AliveAnswer(BaseModel):
    testbed: str
    live_workers: int = Field(description="workers of the testbed live now, this one included")
    live_s: float = Field(description="a worker counts as live this long after it last said so, in seconds")
