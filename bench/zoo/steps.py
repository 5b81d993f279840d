"""The product's local verbs on one change, as a user runs them: ``python -m attnprof.core ab`` on the two trees and
``python -m attnprof.core profile`` of the head, each a process of its own, timed whole; and the budget they share."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from attnprof.core.analysis import render_table
from attnprof.core.documents import ResultDocument, load_result
from bench.zoo import outcomes
from bench.zoo.records import AbRun, ProfileRun
from bench.zoo.trees import Trees

ROOT = Path(__file__).resolve().parents[2]
# A first guess of each step's seconds, until one has run (then 1.15 times the longest so far).
FIRST_GUESS_S = {
    "cuda": {"ab": 45.0, "profile": 30.0, "job": 70.0, "stack": 60.0},
    "cpu": {"ab": 30.0, "profile": 20.0, "job": 60.0, "stack": 40.0},
}


@dataclass
class Budget:
    """Seconds for the whole run; a step starts only when it is expected to end within them."""

    total_s: float
    device: str
    started: float = field(default_factory=time.monotonic)
    took: dict[str, list[float]] = field(default_factory=dict)

    def spent(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.total_s - self.spent()

    def estimate(self, kind: str) -> float:
        seen = self.took.get(kind)
        return 1.15 * max(seen) if seen else FIRST_GUESS_S[self.device][kind]

    def fits(self, kind: str) -> bool:
        return self.spent() + self.estimate(kind) <= self.total_s

    def record(self, kind: str, seconds: float) -> None:
        self.took.setdefault(kind, []).append(seconds)


@dataclass
class Finished:
    code: int
    seconds: float
    tail: str


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_process(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float) -> Finished:
    """``argv`` in a session of its own, killed with everything it started once ``timeout_s`` has passed."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=max(1.0, timeout_s))
        code = proc.returncode
    except subprocess.TimeoutExpired:
        _kill(proc)
        output, _ = proc.communicate()
        code = -9
    except BaseException:  # interrupted (SIGTERM, Ctrl-C): nothing it started outlives the run
        _kill(proc)
        proc.wait()
        raise
    tail = output.decode(errors="replace")[-4000:]
    if code == -9:
        tail += f"\n[stopped after {timeout_s:.0f} s: the run's budget]"
    return Finished(code, round(time.perf_counter() - started, 3), tail)


def _gzip(path: Path) -> None:
    if path.is_file():
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes(), mtime=0))
        path.unlink()


def calibrate(device: str, peaks: Path) -> Finished:
    """The peaks cache every run of this zoo shares (measured once, before anything is timed)."""
    argv = [sys.executable, "-m", "attnprof.core", "calibrate", "--device", device, "--cache-dir", str(peaks)]
    return run_process(argv, cwd=ROOT, env=dict(os.environ), timeout_s=300)


def ab(
    trees: Trees, *, device: str, peaks: Path, dest: Path, rep: int, timeout_s: float
) -> tuple[AbRun, ResultDocument | None]:
    """``ab`` at its defaults (no --max-pairs, the suite without a timing table); its documents kept in ``dest``."""
    out = dest / f"ab-{rep}"
    shutil.rmtree(out, ignore_errors=True)
    argv = [
        sys.executable, "-m", "attnprof.core", "ab", str(trees.suite), "--base", str(trees.base),
        "--head", str(trees.head), "--out", str(out), "--device", device, "--cache-dir", str(peaks), "--quiet",
    ]  # fmt: skip
    done = run_process(argv, cwd=ROOT, env=dict(os.environ), timeout_s=timeout_s)
    for traces in ("traces", "base-traces"):
        shutil.rmtree(out / traces, ignore_errors=True)
    found = AbRun(rep=rep, exit_code=done.code, process_s=done.seconds)
    head = None
    comparison = out / "comparison.json"
    try:
        if comparison.is_file():
            doc = outcomes.parse(json.loads(comparison.read_text()), str(comparison))
            found.outcome = outcomes.outcome(doc)
            (out / "comparison.txt").write_text(render_table(doc) + "\n")
        if (out / "result.json").is_file():
            head = load_result(out / "result.json")
    except Exception as exc:  # a document this tree cannot read is a finding, not the end of the run
        found.error = f"{type(exc).__name__}: {exc}"[:2000]
    if found.outcome is None and found.error is None:
        found.error = done.tail
    (out / "output.txt").write_text(done.tail)
    for name in ("result.json", "base.json", "paired.json", "comparison.json"):
        _gzip(out / name)
    return found, head


def profile(trees: Trees, *, device: str, peaks: Path, dest: Path, timeout_s: float) -> ProfileRun:
    """One unpaired ``profile`` of the head, run from its tree as a user runs it (what a paired run's cost is held
    to)."""
    out = dest / "profile.json"
    traces = dest / "profile-traces"
    argv = [
        sys.executable, "-m", "attnprof.core", "profile", str(trees.suite), "--device", device, "--out", str(out),
        "--trace-dir", str(traces), "--cache-dir", str(peaks), "--quiet",
    ]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(trees.head), str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = run_process(argv, cwd=trees.head, env=env, timeout_s=timeout_s)
    shutil.rmtree(traces, ignore_errors=True)
    found = ProfileRun(exit_code=done.code, process_s=done.seconds)
    try:
        if out.is_file():
            doc = load_result(out)
            found.run_wall_s = doc.run.wall_s
            found.suspect = list(doc.run.suspect) if doc.run.suspect else None
    except Exception as exc:
        found.error = f"{type(exc).__name__}: {exc}"[:2000]
    if not out.is_file():
        found.error = done.tail
    _gzip(out)
    return found
