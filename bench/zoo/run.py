"""The zoo through the product at its defaults: each change through ``attnprof ab``, as a paired job through the
embedded stack, and one unpaired ``attnprof profile`` of the head for the cost.

    python -m bench.zoo.run --out DIR [--budget-s 420] [--only a,b] [--repeat N] [--steps ab,job,profile]
    python -m bench.zoo.run --quick --out DIR --steps ab      # a CPU host: two changes, tiny shapes, short timing

Per change, in the zoo's order (bench/zoo/changes.py): ``ab`` (``--repeat`` times), the paired job (as often), then
the profile and the head alone as an unpaired job (for the first ``--profiles`` changes): the yardsticks of the
cost. The suites carry no timing table and nothing is passed beyond the trees, the device and the peaks cache, so
every verdict is the defaults'. The peaks are measured once first, so no run measures its own. A step starts only
when it is expected to end within ``--budget-s`` (the longest of its kind so far, times 1.15), and is stopped at the
budget's end; DIR/run.json is written after every step, so a run stopped early still holds what it measured. Each
change's documents (gzipped), rendered comparisons and diff are in DIR/<change>/. The stack is started only for the
job step; its profile worker measures the GPU's peaks when it starts, before anything is timed.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from bench.zoo import provenance, records, steps, trees
from bench.zoo.changes import Change, select
from bench.zoo.records import ChangeRun, JobRun, Outcome, RunDoc

STEPS = ("ab", "job", "profile")


def _say(text: str) -> None:
    print(text, flush=True)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def testbed_name(doc: RunDoc) -> str:
    """``zoo-h100``, ``zoo-h200``, ... from the GPU's name; ``zoo-cpu`` on a CPU host."""
    if doc.provenance.device == "cpu":
        return "zoo-cpu"
    model = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", doc.provenance.gpu or "")
    return f"zoo-{model.group(1).lower()}" if model else "zoo-gpu"


def describe(outcome: Outcome | None, error: str | None = None) -> str:
    """One line of progress: the verdict and each case's paired line."""
    if outcome is None:
        last = (error or "").strip().splitlines()
        return f"no comparison: {last[-1] if last else '?'}"
    lines = []
    for c in outcome.cases:
        change = f"{c.change:+.2%}" if c.change is not None else "?"
        lines.append(f"{c.case}: {c.status} {change} ({c.stopped_by}, {c.pairs} pairs)")
    others = [f"{o.case}: {o.metric} {o.status}" for o in outcome.others]
    return f"{outcome.verdict.upper()}; " + "; ".join(lines + others)


class Runner:
    def __init__(self, a: argparse.Namespace, changes: list[Change], doc: RunDoc, work: Path) -> None:
        self.a, self.changes, self.doc, self.work = a, changes, doc, work
        self.budget = steps.Budget(a.budget_s, a.device)
        self.peaks: Path = a.peaks or work / "peaks"
        self.stack: Any = None
        self.profiled = 0
        self.filled = False

    def save(self) -> None:
        self.doc.wall_s = round(self.budget.spent(), 1)
        records.save(self.doc, self.a.out)

    def fits(self, kind: str, change: Change) -> bool:
        if self.budget.fits(kind):
            return True
        self.doc.stopped = (
            f"budget: {self.budget.spent():.0f} s of {self.budget.total_s:.0f} spent; a {kind} of {change.name} "
            f"would take about {self.budget.estimate(kind):.0f} s more"
        )
        _say(self.doc.stopped)
        return False

    def one(self, i: int, change: Change) -> bool:
        """Every step of ``change``; False once the budget stops the run."""
        tag = f"[{i}/{len(self.changes)} {change.name}]"
        found = trees.materialize(change, self.work / "trees", quick=self.a.quick)
        dest = self.a.out / change.name
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "change.diff").write_text(trees.diff(change))
        record = ChangeRun(change=change.name, identical=change.identical, expected=change.expected, suite=change.suite)
        self.doc.changes.append(record)
        for rep in range(self.a.repeat):
            if "ab" in self.a.steps:
                if not self.fits("ab", change):
                    return False
                ran, head = steps.ab(
                    found, device=self.a.device, peaks=self.peaks, dest=dest, rep=rep, timeout_s=self.budget.left()
                )
                self.budget.record("ab", ran.process_s)
                if head is not None and not self.filled:  # the GPU and versions as the run's own document says
                    provenance.fill_from(self.doc.provenance, head)
                    self.filled = True
                record.ab.append(ran)
                self.save()
                _say(f"{tag} ab {rep + 1}/{self.a.repeat} in {ran.process_s:.1f} s: {describe(ran.outcome, ran.error)}")
            if "job" in self.a.steps and self.stack is not None:
                if not self.fits("job", change):
                    return False
                from bench.zoo import jobs

                started = self.budget.spent()
                try:
                    job = jobs.run(self.stack, change, found, rep=rep, dest=dest, timeout_s=self.budget.left())
                except Exception as exc:  # the stack itself failed: no later job can run either
                    job = JobRun(rep=rep, job_id="", status="error", reason=f"{type(exc).__name__}: {exc}"[:3000])
                    self.stack = None
                self.budget.record("job", self.budget.spent() - started)
                record.jobs.append(job)
                self.save()
                _say(f"{tag} job {rep + 1}/{self.a.repeat}: {self.job_line(job)}")
        if "profile" in self.a.steps and self.profiled < self.a.profiles:
            if not self.fits("profile", change):
                return False
            record.profile = steps.profile(
                found, device=self.a.device, peaks=self.peaks, dest=dest, timeout_s=self.budget.left()
            )
            self.budget.record("profile", record.profile.process_s)
            self.save()
            _say(f"{tag} profile in {record.profile.process_s:.1f} s (exit {record.profile.exit_code})")
            if "job" in self.a.steps and self.stack is not None and self.fits("job", change):
                from bench.zoo import jobs

                started = self.budget.spent()
                try:
                    record.unpaired_job = jobs.run(
                        self.stack, change, found, rep=0, dest=dest, timeout_s=self.budget.left(), paired=False
                    )
                    _say(f"{tag} unpaired job: {self.job_line(record.unpaired_job)}")
                except Exception as exc:
                    _say(f"{tag} unpaired job: {type(exc).__name__}: {exc}"[:3000])
                self.budget.record("job", self.budget.spent() - started)
                self.save()
            self.profiled += 1
        return True

    @staticmethod
    def job_line(job: JobRun) -> str:
        held = f", GPU held {job.held_s:.1f} s" if job.held_s is not None else ""
        head = f"{job.status} in {job.total_s or 0:.1f} s{held}"
        if job.outcome is None:
            return f"{head}: {job.reason or 'no paired comparison'}"
        return f"{head}: {describe(job.outcome)}"

    def all(self) -> None:
        if not self.changes or self.budget.left() < steps.FIRST_GUESS_S[self.a.device]["ab"]:
            self.doc.stopped = f"budget: {self.budget.left():.0f} s is less than a first step takes"
            _say(self.doc.stopped)
            return
        calibrated = steps.calibrate(self.a.device, self.peaks)
        _say(f"peaks measured in {calibrated.seconds:.0f} s (exit {calibrated.code})")
        with contextlib.ExitStack() as stack:
            if "job" in self.a.steps:
                from bench.zoo import jobs

                if not self.fits("stack", self.changes[0]):
                    return

                self.doc.testbed = self.a.testbed or testbed_name(self.doc)
                started = self.budget.spent()
                try:
                    self.stack = stack.enter_context(jobs.running(self.a.device, self.doc.testbed, self.work / "stack"))
                    _say(f"stack up after {self.budget.spent():.0f} s: {self.stack.url}, testbed {self.doc.testbed}")
                except Exception as exc:  # no jobs, then; the local runs still tell their part
                    self.doc.notes.append(f"the stack did not start: {type(exc).__name__}: {exc}"[:3000])
                    _say(self.doc.notes[-1])
                self.budget.record("stack", self.budget.spent() - started)
            for i, change in enumerate(self.changes, 1):
                if not self.one(i, change):
                    break


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for run.json and each change's documents")
    p.add_argument("--only", help="changes to run (comma-separated names; default: all)")
    p.add_argument("--quick", action="store_true", help="two changes, tiny shapes, a short timing table (CPU)")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda (cpu with --quick)")
    p.add_argument("--steps", default=",".join(STEPS), help="any of ab, job, profile (comma-separated)")
    p.add_argument("--repeat", type=int, default=1, help="ab runs and jobs per change (false alarms of A/A trees)")
    p.add_argument("--profiles", type=int, default=1000, help="profile the head of the first N changes only")
    p.add_argument("--budget-s", type=float, default=540.0, help="start no step that would end after this")
    p.add_argument("--testbed", help="the stack's testbed (default: zoo-<GPU model>, zoo-cpu)")
    p.add_argument("--peaks", type=Path, help="the profiler's peaks cache (default: one in --work, measured first)")
    p.add_argument("--work", type=Path, help="trees, peaks cache and the stack's files (default: a temporary folder)")
    a = p.parse_args(argv)
    a.device = a.device or ("cpu" if a.quick else "cuda")
    a.steps = [s for s in a.steps.split(",") if s]
    unknown = sorted(set(a.steps) - set(STEPS))
    if unknown:
        p.error(f"unknown steps {unknown}: choose from {', '.join(STEPS)}")
    changes = select(a.only, quick=a.quick)
    a.out.mkdir(parents=True, exist_ok=True)
    work = a.work or Path(tempfile.mkdtemp(prefix="attnprof-zoo-"))
    doc = RunDoc(
        provenance=provenance.host(a.device), quick=a.quick, steps=a.steps, repeat=a.repeat, budget_s=a.budget_s
    )
    runner = Runner(a, changes, doc, work)
    signal.signal(signal.SIGTERM, _interrupt)
    what = f"{len(changes)} change(s), steps {', '.join(a.steps)}, budget {a.budget_s:.0f} s"
    _say(f"zoo on {doc.provenance.machine}: {what}")
    try:
        runner.all()
    except KeyboardInterrupt as exc:
        doc.stopped = f"interrupted ({exc or 'SIGINT'}) after {runner.budget.spent():.0f} s"
        _say(doc.stopped)
    except Exception as exc:  # whatever broke, what was measured is written
        doc.stopped = f"error after {runner.budget.spent():.0f} s: {type(exc).__name__}: {exc}"[:3000]
        traceback.print_exc()
    finally:
        reached = {c.change for c in doc.changes}
        doc.not_run = [c.name for c in changes if c.name not in reached]
        runner.save()
    done = sum(len(c.ab) + len(c.jobs) for c in doc.changes)
    _say(f"wrote {a.out / records.RUN_FILE}: {len(doc.changes)} change(s), {done} comparison(s), {doc.wall_s:.0f} s")
    if doc.not_run:
        _say(f"not reached: {','.join(doc.not_run)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
