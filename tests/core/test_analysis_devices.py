"""Stored-baseline comparisons across device models: a baseline run measured on another GPU model is never pooled,
the comparison names each run it left out and its device, and with none of the candidate's model left nothing is
compared: ``warn`` (exit 0 from ``attnprof compare``), never a verdict drawn from another GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from attnprof.core import testbed as keys
from attnprof.core.analysis import compare, render_table
from attnprof.core.documents import ResultDocument
from tests.core.result_documents import runs

H100 = "NVIDIA H100 80GB HBM3"
REPO = Path(__file__).resolve().parents[2]


def _on(doc: ResultDocument, device: str) -> ResultDocument:
    """``doc`` as measured on ``device`` (its testbed key and meaning follow, as the profiler writes them)."""
    env = doc.environment
    what = keys.testbed_meaning(device, env.driver, doc.run.mode, env.device.cpu_threads)
    environment = env.model_copy(
        update={
            "device": env.device.model_copy(update={"name": device}),
            "testbed": what,
            "testbed_key": keys.testbed_key(what),
        }
    )
    return doc.model_copy(update={"environment": environment})


def test_a_baseline_of_another_gpu_model_is_left_out_named_and_the_rest_decide() -> None:
    h200 = runs(3, seed=1)
    # The H100 run reads 40% faster: pooled, it would widen the baselines' spread past any slowdown's size.
    h100 = _on(runs(1, seed=5, factor=0.6, prefix="h100")[0], H100)
    candidate = runs(1, seed=2, prefix="cand")[0]
    c = compare([*h200, h100], candidate)
    assert c.verdict == "pass", render_table(c)
    assert c.baseline == [b.run.id for b in h200]
    assert not c.testbed_mismatch and c.testbed_baseline == [candidate.environment.testbed_key]
    (note,) = [n for n in c.notes if n.startswith("OTHER DEVICE")]
    assert f"{h100.run.id} ({H100}, testbed {h100.environment.testbed_key})" in note
    assert "candidate's NVIDIA H200" in note
    # A slowdown against the H200 runs that remain still fails: the left-out run does not blunt the test.
    slower = compare([*h200, h100], runs(1, seed=2, factor=1.2, prefix="cand")[0])
    assert slower.verdict == "fail" and slower.baseline == [b.run.id for b in h200]


def test_only_baselines_of_another_gpu_model_compare_nothing_and_warn() -> None:
    h100 = [_on(b, H100) for b in runs(3, seed=1, factor=0.7, prefix="h100")]
    candidate = runs(1, seed=2, prefix="cand")[0]  # 1/0.7: 43% slower than the H100 runs, on an H200
    c = compare(h100, candidate)
    assert c.verdict == "warn" and c.baseline == [] and c.findings == []
    assert c.summary.compared == 0 and not c.testbed_mismatch
    (note,) = [n for n in c.notes if n.startswith("OTHER DEVICE")]
    assert all(f"{b.run.id} ({H100}," in note for b in h100)
    assert any(n.startswith("no baseline run on NVIDIA H200: nothing was compared") for n in c.notes)
    text = render_table(c)
    assert "vs baseline none pooled (every run given was of another device model" in text
    assert "first run" not in text


def test_a_suspect_candidate_with_no_baseline_of_its_device_still_warns() -> None:
    h100 = [_on(b, H100) for b in runs(2, seed=1, prefix="h100")]
    candidate = runs(1, seed=2, prefix="cand")[0].model_copy(deep=True)
    candidate.run.suspect = ["1 other process(es) on the GPU at start"]
    c = compare(h100, candidate)
    assert c.verdict == "warn" and any("candidate run is suspect" in n for n in c.notes)


def test_attnprof_compare_exits_0_when_every_baseline_is_of_another_gpu_model(tmp_path: Path) -> None:
    paths = []
    for b in [_on(b, H100) for b in runs(2, seed=1, factor=0.7, prefix="h100")]:
        paths.append(tmp_path / f"{b.run.id}.json")
        paths[-1].write_text(b.to_json())
    candidate = tmp_path / "candidate.json"
    candidate.write_text(runs(1, seed=2, prefix="cand")[0].to_json())
    script = Path(sys.executable).with_name("attnprof")
    done = subprocess.run(
        [str(script), "compare", *map(str, paths), str(candidate)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    # no verdict across GPU models: the portability report of the latest baseline against the candidate
    # (tests/core/test_portability.py reads it)
    assert done.stdout.startswith("PORTABILITY: NVIDIA H100 80GB HBM3 (run h100-1-1) against NVIDIA H200")
