"""The zoo's scores: what each change's ground truth owes a comparison (slower, faster, nothing), whether each
comparison gave it, and the targets (1% changes caught, identical trees failed, the cost against an unpaired
profile) per GPU. Read from the folders ``truth.py`` and ``run.py`` wrote; ``report.py`` prints them."""

from __future__ import annotations

import gzip
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnprof.core.analysis.paired import compare_paired
from attnprof.core.documents.paired import PairedDocument
from attnprof.core.documents.result import ResultDocument
from bench.zoo import outcomes, records
from bench.zoo.changes import CHANGES
from bench.zoo.records import AbRun, ChangeRun, JobRun, Outcome, RunDoc, TruthChange, TruthDoc

MIN_EFFECT = 0.005  # the paired comparison's minimum effect on CUDA: smaller true effects are not owed a detection
TARGET_CAUGHT = 0.95  # of changes of 1% or more, called a failure
TARGET_FALSE = 0.01  # of identical trees, called a failure
TARGET_COST = 1.5  # a paired run's time against one unpaired profile
BINS = ((0.005, 0.01), (0.01, 0.02), (0.02, 0.05), (0.05, 0.10), (0.10, math.inf))


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson interval of a proportion k/n."""
    if n == 0:
        return 0.0, 1.0
    z, p = 1.959964, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Truth:
    """A change's effect on one GPU: its largest case (by size of effect), and what that says should happen."""

    case: str
    effect: float
    low: float
    high: float
    base_us: float | None
    head_us: float | None

    @property
    def kind(self) -> str:
        if self.low > 0 and self.effect >= MIN_EFFECT:
            return "slower"
        if self.high < 0 and self.effect <= -MIN_EFFECT:
            return "faster"
        return "none"


def main_truth(change: TruthChange | None) -> Truth | None:
    measured = [c for c in change.cases if c.effect is not None] if change else []
    if not measured:
        return None
    c = max(measured, key=lambda c: abs(c.effect or 0.0))
    assert c.effect is not None and c.ci_low is not None and c.ci_high is not None
    return Truth(c.case, c.effect, c.ci_low, c.ci_high, c.base_us, c.head_us)


@dataclass
class Machine:
    """Everything one GPU (or CPU host) gave: its truth per change and its runs per change."""

    name: str
    folders: list[str] = field(default_factory=list)
    truths: dict[str, TruthChange] = field(default_factory=dict)
    truth_docs: list[tuple[str, TruthDoc]] = field(default_factory=list)
    run_docs: list[tuple[str, RunDoc]] = field(default_factory=list)
    runs: dict[str, list[ChangeRun]] = field(default_factory=dict)

    def truth(self, change: str) -> Truth | None:
        return main_truth(self.truths.get(change))

    def ab(self, change: str) -> list[AbRun]:
        return [r for c in self.runs.get(change, []) for r in c.ab]

    def jobs(self, change: str) -> list[JobRun]:
        return [j for c in self.runs.get(change, []) for j in c.jobs]

    rejudged: dict[tuple[str, int], tuple[Outcome, Outcome]] = field(default_factory=dict)


def rejudge(folder: Path, change: str, run: AbRun) -> Outcome | None:
    """An ``ab`` run's three saved documents judged again by today's ``compare_paired``: the same measurement under
    the current rules (None where the documents were not saved)."""
    saved = folder / change / f"ab-{run.rep}"
    names = ("base.json.gz", "result.json.gz", "paired.json.gz")
    if not all((saved / n).is_file() for n in names):
        return None
    base, head = (ResultDocument.model_validate_json(gzip.decompress((saved / n).read_bytes())) for n in names[:2])
    paired = PairedDocument.model_validate_json(gzip.decompress((saved / names[2]).read_bytes()))
    return outcomes.outcome(compare_paired(base, head, paired))


def gather(folders: Sequence[Path]) -> list[Machine]:
    machines: dict[str, Machine] = {}
    for folder in folders:
        truth, run = records.load_truth(folder), records.load_run(folder)
        for doc in (truth, run):
            if doc is None:
                continue
            m = machines.setdefault(doc.provenance.machine, Machine(doc.provenance.machine))
            if str(folder) not in m.folders:
                m.folders.append(str(folder))
        if truth is not None:
            m = machines[truth.provenance.machine]
            m.truth_docs.append((str(folder), truth))
            for change in truth.changes:  # a later measurement of the same change wins
                m.truths[change.change] = change
        if run is not None:
            m = machines[run.provenance.machine]
            m.run_docs.append((str(folder), run))
            for change_run in run.changes:
                m.runs.setdefault(change_run.change, []).append(change_run)
                for ab in change_run.ab:
                    now = rejudge(folder, change_run.change, ab) if ab.outcome is not None else None
                    if ab.outcome is not None and now is not None and now.verdict != ab.outcome.verdict:
                        m.rejudged[(change_run.change, len(m.rejudged))] = (ab.outcome, now)
    return list(machines.values())


def caught(outcome: Outcome | None, truth: Truth | None, identical: bool) -> str:
    """Whether a comparison gave the answer the ground truth owes: yes, no, false alarm, or — (none owed)."""
    if outcome is None:
        return "no verdict"
    if identical:
        return "false alarm" if outcome.verdict == "fail" else "—"
    if truth is None or truth.kind == "none":
        # A change of backend (or accuracy) fails whatever the time does: that is no false alarm.
        by = sorted({o.metric for o in outcome.others if o.verdict == "fail"})
        if outcome.verdict == "fail":
            return f"fail on {', '.join(by)}" if by else "false alarm"
        return "—"
    if truth.kind == "slower":
        return "yes" if outcome.verdict == "fail" else "no"
    line = outcome.case(truth.case)
    return "yes" if line is not None and line.status == "improved" else "no"


@dataclass
class Tally:
    k: int = 0
    n: int = 0

    def add(self, hit: bool) -> None:
        self.k += hit
        self.n += 1

    def show(self) -> str:
        if self.n == 0:
            return "no runs"
        low, high = wilson(self.k, self.n)
        return f"{self.k}/{self.n} ({self.k / self.n:.0%}; 95% interval {low:.0%}–{high:.0%})"


def outcomes_of(m: Machine, change: str) -> dict[str, list[Outcome | None]]:
    return {"ab": [r.outcome for r in m.ab(change)], "job": [j.outcome for j in m.jobs(change)]}


def caught_target(m: Machine) -> dict[str, Tally]:
    found = {"ab": Tally(), "job": Tally()}
    for c in CHANGES:
        t = m.truth(c.name)
        if c.identical or t is None or t.kind != "slower" or t.effect < 0.01:
            continue
        for path, outs in outcomes_of(m, c.name).items():
            for o in outs:
                if o is not None:
                    found[path].add(o.verdict == "fail")
    return found


def false_target(m: Machine) -> dict[str, Tally]:
    found = {"ab": Tally(), "job": Tally()}
    for c in CHANGES:
        if c.identical:
            for path, outs in outcomes_of(m, c.name).items():
                for o in outs:
                    if o is not None:
                        found[path].add(o.verdict == "fail")
    return found


def cost_ratios(m: Machine) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"ab": [], "job": []}
    for c in CHANGES:
        profiles = [r.profile for r in m.runs.get(c.name, []) if r.profile and r.profile.exit_code in (0, 1)]
        if not profiles:
            continue
        unpaired = statistics.median(p.process_s for p in profiles)
        abs_ = [r.process_s for r in m.ab(c.name) if r.outcome is not None]
        held = [j.held_s for j in m.jobs(c.name) if j.held_s is not None]
        alone = unpaired_held(m, c.name)
        if abs_:
            found["ab"].append(statistics.median(abs_) / unpaired)
        if held:
            found["job"].append(statistics.median(held) / (alone or unpaired))
    return found


def unpaired_held(m: Machine, change: str) -> float | None:
    """The GPU time the worker held for the head alone as an unpaired job (the paired job's yardstick), if it ran."""
    held = [
        r.unpaired_job.held_s
        for r in m.runs.get(change, [])
        if r.unpaired_job is not None and r.unpaired_job.status == "done" and r.unpaired_job.held_s is not None
    ]
    return statistics.median(held) if held else None


def judge_caught(t: Tally) -> str:
    if t.n == 0:
        return "not measured"
    rate = t.k / t.n
    return "met" if rate >= TARGET_CAUGHT else f"**not met** by {(TARGET_CAUGHT - rate) * 100:.0f} points"


def judge_false(t: Tally) -> str:
    if t.n == 0:
        return "not measured"
    rate, high = t.k / t.n, wilson(t.k, t.n)[1]
    if rate > TARGET_FALSE:
        return f"**not met** by {(rate - TARGET_FALSE) * 100:.0f} points"
    if high > TARGET_FALSE:
        runs = "one run" if t.n == 1 else f"{t.n} runs"
        return f"no false alarm seen; {runs} cannot show ≤ 1% (the interval reaches {high:.0%})"
    return "met"


def judge_cost(ratios: list[float]) -> str:
    if not ratios:
        return "not measured"
    mid = statistics.median(ratios)
    over = sum(r > TARGET_COST for r in ratios)
    verdict = "met" if mid <= TARGET_COST else f"**not met** by {mid - TARGET_COST:.2f}x"
    return f"median {mid:.2f}x, max {max(ratios):.2f}x, {over} of {len(ratios)} changes over 1.5x: {verdict}"
