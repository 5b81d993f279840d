"""``attnprof bisect``: the bisection of ``attnprof.core.bisect`` over two refs of a local checkout, each probe a
paired run (``attnprof.core.measure.paired``) of two commits' trees on this device.

Each commit's tree is its ``git archive``, unpacked once into a folder kept while the bisection runs. The suite is
read from the bad commit's tree. Without a step given (``--effect``), the first probe measures it: the bad commit
against the good one, so a local bisection costs one probe more than the service's, which takes the step from its
alert.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from attnprof.core.analysis.paired import compare_paired
from attnprof.core.bisect import Bisection, Probe, Step, classify
from attnprof.core.errors import AttnprofError
from attnprof.core.measure.paired import PairedOptions, PairedRunError, profile_paired
from attnprof.core.suite import CaseSpec, Suite, load_suite, select_cases

Say = Callable[[str], None]


class BisectInputError(AttnprofError):
    """The refs, the checkout or the suite cannot be bisected (a bad ref, no commits between, no suite there)."""


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BisectInputError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def commits_between(repo: Path, good: str, bad: str) -> list[str]:
    """The good commit and every commit after it up to the bad one, oldest first, along the bad one's first parents
    (a merge is one commit here: its side branch's commits are searched where the merge is the culprit)."""
    good_sha = _git(repo, "rev-parse", "--verify", f"{good}^{{commit}}").strip()
    bad_sha = _git(repo, "rev-parse", "--verify", f"{bad}^{{commit}}").strip()
    try:
        _git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except BisectInputError:
        raise BisectInputError(f"--good {good} is not an ancestor of --bad {bad}") from None
    listed = _git(repo, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}").split()
    if not listed:
        raise BisectInputError(f"no commits between {good} and {bad}")
    return [good_sha, *listed]


def unpack(repo: Path, commit: str, folder: Path) -> Path:
    """``commit``'s tree in ``folder/<commit>`` (made once): its ``git archive``, members checked as a bundle's are
    (no absolute paths, no ``..``, no links leaving the tree)."""
    tree = folder / commit
    if tree.is_dir():
        return tree
    archive = folder / f"{commit}.tar"
    with archive.open("wb") as fh:
        done = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit], stdout=fh, check=False)
    if done.returncode != 0:
        raise BisectInputError(f"git archive {commit} failed")
    staging = folder / f".{commit}"
    with tarfile.open(archive) as tar:
        tar.extractall(staging, filter="data")  # refuses absolute paths, "..", and links out of the tree
    archive.unlink()
    staging.rename(tree)
    return tree


@dataclasses.dataclass
class LocalBisect:
    repo: Path
    good: str
    bad: str
    suite: Path  # relative to the repository's root
    out: Path
    device: str = "auto"
    cases: list[str] | None = None
    cache_dir: Path | None = None
    step: Step | None = None

    def run(self, say: Say = print) -> Bisection:
        commits = commits_between(self.repo, self.good, self.bad)
        self.out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="attnprof-bisect-") as tmp:
            trees = Path(tmp)
            bad_tree = unpack(self.repo, commits[-1], trees)
            suite_path = bad_tree / self.suite
            if not suite_path.is_file():
                raise BisectInputError(f"{self.suite}: no such suite file in {commits[-1]}")
            parsed = load_suite(suite_path)
            specs = select_cases(parsed, self.cases) if self.cases else parsed.cases
            step = self.step
            measured: list[Probe] = []  # the probe that measured the step, where no step was given
            if step is not None:  # the step's size from an alert; its cases are the ones selected here
                step = Step(tuple(s.id for s in specs), step.effect, step.low, step.high, step.share)
            if step is None:
                say(f"measuring the step: {commits[-1][:12]} against {commits[0][:12]}")
                first = self._probe(trees, suite_path, parsed, specs, commits[0], commits[-1], None)
                measured.append(first)
                step = self._step(first, [s.id for s in specs])
                if step is None:
                    say("no step: the bad commit is not slower than the good one on these cases")
                    bisection = Bisection(commits, Step(("-",), 1.0, 1.0, 1.0))
                    self._write(bisection, "not_reproduced", [first])
                    return bisection
            bisection = Bisection(commits, step)
            say(
                f"{len(commits) - 1} commit(s); the step {step.effect:+.1%} [{step.low:+.1%}, {step.high:+.1%}] on "
                f"{', '.join(step.cases)}; at most {bisection.budget} paired probe(s) if one commit holds it"
            )
            while (pair := bisection.next_pair()) is not None:
                good, candidate = pair
                say(f"probe {len(bisection.probes) + 1}: {candidate[:12]} against {good[:12]}")
                probe = self._probe(trees, suite_path, parsed, specs, good, candidate, step)
                bisection.record(good, candidate, probe)
                say(
                    f"  {probe.outcome}"
                    + (f" ({probe.effect:+.1%})" if probe.effect is not None else "")
                    + (f": {probe.detail}" if probe.detail else "")
                )
                self._write(bisection, bisection.status(), measured)
        say(bisection.summary())
        return bisection

    def _probe(
        self,
        trees: Path,
        suite_path: Path,
        parsed: Suite,
        specs: list[CaseSpec],
        good: str,
        candidate: str,
        step: Step | None,
    ) -> Probe:
        try:
            base, head = unpack(self.repo, good, trees), unpack(self.repo, candidate, trees)
        except BisectInputError as exc:
            return Probe(good, candidate, "skip", detail=str(exc))
        options = PairedOptions(device=self.device, cache_dir=self.cache_dir, cases=specs)
        try:
            outcome = profile_paired(suite_path, parsed, base, head, options)
        except (PairedRunError, AttnprofError) as exc:  # the tree does not build or import: git bisect skip
            return Probe(good, candidate, "skip", detail=str(exc).splitlines()[0][:300])
        comparison = compare_paired(outcome.base, outcome.head, outcome.paired)
        failed = {c.id for doc in (outcome.base, outcome.head) for c in doc.cases if c.status != "ok"}
        cases = step.cases if step is not None else tuple(s.id for s in specs)
        used = step or Step(cases, 1e-9, 0.0, 1e9, share=0.0)
        probe = classify(comparison, used, failed)
        return Probe(good, candidate, probe.outcome, probe.effect, probe.low, probe.high, probe.detail)

    @staticmethod
    def _step(first: Probe, cases: list[str]) -> Step | None:
        if first.outcome != "bad" or first.effect is None or first.effect <= 0:
            return None
        low = first.low if first.low is not None else first.effect
        high = first.high if first.high is not None else first.effect
        return Step(tuple(cases), first.effect, min(low, first.effect), max(high, first.effect))

    def _write(self, bisection: Bisection, status: str, extra: list[Probe]) -> None:
        body = {
            "schema": "attnprof.bisect/v1",
            "commits": bisection.commits,
            "step": dataclasses.asdict(bisection.step),
            "probes": [dataclasses.asdict(p) for p in [*extra, *bisection.probes]],
            "status": status,
            "culprit": bisection.culprit if status == "confirmed" else None,
            "summary": bisection.summary() if status != "running" else None,
        }
        (self.out / "bisect.json").write_text(json.dumps(body, indent=1) + "\n")
