"""A paired run: the merge base and the head profiled interleaved on one device, one process per tree.

Why processes: a custom target is ``package.module:factory`` imported from the tree, and both trees hold the same
package names. One interpreter cannot hold two versions of a module under one name (``sys.modules`` is global, and
so are what the code registers: torch.library ops, Triton's and Inductor's caches keyed by function, backend flags
set at import), so each side runs in a process of its own (``measure.side``) that sees its own tree only. The two
processes share the device, never at the same time: the coordinator (this module, which holds no device context)
tells one side to time a round, waits for its answer, then tells the other.

Per case: pairs of rounds, the base's then the head's (order AB), then the head's then the base's (BA), and so on
(ABBA), so that which side times second (after the other process) and drift within a pair cancel over two pairs, and
drift slower than a pair within it. For each pair both sides first build the workload again (its tensors land
elsewhere) and warm it up, then time their rounds back to back: the two timed windows are milliseconds apart. A
round times half of what a profile round times (``TimingConfig.paired_round_config``) and answers its median. Each
case (``measure.paired_case``) first runs warm-up pairs, unrecorded, until both sides' rounds agree
(``analysis.paired_plan``), then has its pairs planned from its budget of device time (``[suite.timing]
paired_budget`` times what its rounds take in an unpaired profile, within ``paired_floor_pairs`` and
``paired_max_pairs``; ``--max-pairs`` sets a count instead). At its looks the sequential rule
(``analysis.paired_stats``) stops the case when it settles: slower or faster (at alpha split over the run's cases, so
the verdict confirms it), or the same within the case's paired minimum effect (``thresholds.paired``); once its
planned pairs are spent it is ``max_rounds`` (ambiguous). A look that does not settle first sets aside a pair far out
of line with the case's others (one side's round stalled by something else on the host, or the GPU's state changed
between the pair's two windows), marked in the document with why, and runs one more pair in its place: at most a
quarter of the case's pairs (at least one). The coordinator imports no torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, cast

from attnprof.core.analysis.config import PAIR_SPREAD_PRIOR, resolve
from attnprof.core.analysis.paired_plan import Budget, warmup_tolerance
from attnprof.core.analysis.paired_stats import Rule, disturbed_floor, set_aside_budget
from attnprof.core.documents import ResultDocument, load_result
from attnprof.core.documents.paired import PairedCase, PairedDocument, PairedRule
from attnprof.core.documents.result import Mode
from attnprof.core.errors import AttnprofError
from attnprof.core.measure.paired_case import SIDES, CaseRounds, run_case
from attnprof.core.suite import CaseSpec, Suite

# progress(event, done, total, case_id): "case" as each pair of rounds starts (done: the cases finished before it),
# "done" at the end.
Progress = Callable[[str, int, int, str], None]
FirstBuilds = Literal["apart", "together"]
# Each look of the sequential rule at least this many times the last, two pairs apart at least (analysis.paired_stats).
LOOK_GROWTH = 1.25


class PairedRunError(AttnprofError):
    """A side could not start or died mid-run; the message names the side and why."""


class PairedInputError(AttnprofError):
    """The trees given cannot make a paired run (missing, or the same folder twice)."""


@dataclass
class PairedOptions:
    device: str = "auto"
    cache_dir: Path | None = None
    trace_dir: Path | None = None  # the head's traces
    base_trace_dir: Path | None = None
    seed: int = 0
    command: str | None = None
    own_pid_namespace: bool = False
    cases: list[CaseSpec] | None = None
    max_pairs: int | None = None  # default: the suite's paired_max_pairs
    stop_early: bool = True  # False: every case runs max_pairs (to record long series)
    # "apart": a case's first builds run one side after the other, so code that tunes itself by timing on its first
    # call (Triton's autotune, max-autotune compiles) tunes on an idle device; "together": both at once (faster).
    first_builds: FirstBuilds = "apart"
    python: str = sys.executable


@dataclass
class PairedOutcome:
    base: ResultDocument
    head: ResultDocument
    paired: PairedDocument


@dataclass
class _Side:
    name: str
    process: subprocess.Popen[bytes]
    commands: IO[str]
    replies: IO[str]
    mode: str = ""
    dead: str = ""  # why it stopped answering

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        return self.receive(message)

    def send(self, message: dict[str, Any]) -> None:
        if self.dead:
            raise PairedRunError(f"the {self.name} side is gone: {self.dead}")
        try:
            self.commands.write(json.dumps(message) + "\n")
            self.commands.flush()
        except (BrokenPipeError, OSError) as exc:
            self.dead = str(exc)

    def receive(self, message: dict[str, Any]) -> dict[str, Any]:
        line = ""
        if not self.dead:
            try:
                line = self.replies.readline()
            except OSError as exc:
                self.dead = str(exc)
        if not line:
            code = self.process.wait()
            self.dead = self.dead or f"its process ended with code {code}"
            raise PairedRunError(
                f"the {self.name} side died during {message.get('op')} {message.get('case', '')}: {self.dead}"
            )
        answer: dict[str, Any] = json.loads(line)
        return answer


def side_environment(root: Path, roots: Sequence[Path], base_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the side whose tree is ``root``: ``PYTHONPATH`` with ``root`` first and neither tree's
    root (nor anything inside one) after it, so the other tree is never importable."""
    env = dict(os.environ if base_env is None else base_env)
    resolved = [r.resolve() for r in roots]

    def inside_a_tree(entry: str) -> bool:
        p = Path(entry).resolve()
        return any(p == r or r in p.parents for r in resolved)

    kept = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e and not inside_a_tree(e)]
    env["PYTHONPATH"] = os.pathsep.join([str(root), *kept])
    return env


@contextlib.contextmanager
def _sides(
    suite_path: Path, roots: dict[str, Path], options: PairedOptions, while_starting: Callable[[], object] | None
) -> Iterator[dict[str, _Side]]:
    started: dict[str, _Side] = {}
    # One after the other when the peaks are not cached yet: the first measures them into the cache, which the
    # second then reads (two at once would each measure under the other's load). A worker host calibrates before it
    # takes jobs, so there both start at once.
    cached = options.cache_dir is not None and any(options.cache_dir.glob("peaks-*.json"))
    try:
        for name in SIDES:
            started[name] = _start(name, suite_path, roots, options)
            if while_starting is not None:
                while_starting()  # the coordinator's own work, while the side imports torch and opens the device
                while_starting = None
            if not cached:
                _ready(started[name])
        if cached:
            for side in started.values():
                _ready(side)
        yield started
    finally:
        for side in started.values():
            for stream in (side.commands, side.replies):
                with contextlib.suppress(OSError):
                    stream.close()
            try:
                side.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                side.process.kill()
                side.process.wait()


def _ready(side: _Side) -> None:
    ready = json.loads(side.replies.readline() or "{}")
    if not ready.get("ready"):
        code = side.process.wait()
        why = ready.get("error") or f"its process ended with code {code} before it was ready"
        raise PairedRunError(f"the {side.name} side could not start: {why}")
    side.mode = str(ready["mode"])


def _start(name: str, suite_path: Path, roots: dict[str, Path], options: PairedOptions) -> _Side:
    root = roots[name]
    cmd_read, cmd_write = os.pipe()
    reply_read, reply_write = os.pipe()
    trace_dir = options.trace_dir if name == "head" else options.base_trace_dir
    argv = [
        options.python,
        "-m",
        "attnprof.core.measure.side",
        "--suite",
        str(suite_path.resolve()),
        "--cmd-fd",
        str(cmd_read),
        "--reply-fd",
        str(reply_write),
        "--device",
        options.device,
        "--seed",
        str(options.seed),
        # This process is the job's root: each side then counts the other, a child of it too, as the job's own
        # rather than another process on the GPU (``attnprof.core.own_processes``).
        "--job-root",
        str(os.getpid()),
    ]
    if trace_dir is not None:
        argv += ["--trace-dir", str(trace_dir.resolve())]
    if options.cache_dir is not None:
        argv += ["--cache-dir", str(options.cache_dir.resolve())]
    if options.command:
        argv += ["--command", f"{options.command} ({name})"]
    if options.own_pid_namespace:
        argv.append("--pid-namespace")
    env = side_environment(root, list(roots.values()))
    try:
        process = subprocess.Popen(argv, cwd=root, env=env, pass_fds=(cmd_read, reply_write))
    finally:
        os.close(cmd_read)
        os.close(reply_write)
    return _Side(
        name=name,
        process=process,
        commands=os.fdopen(cmd_write, "w", encoding="utf-8"),
        replies=os.fdopen(reply_read, "r", encoding="utf-8"),
    )


def profile_paired(
    suite_path: Path,
    suite: Suite,
    base_root: Path,
    head_root: Path,
    options: PairedOptions,
    progress: Progress | None = None,
    while_starting: Callable[[], object] | None = None,
) -> PairedOutcome:
    """Profile ``suite`` (read from ``suite_path``) on the trees ``base_root`` and ``head_root``, interleaved; returns
    both sides' result documents and the pairs. ``while_starting`` runs once the first side's process is started
    (e.g. imports the comparison needs). Raises ``PairedRunError`` when a side cannot start or dies."""
    if base_root.resolve() == head_root.resolve():
        raise PairedInputError(f"--base and --head are the same directory ({base_root}): a paired run needs two trees")
    for what, root in (("--base", base_root), ("--head", head_root)):
        if not root.is_dir():
            raise PairedInputError(f"{what} {root}: not a directory")
    started = time.perf_counter()
    specs = options.cases if options.cases is not None else suite.cases
    timing = suite.timing
    # --max-pairs: the count alone decides, as asked; recording runs every case to it. Otherwise each case's budget.
    counted = options.max_pairs is not None or not options.stop_early
    max_pairs = options.max_pairs or timing.paired_max_pairs
    roots = {"base": base_root, "head": head_root}
    with (
        tempfile.TemporaryDirectory(prefix="attnprof-paired-") as tmp,
        _sides(suite_path, roots, options, while_starting) as sides,
    ):
        mode = sides["head"].mode
        if sides["base"].mode != mode:
            raise PairedRunError(f"the sides run on different devices: base {sides['base'].mode}, head {mode}")
        defaults = resolve(cast(Mode, mode), suite.thresholds)
        budget = Budget(
            factor=None if counted else timing.paired_budget,
            rounds=timing.effective_rounds,
            floor=min(timing.paired_floor_pairs, max_pairs),
            ceiling=max_pairs,
        )
        default_rule = case_rule(defaults.paired, defaults.fdr, max_pairs, cast(Mode, mode), family=len(specs))
        rule_doc = PairedRule(
            min_effect=defaults.paired,
            alpha=defaults.fdr,
            min_pairs=default_rule.min_pairs,
            max_pairs=max_pairs,
            looks=default_rule.looks,
            trim=default_rule.trim,
            samples_per_round=_samples_text(suite),
            max_set_aside=default_rule.max_set_aside,
            family=default_rule.family,
            budget=budget.factor,
            floor_pairs=budget.floor if budget.factor is not None else None,
            warmup_rounds=timing.paired_warmup_rounds,
            disturbed_factor=default_rule.disturbed_factor,
            spread_prior=default_rule.spread_prior,
        )
        cases: list[PairedCase] = []
        for index, spec in enumerate(specs):
            th = resolve(cast(Mode, mode), suite.thresholds, spec.thresholds)
            rounds = CaseRounds(
                spec.id,
                case_rule(th.paired, defaults.fdr, max_pairs, cast(Mode, mode), family=len(specs)),
                budget=budget,
                warmup_rounds=timing.paired_warmup_rounds,
                warmup_tolerance=warmup_tolerance(th.paired),
            )
            case_started = time.perf_counter()

            def on_pair(spec_id: str = spec.id, done: int = index) -> None:
                if progress:
                    progress("case", done, len(specs), spec_id)

            rule = run_case(
                sides,
                rounds,
                stop_early=options.stop_early,
                first_apart=options.first_builds == "apart",
                on_pair=on_pair,
            )
            cases.append(_paired_case(rounds, rule, th.paired, round(time.perf_counter() - case_started, 3)))
        # Both sides pool their rounds and write their documents at the same time (nothing is timed any more).
        finish = {name: {"op": "finish", "out": str(Path(tmp) / f"{name}.json")} for name in SIDES}
        for name, side in sides.items():
            side.send(finish[name])
        documents = {}
        for name, side in sides.items():
            side.receive(finish[name])
            documents[name] = load_result(Path(finish[name]["out"]))
    if progress:
        progress("done", len(specs), len(specs), "")
    paired = PairedDocument(
        mode=documents["head"].run.mode,
        base_run=documents["base"].run.id,
        head_run=documents["head"].run.id,
        rule=rule_doc,
        cases=cases,
        wall_s=round(time.perf_counter() - started, 3),
    )
    return PairedOutcome(base=documents["base"], head=documents["head"], paired=paired)


def case_rule(min_effect: float, alpha: float, max_pairs: int, mode: Mode, *, family: int) -> Rule:
    """The sequential rule of a case judged at ``min_effect``, up to ``max_pairs`` pairs: looks at 4, 6, 8 and 10
    pairs, then each at least a quarter more than the last (fewer looks than every two pairs, so less of alpha is spent
    on each: 10 looks up to 40 pairs where every two pairs would make 19), a change called at ``alpha`` split over the
    ``family`` of the run's cases, the set-aside test's floor and prior spread for ``mode``."""
    return Rule(
        min_effect,
        alpha,
        min(4, max_pairs),
        max_pairs,
        growth=LOOK_GROWTH,
        max_set_aside=set_aside_budget(max_pairs),
        family=max(1, family),
        disturbed_factor=disturbed_floor(min_effect),
        spread_prior=PAIR_SPREAD_PRIOR[mode],
    )


def _paired_case(rounds: CaseRounds, rule: Rule, min_effect: float, wall_s: float) -> PairedCase:
    planned = rounds.planned
    ran_out = rounds.stopped_by == "max_rounds"
    return PairedCase(
        case=rounds.case_id,
        min_effect=min_effect,
        stopped_by=rounds.stopped_by,
        detail=rounds.detail,
        wall_s=wall_s,
        pairs=rounds.pairs,
        warmup=rounds.warmup,
        warmup_end=rounds.warmup_end,
        warmup_tolerance=rounds.warmup_tolerance if rounds.warmup_rounds else None,
        max_pairs=rule.max_pairs if rounds.pairs else None,
        looks=rule.looks if rounds.pairs else None,
        limit=(planned.limit if planned is not None else "ceiling") if ran_out else None,
        reference_s=_seconds(planned.reference_s) if planned is not None else None,
        budget_s=_seconds(planned.budget_s) if planned is not None else None,
        spent_s=_seconds(rounds.spent_s) if rounds.pair_s else None,
    )


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _samples_text(suite: Suite) -> str:
    one = suite.timing.paired_round_config()
    return (
        f"{one.min_samples}-{one.max_samples} samples or {one.budget_s:.3g} s per round (half a profile round), "
        f"after {one.warmup} warm-up iterations; the workload built again for each round"
    )
