"""A/A with a burst in the candidate: ``attnprof compare`` does not fail unchanged code.

Two real H200 runs are the baselines and a third the candidate; one case of the candidate gets a burst of samples
at 160x. A short burst leaves the median, which the latency test compares, where it was. A burst the timing loop
stopped in (its budget ran out mid-burst, so most samples are slow) moves the median 160x: that fails unmarked,
and passes the gate once the runner's check has marked the case suspect.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from attnprof.core.analysis import compare
from attnprof.core.documents import ResultDocument, load_result
from attnprof.core.measure.runner import disturbance_reasons

REPO = Path(__file__).resolve().parents[2]
SET_A = REPO / "bench" / "reports" / "data" / "h200-2026-11-29" / "set-a"
CASE = "sdpa[backend=flash,pass=fwd]"


def attnprof(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("attnprof")
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=300, cwd=REPO)


def _with_burst(doc: ResultDocument, start: float, stop: float, *, mark: bool) -> ResultDocument:
    """``doc`` with samples [start, stop) of CASE (fractions of its samples) 160x slower, marked as the runner would."""
    out = doc.model_copy(deep=True)
    case = out.case(CASE)
    assert case is not None and case.latency_us is not None
    lat = case.latency_us
    n = len(lat.samples)
    samples = [s * 160.0 if int(start * n) <= i < int(stop * n) else s for i, s in enumerate(lat.samples)]
    lat.samples = samples
    lat.median = float(np.median(samples))
    lat.p25, lat.p75 = (float(q) for q in np.quantile(samples, [0.25, 0.75]))
    lat.max = max(samples)
    if mark:
        case.suspect = disturbance_reasons(samples) or None
    return out


def _timing_fails(doc: ResultDocument, baselines: list[ResultDocument]) -> list[str]:
    return [f.metric for f in compare(baselines, doc).findings if f.case == CASE and f.verdict == "fail"]


def test_a_short_burst_does_not_move_the_median_the_latency_test_compares() -> None:
    baselines = [load_result(SET_A / f"run{i}.json.gz") for i in (3, 4)]
    candidate = _with_burst(load_result(SET_A / "run5.json.gz"), 0.40, 0.45, mark=False)
    case = candidate.case(CASE)
    assert case is not None and not case.suspect
    assert _timing_fails(candidate, baselines) == []
    assert compare(baselines, candidate).verdict != "fail"


def test_compare_exits_0_when_the_candidate_case_holds_a_burst_the_runner_marked(tmp_path: Path) -> None:
    baselines = [SET_A / f"run{i}.json.gz" for i in (3, 4)]
    candidate = load_result(SET_A / "run5.json.gz")
    unmarked = tmp_path / "unmarked.json"
    unmarked.write_text(_with_burst(candidate, 0.35, 1.0, mark=False).model_dump_json(by_alias=True))
    marked_doc = _with_burst(candidate, 0.35, 1.0, mark=True)
    marked = tmp_path / "marked.json"
    marked.write_text(marked_doc.model_dump_json(by_alias=True))

    # Unmarked, most samples 160x slower is a regression: the gate is not blind.
    failing = attnprof("compare", *map(str, baselines), str(unmarked))
    assert failing.returncode == 1, failing.stdout + failing.stderr

    case = marked_doc.case(CASE)
    assert case is not None and case.suspect and case.suspect[0].startswith("a burst of")
    proc = attnprof("compare", *map(str, baselines), str(marked))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("verdict: WARN")
    assert f"{CASE}:" in proc.stdout and "the case is suspect (a burst of" in proc.stdout
