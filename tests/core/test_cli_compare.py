"""attnprof compare and changepoints as a user runs them: real subprocesses, real documents, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema

from attnprof.core.documents import load_result
from attnprof.core.documents.comparison import comparison_json_schema
from tests.core.result_documents import scaled

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "tests" / "data" / "results"
H200 = REPO / "bench" / "reports" / "data" / "h200-2026-11-29"
CPU_RUN = REPO / "tests" / "data" / "service" / "cpu-run-1.json"
BASELINES = [str(RESULTS / f"synthetic-h200-baseline-{i}.json") for i in range(3)]


def attnprof(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("attnprof")
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=300, cwd=REPO)


def test_unchanged_code_passes_with_exit_0() -> None:
    proc = attnprof("compare", *BASELINES, str(RESULTS / "synthetic-h200-candidate-same.json"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("verdict: PASS")


def test_a_slowdown_fails_with_exit_1_and_names_the_cases_and_kernels() -> None:
    proc = attnprof("compare", *BASELINES, str(RESULTS / "synthetic-h200-candidate-5pct-slower.json"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("verdict: FAIL")
    assert "REGRESSED" in proc.stdout and "prefill[backend=cudnn]" in proc.stdout
    assert "kernel cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16" in proc.stdout


def test_durations_past_10_ms_read_in_ms_and_the_table_stays_ascii(tmp_path: Path) -> None:
    # a CPU run against itself twice as slow: cases and kernels of 10-440 ms (too noisy a run to fail on)
    slower = tmp_path / "slower.json"
    slower.write_text(scaled(load_result(CPU_RUN), 2.0, run_id="slower").to_json())
    proc = attnprof("compare", str(CPU_RUN), str(slower))
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stdout.isascii()
    row = next(line for line in proc.stdout.splitlines() if line.startswith("naive[pass=fwd_bwd] "))
    assert row.split()[2:5] == ["219.9", "ms", "439.8"]
    assert "kernel aten::bmm (backward): 62.9 ms -> 125.7 ms (+100%)" in proc.stdout
    assert "545.8 us       1,092 us" in proc.stdout  # below 10 ms: us, thousands separated
    assert not re.search(r"\de[+-]\d", proc.stdout)


def test_json_output_is_a_valid_comparison_document() -> None:
    proc = attnprof("compare", *BASELINES, str(RESULTS / "synthetic-h200-candidate-5pct-slower.json"), "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(comparison_json_schema()).validate(doc)
    assert doc["schema"] == "attnprof.comparison/v1" and doc["verdict"] == "fail"
    regressed = [f for f in doc["findings"] if f["status"] == "regressed"]
    assert regressed and all(f["change"] > 0.02 for f in regressed if f["metric"] == "latency")


def test_real_h200_runs_across_two_leases_do_not_fail() -> None:
    baselines = [str(H200 / "set-a" / f"run{i}.json.gz") for i in (3, 4, 5)]
    proc = attnprof("compare", *baselines, str(H200 / "set-b" / "run3.json.gz"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bad_input_exits_2_and_says_which() -> None:
    only_one = attnprof("compare", BASELINES[0])
    assert only_one.returncode == 2 and "baseline and a candidate" in only_one.stderr
    missing = attnprof("compare", BASELINES[0], "/nonexistent/candidate.json")
    assert missing.returncode == 2 and "/nonexistent/candidate.json" in missing.stderr
    wrong = attnprof("compare", BASELINES[0], str(REPO / "pyproject.toml"))
    assert wrong.returncode == 2 and "pyproject.toml" in wrong.stderr
    cpu = str(REPO / "tests" / "data" / "service" / "cpu-run-1.json")
    disjoint = attnprof("compare", BASELINES[0], cpu)
    assert disjoint.returncode == 2 and "common" in disjoint.stderr.lower()


def test_bad_config_key_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "thresholds.toml"
    config.write_text("latnecy = 0.05\n")
    proc = attnprof("compare", *BASELINES, str(RESULTS / "synthetic-h200-candidate-same.json"), "--config", str(config))
    assert proc.returncode == 2 and "latnecy" in proc.stderr


def test_changepoints_over_a_series_finds_the_step() -> None:
    series = [*BASELINES, str(RESULTS / "synthetic-h200-candidate-same.json")] * 3
    series += [str(RESULTS / "synthetic-h200-candidate-5pct-slower.json")] * 6
    proc = attnprof("changepoints", *series, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    found = {(c["case"], p["index"]) for c in report["cases"] for p in c["points"]}
    assert found and all(index == 12 for _, index in found)
