"""The regression zoo (bench/zoo): every change applies as a pull request would and its trees import on a host
without a GPU; the report judges the targets from known records; and the quick mode runs end to end on the CPU
(ground truth, ``attnprof ab`` on both trees, the report), so the GPU command does not rot between GPU runs."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnprof.core.suite import load_suite
from bench.zoo import records, report, trees
from bench.zoo.changes import BY_NAME, CHANGES, QUICK, select
from bench.zoo.records import AbRun, CaseLine, ChangeRun, JobRun, Outcome, Provenance, RunDoc, TruthCase, TruthChange
from bench.zoo.truth import factory, load_tree

ROOT = Path(__file__).resolve().parents[2]


def _code(text: str) -> str:
    """A module's syntax tree without its docstrings (comments are not in it)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            node.body = body[1:]  # type: ignore[attr-defined,index]
    return ast.dump(tree)


def test_every_change_applies_once_and_its_head_compiles() -> None:
    base = trees.project_files()
    assert len(CHANGES) >= 14 and sum(c.identical for c in CHANGES) >= 2
    for change in CHANGES:
        head = trees.head_files(change, base)
        changed = [p for p in base if base[p] != head[p]]
        assert changed, change.name
        for path in changed:
            if path.endswith(".py"):
                compile(head[path], path, "exec")
        assert change.suite in base and "[suite.timing]" not in base[change.suite], change.name
        assert trees.diff(change).startswith("--- a/")


def test_a_docs_only_change_leaves_the_code_as_it_is() -> None:
    base = trees.project_files()
    head = trees.head_files(BY_NAME["identical-docs"], base)
    for path in base:
        if path.endswith(".py"):
            assert _code(base[path]) == _code(head[path]), path


def test_a_hunk_that_does_not_apply_is_refused() -> None:
    change = BY_NAME["launch-config"]
    files = trees.head_files(change)
    with pytest.raises(trees.PatchError, match="0 times"):
        trees.head_files(change, files)


def test_each_suite_shrinks_for_the_cpu_and_still_loads(tmp_path: Path) -> None:
    for change in CHANGES:
        path = tmp_path / f"{change.name}.toml"
        path.write_text(trees.quick_suite(trees.project_files()[change.suite]))
        suite = load_suite(path)
        assert suite.cases and all(c.params["dtype"] == "fp32" for c in suite.cases)
        assert all(c.params.get("seq_kv", 1) <= trees.QUICK_CACHE for c in suite.cases)


def test_both_trees_import_side_by_side_without_triton(tmp_path: Path) -> None:
    for change in CHANGES:
        found = trees.materialize(change, tmp_path)
        for case in load_suite(found.suite).cases:
            for side, root in (("base", found.base), ("head", found.head)):
                alias = f"zoo_test_{change.name.replace('-', '_')}_{side}"
                load_tree(root, alias)
                assert callable(factory(alias, case.target))
    # The kernels' module (which imports Triton) is loaded only when a case runs on a GPU.
    assert not [name for name in sys.modules if name.startswith("zoo_test_") and name.endswith("._flash_kernel")]


def test_bundles_are_the_same_bytes_for_the_same_tree() -> None:
    files = trees.project_files()
    assert trees.bundle(files) == trees.bundle(dict(reversed(list(files.items()))))
    assert trees.commit_of(files) != trees.commit_of(trees.head_files(CHANGES[0], files))


def test_the_quick_mode_picks_changes_a_cpu_runs() -> None:
    assert [c.name for c in select(None, quick=True)] == list(QUICK)
    assert all(c.cpu for c in select(None, quick=True))
    with pytest.raises(SystemExit, match="unknown change"):
        select("no-such-change", quick=False)


def _provenance(gpu: str) -> Provenance:
    return Provenance(
        date="2026-12-07T00:00:00+00:00", command="x", host="h", device="cuda", gpu=gpu, python="3.12",
        source_digest="0" * 16,
    )  # fmt: skip


def _outcome(verdict: str, case: str, status: str, change: float) -> Outcome:
    line = CaseLine(case=case, status=status, change=change, pairs=6, stopped_by="slower")
    return Outcome(verdict=verdict, cases=[line])


def test_the_report_judges_each_target(tmp_path: Path) -> None:
    gpu = "NVIDIA H100 80GB HBM3"
    truth = records.TruthDoc(provenance=_provenance(gpu), method="m")
    run = RunDoc(provenance=_provenance(gpu), steps=["ab", "job", "profile"], repeat=1, budget_s=500)
    planted = {
        "extra-pass": (0.015, "fail", "fail"),
        "rope-fp32": (0.03, "fail", "warn"),
        "identical-docs": (0.0, "fail", "pass"),
    }
    for name, (effect, ab_verdict, job_verdict) in planted.items():
        change = BY_NAME[name]
        spread = 0.002 if effect else 0.004
        truth.changes.append(
            TruthChange(
                change=name, identical=change.identical, expected=change.expected,
                cases=[TruthCase(case="decode", effect=effect, ci_low=effect - spread, ci_high=effect + spread,
                                 base_us=100.0, head_us=100.0 * (1 + effect))],
            )
        )  # fmt: skip
        status = "regressed" if effect else "unchanged"
        run.changes.append(
            ChangeRun(
                change=name, identical=change.identical, expected=change.expected, suite=change.suite,
                ab=[AbRun(rep=0, exit_code=0, process_s=12.0, outcome=_outcome(ab_verdict, "decode", status, effect))],
                jobs=[JobRun(rep=0, job_id="j", status="done", verdict=job_verdict, held_s=20.0,
                             outcome=_outcome(job_verdict, "decode", status, effect))],
                profile=records.ProfileRun(exit_code=0, process_s=10.0),
            )
        )  # fmt: skip
    records.save(truth, tmp_path)
    records.save(run, tmp_path)
    out = tmp_path / "verdict-zoo.md"
    assert report.main([str(tmp_path), "--out", str(out)]) == 0
    page = out.read_text()
    targets = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| ") and gpu in line}
    caught = targets["1% change caught ≥ 95%"]
    assert "2/2 (100%" in caught.split("|")[3] and ": met" in caught.split("|")[3]
    assert "1/2 (50%" in caught.split("|")[4] and "**not met** by 45 points" in caught.split("|")[4]
    false = targets["identical trees fail ≤ 1%"]
    assert "1/1" in false.split("|")[3] and "**not met** by 99 points" in false.split("|")[3]
    assert "no false alarm seen; one run cannot show" in false.split("|")[4]
    cost = targets["paired ≤ 1.5× one unpaired profile"]
    assert "median 1.20x" in cost.split("|")[3] and "met" in cost.split("|")[3]
    assert "median 2.00x" in cost.split("|")[4] and "**not met** by 0.50x" in cost.split("|")[4]
    assert "`identical-docs` ab #1: false alarm" in page and "`rope-fp32` job #1: no" in page


def test_the_report_without_runs_is_the_page_to_fill(tmp_path: Path) -> None:
    out = tmp_path / "verdict-zoo.md"
    assert report.main(["--out", str(out)]) == 0
    page = out.read_text()
    assert "not measured yet" in page and "No GPU runs yet." in page
    assert all(f"`{c.name}`" in page for c in CHANGES)


@pytest.mark.slow
def test_the_quick_mode_runs_end_to_end_on_the_cpu(tmp_path: Path, peaks_cache: Path) -> None:
    """truth.py's and run.py's quick modes as the commands run them, then the report on what they wrote."""
    out = tmp_path / "zoo"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    truth = [sys.executable, "-m", "bench.zoo.truth", "--quick", "--device", "cpu", "--blocks", "4", "--out", str(out)]
    done = subprocess.run(truth, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    run = [
        sys.executable, "-m", "bench.zoo.run", "--quick", "--device", "cpu", "--steps", "ab", "--only", "extra-pass",
        "--peaks", str(peaks_cache), "--work", str(tmp_path / "work"), "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    measured = records.load_truth(out)
    assert measured is not None and [c.change for c in measured.changes] == list(QUICK)
    assert all(c.effect is not None and c.error is None for ch in measured.changes for c in ch.cases)
    ran = records.load_run(out)
    assert ran is not None and ran.provenance.device == "cpu" and not ran.not_run
    (ab,) = ran.changes[0].ab
    assert ab.outcome is not None and ab.outcome.verdict in ("pass", "warn", "fail"), ab.error
    assert [c.case for c in ab.outcome.cases] == ["decode"]
    assert (out / "extra-pass" / "ab-0" / "comparison.json.gz").is_file()
    assert json.loads((out / records.RUN_FILE).read_text())["kind"] == "zoo-run"
    page = tmp_path / "verdict-zoo.md"
    assert report.main([str(out), "--out", str(page)]) == 0
    text = page.read_text()
    assert "## CPU (" in text and "`extra-pass` | decode |" in text
