"""What the zoo's scripts write and the report reads: ``truth.json`` (each change's effect measured apart) and
``run.json`` (each change through ``attnprof ab``, one unpaired profile and a paired job). Loaded in one place,
validated (``load_truth``, ``load_run``). Durations in seconds (``_s``) or microseconds (``_us``); effects and changes
relative (+0.01 is 1% slower)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TRUTH_FILE = "truth.json"
RUN_FILE = "run.json"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Provenance(_Model):
    date: str = Field(description="when the script started, ISO 8601 UTC")
    command: str
    host: str
    device: Literal["cuda", "cpu"]
    gpu: str | None = Field(None, description="the GPU's name, as the run's own documents (or torch) give it")
    gpu_uuid: str | None = None
    driver: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str
    source_digest: str = Field(description="sha256 (16 hex) of the profiler's, worker's, service's and zoo's sources")
    git_commit: str | None = None

    @property
    def machine(self) -> str:
        """What the report groups runs by: the GPU's name, or the CPU host's."""
        return self.gpu or f"CPU ({self.host})"


class TruthCase(_Model):
    case: str
    base_us: float | None = Field(None, description="median of every base sample")
    head_us: float | None = Field(None, description="median of every head sample")
    effect: float | None = Field(None, description="median over blocks of head / base, minus 1")
    ci_low: float | None = Field(None, description="95% bootstrap interval of the effect over blocks")
    ci_high: float | None = None
    blocks: int = 0
    calls_per_block: int = 0
    block_ratios: list[float] = Field(default_factory=list, description="head / base of each block, in time order")
    error: str | None = None


class TruthChange(_Model):
    change: str
    identical: bool
    expected: str
    cases: list[TruthCase] = Field(default_factory=list)
    wall_s: float = 0.0


class TruthDoc(_Model):
    kind: Literal["zoo-truth"] = "zoo-truth"
    provenance: Provenance
    method: str
    quick: bool = False
    changes: list[TruthChange] = Field(default_factory=list)
    not_run: list[str] = Field(default_factory=list, description="changes asked for that were not measured")
    stopped: str | None = Field(None, description="why it ended before the last change (null: it did not)")


class CaseLine(_Model):
    """One case's paired latency finding: the line a pull request's comment shows."""

    case: str
    status: str | None = Field(None, description="regressed, improved, unchanged or inconclusive")
    verdict: str | None = Field(None, description="what the finding alone contributes: pass, warn or fail")
    change: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    q: float | None = None
    pairs: int | None = None
    set_aside: int | None = None
    stopped_by: str | None = None
    limit: str | None = Field(None, description="ambiguous: what ended its pairs (budget or ceiling)")
    more_rounds: int | None = None
    detail: str | None = None
    kernel_lines: list[str] = Field(default_factory=list)


class OtherFinding(_Model):
    case: str
    metric: str
    status: str
    verdict: str
    detail: str | None = None


class Outcome(_Model):
    """What one paired comparison said."""

    verdict: str
    cases: list[CaseLine] = Field(default_factory=list)
    others: list[OtherFinding] = Field(default_factory=list, description="backend, accuracy, status findings")
    notes: list[str] = Field(default_factory=list)
    suspect: list[str] | None = None
    pairs: int | None = Field(None, description="pairs of rounds over all cases")
    paired_wall_s: float | None = None

    def case(self, case_id: str) -> CaseLine | None:
        return next((c for c in self.cases if c.case == case_id), None)


class AbRun(_Model):
    rep: int
    exit_code: int
    process_s: float = Field(description="wall time of the whole `ab` process")
    outcome: Outcome | None = None
    error: str | None = Field(None, description="the end of its output, when it wrote no comparison")


class ProfileRun(_Model):
    exit_code: int
    process_s: float = Field(description="wall time of the whole `profile` process")
    run_wall_s: float | None = None
    suspect: list[str] | None = None
    error: str | None = None


class JobRun(_Model):
    rep: int
    job_id: str
    status: str
    verdict: str | None = None
    reason: str | None = None
    attempts: int | None = None
    total_s: float | None = Field(None, description="submitted to verdict")
    queue_s: float | None = Field(None, description="submitted to claimed")
    held_s: float | None = Field(None, description="claimed to its run stored: the worker's GPU held for the job")
    outcome: Outcome | None = None


class ChangeRun(_Model):
    change: str
    identical: bool
    expected: str
    suite: str
    ab: list[AbRun] = Field(default_factory=list)
    profile: ProfileRun | None = None
    jobs: list[JobRun] = Field(default_factory=list)
    unpaired_job: JobRun | None = Field(None, description="the head alone as a job: the paired job's cost yardstick")


class RunDoc(_Model):
    kind: Literal["zoo-run"] = "zoo-run"
    provenance: Provenance
    quick: bool = False
    steps: list[str]
    repeat: int
    budget_s: float
    testbed: str | None = None
    changes: list[ChangeRun] = Field(default_factory=list)
    not_run: list[str] = Field(default_factory=list, description="changes asked for that no step reached")
    notes: list[str] = Field(default_factory=list, description="what went wrong beside the steps (the stack's start)")
    stopped: str | None = Field(None, description="why it ended before the last step (null: it did not)")
    wall_s: float = 0.0


def save(doc: TruthDoc | RunDoc, folder: Path) -> Path:
    """Write ``doc`` into ``folder`` atomically (a run killed mid-write leaves the previous file)."""
    path = folder / (TRUTH_FILE if isinstance(doc, TruthDoc) else RUN_FILE)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(doc.model_dump_json(indent=1) + "\n")
    tmp.replace(path)
    return path


def load_truth(folder: Path) -> TruthDoc | None:
    path = folder / TRUTH_FILE
    return TruthDoc.model_validate_json(path.read_text()) if path.is_file() else None


def load_run(folder: Path) -> RunDoc | None:
    path = folder / RUN_FILE
    return RunDoc.model_validate_json(path.read_text()) if path.is_file() else None
