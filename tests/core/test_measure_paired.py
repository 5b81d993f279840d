"""Paired runs on CPU: two trees, one process per side, warm-up pairs kept out of the documents' samples, ABBA rounds,
early stopping, a stalled round set aside and its pair run again, the documents they write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from attnprof.core.analysis.paired_stats import Rule
from attnprof.core.documents import load_result
from attnprof.core.documents.paired import PairedDocument
from attnprof.core.measure.paired import side_environment
from attnprof.core.measure.paired_case import CaseRounds, run_case
from tests.profiling_support import suite_text

REPO = Path(__file__).resolve().parents[2]

FACTORY = """
import os, sys, time
from pathlib import Path

import torch

import plant

REPEAT = {repeat}


def make(params, device):
    here = Path.cwd().resolve()
    assert Path(plant.__file__).resolve().parent.parent == here, (plant.__file__, here)
    for tree in params["args"]["trees"]:
        tree = Path(tree).resolve()
        if tree == here:
            continue
        assert not any(p and Path(p).resolve() == tree for p in sys.path), sys.path
        assert not any(
            str(getattr(m, "__file__", "") or "").startswith(str(tree)) for m in list(sys.modules.values())
        ), "a module of the other tree is loaded"
    {crash}
    a = torch.randn(96, 96, device=device)

    def fn(x):
        for _ in range(REPEAT):
            x = torch.tanh(x @ a)
        return x

    return fn, (torch.randn(96, 96, device=device),)
"""

SUITE = """
[suite]
name = "paired-test"
thresholds = {{ paired = {paired} }}
[suite.timing]
warmup = 2
min_samples = 6
max_samples = 12
budget_s = 0.4
rounds = 2

[[cases]]
name = "plant"
target = "plant.work:make"
args = {{ trees = [{trees}] }}
"""


def _tree(root: Path, repeat: int, crash: str = "") -> Path:
    (root / "plant").mkdir(parents=True)
    (root / "plant" / "__init__.py").write_text("")
    (root / "plant" / "work.py").write_text(FACTORY.format(repeat=repeat, crash=crash or "pass"))
    return root


def _suite(tmp: Path, base: Path, head: Path, paired: float = 0.10) -> Path:
    path = tmp / "attnprof.toml"
    path.write_text(SUITE.format(paired=paired, trees=f'"{base}", "{head}"'))
    return path


def _env(head: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(head), str(REPO)]), "OMP_NUM_THREADS": "1"}


def _run_paired(tmp: Path, suite: Path, base: Path, head: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "attnprof.core", "paired", str(suite), "--base", str(base), "--head", str(head)]
    argv += ["--out", str(tmp / "out"), "--device", "cpu", "--cache-dir", str(tmp / "cache"), "--quiet", *extra]
    return subprocess.run(argv, cwd=tmp, env=_env(head), capture_output=True, text=True, timeout=300)


def _paired(tmp: Path) -> PairedDocument:
    return PairedDocument.model_validate_json((tmp / "out" / "paired.json").read_text())


def test_each_side_sees_its_own_tree_only_and_rounds_alternate(tmp_path: Path) -> None:
    base, head = _tree(tmp_path / "base", 1), _tree(tmp_path / "head", 1)
    done = _run_paired(tmp_path, _suite(tmp_path, base, head), base, head, "--record", "--max-pairs", "5")
    assert done.returncode in (0, 1), done.stderr
    paired = _paired(tmp_path)
    (case,) = paired.cases
    # Every round of both sides ran: the factory's isolation checks raise otherwise and the case would fail.
    assert case.stopped_by != "failed", case.detail
    # Five pairs count, in ABBA order; on this shared host one may be set aside as stalled and run again.
    assert [p.order for p in case.counted] == ["AB", "BA", "AB", "BA", "AB"]
    assert len(case.pairs) <= 5 + paired.rule.max_set_aside
    assert all(p.base_samples >= 3 and p.head_samples >= 3 for p in case.pairs)
    # Warm-up pairs ran first, in the document beside the pairs, until the rounds agreed or the bound was spent.
    assert 2 <= len(case.warmup) <= paired.rule.warmup_rounds and case.warmup_end in ("steady", "bound")
    head_doc, base_doc = load_result(tmp_path / "out" / "result.json"), load_result(tmp_path / "out" / "base.json")
    assert (paired.head_run, paired.base_run) == (head_doc.run.id, base_doc.run.id)
    # ... and out of both sides' samples: each result document holds the pairs' rounds only.
    assert head_doc.cases[0].latency_us is not None and head_doc.cases[0].latency_us.rounds == len(case.pairs)
    assert base_doc.cases[0].latency_us is not None and base_doc.cases[0].latency_us.rounds == len(case.pairs)
    # --max-pairs: the count alone, no device-time budget.
    assert paired.rule.budget is None and case.max_pairs == 5 and case.budget_s is None
    # each side's kernels hold every one of its rounds' traced iterations (the suite's default: 3 a round)
    for doc in (head_doc, base_doc):
        assert doc.cases[0].kernels
        assert all(k.duration_us.round_samples == [3] * 5 for k in doc.cases[0].kernels)
    comparison = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert comparison["mode"] == "paired" and comparison["paired"]["base_run"] == base_doc.run.id
    assert (tmp_path / "out" / "traces").is_dir() and (tmp_path / "out" / "base-traces").is_dir()
    # The documents written are valid against the schemas `attnprof schema paired|comparison` prints.
    for name, document in (("paired", "paired.json"), ("comparison", "comparison.json")):
        printed = subprocess.run(
            [sys.executable, "-m", "attnprof.core", "schema", name], capture_output=True, text=True, check=True
        )
        schema = json.loads(printed.stdout)
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft202012Validator(schema).validate(json.loads((tmp_path / "out" / document).read_text()))


def test_a_planted_slowdown_stops_early_as_slower(tmp_path: Path) -> None:
    base, head = _tree(tmp_path / "base", 1), _tree(tmp_path / "head", 12)
    done = _run_paired(tmp_path, _suite(tmp_path, base, head), base, head)
    paired = _paired(tmp_path)
    (case,) = paired.cases
    assert case.stopped_by == "slower", case.detail
    assert len(case.pairs) == paired.rule.min_pairs  # settled at the first look
    # At the defaults: a device-time budget, planned after the warm-up, here the floor (the tiny suite's one round).
    assert paired.rule.budget == 6.0 and case.max_pairs == paired.rule.floor_pairs == 16
    assert case.spent_s is not None and case.budget_s is not None and case.reference_s is not None
    comparison = json.loads((tmp_path / "out" / "comparison.json").read_text())
    (finding,) = [f for f in comparison["findings"] if f["case"] == "plant" and f["rounds"] is not None]
    # twelve times the base's matmuls; the flush and the call around them weigh the same on both sides, and more on a
    # loaded 2-core host (+111% seen under two test runs at once): still far above the 10% paired threshold
    assert finding["status"] == "regressed" and finding["change"] > 0.5
    # A suspect run (this host is shared) warns instead of failing; otherwise the exit status says fail.
    assert done.returncode == (0 if comparison["suspect"] or finding["verdict"] == "warn" else 1), done.stderr


def test_a_case_the_base_cannot_build_stops_as_failed(tmp_path: Path) -> None:
    base, head = tmp_path / "base", _tree(tmp_path / "head", 1)
    base.mkdir()
    done = _run_paired(tmp_path, _suite(tmp_path, base, head), base, head)
    assert done.returncode in (0, 1), done.stderr
    (case,) = _paired(tmp_path).cases
    assert case.stopped_by == "failed" and "base side" in (case.detail or "")
    assert load_result(tmp_path / "out" / "base.json").cases[0].status == "failed"
    assert load_result(tmp_path / "out" / "result.json").cases[0].status == "ok"


def test_a_side_that_dies_fails_the_run_and_is_named(tmp_path: Path) -> None:
    base, head = _tree(tmp_path / "base", 1), _tree(tmp_path / "head", 1, crash="os._exit(9)")
    done = _run_paired(tmp_path, _suite(tmp_path, base, head), base, head)
    assert done.returncode == 1
    assert "the head side died" in done.stderr and "code 9" in done.stderr
    assert not (tmp_path / "out" / "result.json").exists()


@pytest.mark.parametrize("which", ["same", "missing"])
def test_trees_that_cannot_pair_are_bad_input(tmp_path: Path, which: str) -> None:
    head = _tree(tmp_path / "head", 1)
    base = head if which == "same" else tmp_path / "nowhere"
    done = _run_paired(tmp_path, _suite(tmp_path, base, head), base, head)
    assert done.returncode == 2
    assert ("same directory" if which == "same" else "not a directory") in done.stderr


def test_a_side_environment_drops_both_trees_from_the_inherited_path(tmp_path: Path) -> None:
    base, head, lib = tmp_path / "base", tmp_path / "head", tmp_path / "lib"
    for p in (base, head, lib):
        p.mkdir()
    inherited = os.pathsep.join([str(head), str(head / "sub"), str(lib), str(base)])
    env = side_environment(base, [base, head], {"PYTHONPATH": inherited, "HOME": "/h"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(base), str(lib)]
    assert env["HOME"] == "/h"


def _skipping_suite(tmp: Path) -> tuple[Path, Path, Path]:
    """Two empty trees and a suite of one case neither side can run on CPU (cuDNN): the cheapest paired run."""
    base, head = tmp / "base", tmp / "head"
    base.mkdir()
    head.mkdir()
    suite = tmp / "attnprof.toml"
    suite.write_text(
        '[suite]\nname = "skip"\n[suite.timing]\nwarmup = 1\nmin_samples = 6\nmax_samples = 12\nbudget_s = 0.2\n'
        '[[cases]]\nname = "s"\ntarget = "sdpa"\nbackends = ["cudnn"]\nbatch = 1\nq_heads = 2\nseq_q = 16\n'
        'head_dim = 16\ndtype = "fp32"\n'
    )
    return suite, base, head


def test_a_case_both_sides_skip_stops_as_skipped(tmp_path: Path) -> None:
    suite, base, head = _skipping_suite(tmp_path)
    done = _run_paired(tmp_path, suite, base, head)
    assert done.returncode == 0, done.stderr
    (case,) = _paired(tmp_path).cases
    assert case.stopped_by == "skipped" and case.pairs == []


ATTNPROF = [sys.executable, "-c", "from attnprof.cli import main; main()"]  # the console script's entry point


@pytest.mark.parametrize(
    ("entry", "verb", "folder"),
    [
        (ATTNPROF, "paired", "attnprof-paired"),
        (ATTNPROF, "ab", "attnprof-ab"),  # the alias: a command line written for it writes where it always did
        ([sys.executable, "-m", "attnprof.core"], "ab", "attnprof-ab"),  # as a profile worker runs it
    ],
)
def test_the_paired_verb_runs_by_its_name_and_by_its_alias(
    tmp_path: Path, entry: list[str], verb: str, folder: str
) -> None:
    suite, base, head = _skipping_suite(tmp_path)
    argv = [*entry, verb, str(suite), "--base", str(base), "--head", str(head), "--device", "cpu"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--quiet"]
    done = subprocess.run(argv, cwd=tmp_path, env=_env(head), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = tmp_path / folder  # no --out: the default folder of the name typed
    assert sorted(p.name for p in out.glob("*.json")) == ["base.json", "comparison.json", "paired.json", "result.json"]
    assert [p.name for p in tmp_path.glob("attnprof-*")] == [folder]
    # Each side's document records the command line as typed, alias and all.
    for name, side in (("result.json", "head"), ("base.json", "base")):
        command = load_result(out / name).run.command or ""
        assert command.startswith(f"attnprof {verb} {suite} --base") and command.endswith(f"--quiet ({side})"), command
    assert json.loads((out / "comparison.json").read_text())["mode"] == "paired"


@pytest.mark.parametrize("first_builds", ["apart", "together"])
def test_a_cases_first_builds_run_apart_or_together_as_asked(tmp_path: Path, first_builds: str) -> None:
    log = tmp_path / "builds.log"
    # Each build takes 0.5 s and logs which side built and when.
    build = (
        f"t0 = time.time(); time.sleep(0.5); "
        f"open({str(log)!r}, 'a').write(f'{{Path.cwd().name}} {{t0}} {{time.time()}}\\n')"
    )
    base, head = _tree(tmp_path / "base", 1, crash=build), _tree(tmp_path / "head", 1, crash=build)
    suite = _suite(tmp_path, base, head)
    done = _run_paired(tmp_path, suite, base, head, "--record", "--max-pairs", "2", "--first-builds", first_builds)
    assert done.returncode in (0, 1), done.stderr
    (case,) = _paired(tmp_path).cases
    assert [p.order for p in case.pairs] == ["AB", "BA"]
    builds: dict[str, list[tuple[float, float]]] = {"base": [], "head": []}
    for line in log.read_text().splitlines():
        side, start, end = line.split()
        builds[side].append((float(start), float(end)))
    # The first warm-up pair holds the case's first builds; every pair, warm-up or counted, builds again.
    assert case.warmup and [len(b) for b in builds.values()] == [len(case.warmup) + 2] * 2
    (base_start, base_end), (head_start, head_end) = builds["base"][0], builds["head"][0]
    overlap = min(base_end, head_end) - max(base_start, head_start)
    if first_builds == "apart":  # the base (first in AB) built and warmed up before the head began
        assert head_start >= base_end, builds
    else:
        assert overlap > 0.25, builds
    # The second pair's builds (the second warm-up pair's) run at once either way.
    (b2s, b2e), (h2s, h2e) = builds["base"][1], builds["head"][1]
    assert min(b2e, h2e) - max(b2s, h2s) > 0.25, builds


SLEEPY = """
import time
from pathlib import Path

import torch

BUILDS = Path({builds!r})


def make(params, device):
    builds = int(BUILDS.read_text()) + 1 if BUILDS.exists() else 1
    BUILDS.write_text(str(builds))
    sleep_s = {stalled_ms} / 1000 if builds == {stalled_build} else {sleep_ms} / 1000

    def step(x):
        time.sleep(sleep_s)
        return x * 2

    return step, (torch.ones(4, device=device),)
"""

# A tiny suite's timing (tests/worker/stack.py's too): 3 samples a paired round, one look at 4 pairs.
TINY_SUITE = suite_text("stall", '[[cases]]\nname = "sleepy"\ntarget = "sleepy.work:make"\n')


def _sleepy_tree(root: Path, sleep_ms: float, stalled_build: int = 0, stalled_ms: float = 0.0) -> Path:
    (root / "sleepy").mkdir(parents=True)
    (root / "sleepy" / "__init__.py").write_text("")
    source = SLEEPY.format(
        builds=str(root / "builds"), sleep_ms=sleep_ms, stalled_build=stalled_build, stalled_ms=stalled_ms
    )
    (root / "sleepy" / "work.py").write_text(source)
    return root


def test_a_round_the_host_stalled_is_set_aside_and_its_pair_run_again(tmp_path: Path) -> None:
    """The CI failure, planted: the head sleeps 6 ms a call, the base 2 ms, and the base's sixth round 15 ms (each
    pair builds the workload again, warm-up pairs too: two of them agree at once on these steady sleeps, so the sixth
    build is the fourth pair's). Its pair is set aside, a fifth runs in its place, and the case settles as slower on
    the four that count."""
    base = _sleepy_tree(tmp_path / "base", 2.0, stalled_build=6, stalled_ms=15.0)
    head = _sleepy_tree(tmp_path / "head", 6.0)
    suite = tmp_path / "attnprof.toml"
    suite.write_text(TINY_SUITE)
    done = _run_paired(tmp_path, suite, base, head)
    assert done.returncode in (0, 1), done.stderr
    paired = _paired(tmp_path)
    (case,) = paired.cases
    assert case.stopped_by == "slower", case.detail
    # Two warm-up pairs unless this shared host disturbed one; the stalled build is the pair's that came sixth.
    stalled = 6 - len(case.warmup) - 1
    assert 0 <= stalled <= 3 and case.warmup_end == "steady", case.warmup
    assert case.max_pairs == 16 and paired.rule.max_set_aside == 10  # the floor; set-asides: a quarter of the ceiling
    # Settled at the first look on the four that count (a later one where this shared host spread the pairs).
    assert [p.disturbed is not None for p in case.pairs] == [i == stalled for i in range(len(case.pairs))]
    assert (case.pairs[stalled].disturbed or "").startswith("disturbed: head/base -")
    assert case.looks is not None and len(case.counted) in case.looks
    orders = [p.order for p in case.counted]  # the pair after the stalled one keeps AB and BA even
    assert orders[:4] == ["AB", "BA", "AB", "BA"] and orders.count("AB") - orders.count("BA") in (0, 1)
    assert "(1 more set aside as disturbed)" in (case.detail or "")
    comparison = json.loads((tmp_path / "out" / "comparison.json").read_text())
    (finding,) = [f for f in comparison["findings"] if f["case"] == "sleepy" and f["rounds"] is not None]
    assert finding["status"] == "regressed" and finding["rounds"] == len(case.counted) and finding["set_aside"] == 1
    assert finding["change"] > 1.0, finding


class _ScriptedSide:
    """A side answering the coordinator from a list of round medians (microseconds), one per ``time``."""

    def __init__(self, medians_us: list[float]) -> None:
        self.medians_us = list(medians_us)
        self.timed = 0

    def send(self, message: dict[str, Any]) -> None:
        pass

    def receive(self, message: dict[str, Any]) -> dict[str, Any]:
        if message["op"] != "time":
            return {"ok": True}
        self.timed += 1
        return {"ok": True, "median_us": self.medians_us.pop(0), "samples": 3, "mhz": None}

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.receive(message)


@pytest.mark.parametrize("stop_early", [True, False])
def test_the_coordinator_runs_a_pair_in_place_of_a_disturbed_one_and_keeps_the_orders_even(stop_early: bool) -> None:
    sides = {
        "base": _ScriptedSide([2000.0, 2010.0, 15000.0, 1990.0, 2005.0]),
        "head": _ScriptedSide([6000.0, 6020.0, 6010.0, 5990.0, 6000.0]),
    }
    rule = Rule(0.10, min_pairs=4, max_pairs=4, max_set_aside=1)
    rounds = CaseRounds("sleepy", rule)  # no warm-up, no budget: the rule's four pairs
    run_case(sides, rounds, stop_early=stop_early, first_apart=False, on_pair=lambda: None)  # type: ignore[arg-type]
    assert [p.disturbed is not None for p in rounds.pairs] == [False, False, True, False, False]
    # AB, BA, then the disturbed AB; the pair after it runs BA, and the one replacing it AB.
    assert [p.order for p in rounds.pairs] == ["AB", "BA", "AB", "BA", "AB"]
    assert rounds.stopped_by == "slower" and sides["base"].timed == 5
    assert rounds.detail is not None and rounds.detail.endswith("after 4 pairs (1 more set aside as disturbed)")


def test_the_coordinator_stops_setting_aside_at_the_budget() -> None:
    sides = {
        "base": _ScriptedSide([2000.0, 2010.0, 15000.0, 1990.0, 14000.0, 2000.0]),
        "head": _ScriptedSide([6000.0] * 6),
    }
    rule = Rule(0.10, min_pairs=4, max_pairs=4, max_set_aside=1)
    rounds = CaseRounds("sleepy", rule)
    run_case(sides, rounds, stop_early=True, first_apart=False, on_pair=lambda: None)  # type: ignore[arg-type]
    assert len(rounds.pairs) == 5 and sum(p.disturbed is not None for p in rounds.pairs) == 1
    assert rounds.stopped_by == "max_rounds" and "ambiguous" in (rounds.detail or "")
