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
round times half of what a profile round times (``TimingConfig.paired_round_config``) and answers its median. After
``min_pairs`` and every two pairs after, the sequential rule (``analysis.paired_stats``) looks at the pair
differences and stops the case when it settles: slower, faster, or the same within the case's paired minimum effect
(``thresholds.paired``); after ``max_pairs`` it is ``max_rounds`` (ambiguous). A look that does not settle first sets
aside a pair far out of line with the case's others (one side's round stalled by something else on the host), marked
in the document with why, and runs one more pair in its place: at most a quarter of ``max_pairs`` per case (at least
one). The coordinator imports no torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, cast

from profiler_core.analysis.config import resolve
from profiler_core.analysis.paired_stats import Assessment, Replay, Rule, log_ratios, replay, set_aside_budget
from profiler_core.documents import ResultDocument, load_result
from profiler_core.documents.paired import Pair, PairedCase, PairedDocument, PairedRule, StoppedBy
from profiler_core.documents.result import Mode
from profiler_core.errors import AttnprofError
from profiler_core.suite import CaseSpec, Suite

# progress(event, done, total, case_id): "case" as each pair of rounds starts, "done" at the end.
Progress = Callable[[str, int, int, str], None]
SIDES = ("base", "head")
FirstBuilds = Literal["apart", "together"]


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
        "profiler_core.measure.side",
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


@dataclass
class _CaseRounds:
    spec: CaseSpec
    rule: Rule
    pairs: list[Pair] = field(default_factory=list)
    stopped_by: StoppedBy = "max_rounds"
    detail: str | None = None


def _describe(a: Assessment, set_aside: int) -> str:
    text = f"head/base {a.change:+.2%} [{a.low:+.2%}, {a.high:+.2%}] after {a.pairs} pairs"
    if set_aside:
        text += f" ({set_aside} more set aside as disturbed)"
    return text


def _run_case(
    sides: dict[str, _Side],
    rounds: _CaseRounds,
    *,
    stop_early: bool,
    first_apart: bool,
    on_pair: Callable[[], None],
) -> None:
    """Pairs of rounds of one case until the rule settles it, the rounds run out, or a side fails. A pair the rule
    sets aside as disturbed stays in ``rounds.pairs``, marked, and one more pair takes its place."""
    rule = rounds.rule
    so_far: Replay | None = None
    for n in range(1, rule.max_pairs + rule.max_set_aside + 1):
        on_pair()
        # AB, BA, AB, ... over the pairs that count: a pair that replaces a disturbed one keeps the orders even.
        counted = [p.order for p in rounds.pairs if p.disturbed is None]
        order: Literal["AB", "BA"] = "AB" if counted.count("AB") <= counted.count("BA") else "BA"
        turn = ("base", "head") if order == "AB" else ("head", "base")
        # Both sides built and warmed up first, then timed back to back, so the pair's two timed windows are
        # milliseconds apart; both sides run their round even when the other failed, so each document holds the case.
        # After the first pair the two builds run at the same time (nothing is timed while they do); the first is
        # one side after the other unless the run says "together", since a first call may tune itself by timing
        # (Triton's autotune, max-autotune compiles).
        apart = first_apart and n == 1
        answers: dict[str, dict[str, Any]] = {}
        prepare = {"op": "prepare", "case": rounds.spec.id}
        for name in turn:
            sides[name].send(prepare)
            if apart:
                answers[name] = sides[name].receive(prepare)
        for name in turn:
            ready = answers.pop(name) if apart else sides[name].receive(prepare)
            if not ready.get("ok"):
                answers[name] = ready
        for name in turn:
            if name not in answers:
                answers[name] = sides[name].ask({"op": "time", "case": rounds.spec.id})
        failed = [name for name in SIDES if not answers[name].get("ok")]
        if failed:
            skipped = all(answers[name].get("status") == "skipped" for name in SIDES)
            rounds.stopped_by = "skipped" if skipped else "failed"
            rounds.detail = "; ".join(
                f"the {name} side's round {n} failed: {answers[name].get('error')}" for name in failed
            )
            return
        base, head = answers["base"], answers["head"]
        rounds.pairs.append(
            Pair(
                order=order,
                base_us=base["median_us"],
                head_us=head["median_us"],
                base_mhz=base.get("mhz"),
                head_mhz=head.get("mhz"),
                base_samples=base["samples"],
                head_samples=head["samples"],
            )
        )
        if len(rounds.pairs) < rule.min_pairs:
            continue
        so_far = replay(
            log_ratios([p.base_us for p in rounds.pairs], [p.head_us for p in rounds.pairs]),
            rule,
            stop_early=stop_early,
        )
        for found in so_far.set_aside:
            rounds.pairs[found.index].disturbed = found.describe()
        if so_far.done:
            break
    # Each set-aside takes one of max_set_aside, so max_pairs are kept by then: the rule has stopped.
    assert so_far is not None and so_far.done and so_far.assessment is not None
    final = so_far.assessment
    detail = _describe(final, len(so_far.set_aside))
    if final.state == "ambiguous":
        rounds.stopped_by = "max_rounds"
        rounds.detail = f"{detail}: ambiguous; about {final.more_pairs} more pairs would settle it"
    else:
        rounds.stopped_by = final.state
        rounds.detail = detail


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
    max_pairs = options.max_pairs or suite.timing.paired_max_pairs
    roots = {"base": base_root, "head": head_root}
    with (
        tempfile.TemporaryDirectory(prefix="attnprof-ab-") as tmp,
        _sides(suite_path, roots, options, while_starting) as sides,
    ):
        mode = sides["head"].mode
        if sides["base"].mode != mode:
            raise PairedRunError(f"the sides run on different devices: base {sides['base'].mode}, head {mode}")
        defaults = resolve(cast(Mode, mode), suite.thresholds)
        default_rule = Rule(
            defaults.paired, defaults.fdr, min(4, max_pairs), max_pairs, max_set_aside=set_aside_budget(max_pairs)
        )
        rule_doc = PairedRule(
            min_effect=defaults.paired,
            alpha=defaults.fdr,
            min_pairs=default_rule.min_pairs,
            max_pairs=max_pairs,
            looks=default_rule.looks,
            trim=default_rule.trim,
            samples_per_round=_samples_text(suite),
            max_set_aside=default_rule.max_set_aside,
        )
        done = 0
        total = len(specs) * max_pairs
        cases: list[PairedCase] = []
        for spec in specs:
            th = resolve(cast(Mode, mode), suite.thresholds, spec.thresholds)
            rule = dataclasses.replace(default_rule, min_effect=th.paired)
            rounds = _CaseRounds(spec, rule)
            case_started = time.perf_counter()

            def on_pair(spec_id: str = spec.id, last: int = (specs.index(spec) + 1) * max_pairs - 1) -> None:
                nonlocal done
                if progress:  # a pair that replaces a disturbed one counts as the case's last
                    progress("case", min(done, last), total, spec_id)
                done += 1

            _run_case(
                sides,
                rounds,
                stop_early=options.stop_early,
                first_apart=options.first_builds == "apart",
                on_pair=on_pair,
            )
            done = (specs.index(spec) + 1) * max_pairs
            cases.append(
                PairedCase(
                    case=spec.id,
                    min_effect=th.paired,
                    stopped_by=rounds.stopped_by,
                    detail=rounds.detail,
                    wall_s=round(time.perf_counter() - case_started, 3),
                    pairs=rounds.pairs,
                )
            )
        # Both sides pool their rounds and write their documents at the same time (nothing is timed any more).
        finish = {name: {"op": "finish", "out": str(Path(tmp) / f"{name}.json")} for name in SIDES}
        for name, side in sides.items():
            side.send(finish[name])
        documents = {}
        for name, side in sides.items():
            side.receive(finish[name])
            documents[name] = load_result(Path(finish[name]["out"]))
    if progress:
        progress("done", total, total, "")
    paired = PairedDocument(
        mode=documents["head"].run.mode,
        base_run=documents["base"].run.id,
        head_run=documents["head"].run.id,
        rule=rule_doc,
        cases=cases,
        wall_s=round(time.perf_counter() - started, 3),
    )
    return PairedOutcome(base=documents["base"], head=documents["head"], paired=paired)


def _samples_text(suite: Suite) -> str:
    one = suite.timing.paired_round_config()
    return (
        f"{one.min_samples}-{one.max_samples} samples or {one.budget_s:.3g} s per round (half a profile round), "
        f"after {one.warmup} warm-up iterations; the workload built again for each round"
    )
