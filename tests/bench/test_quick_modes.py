"""The CPU benchmarks that back the docs, each run in its quick mode as a user runs it, so that none rots unseen: the
load of the service (``bench/service_load.py``, its source of docs/deploy.md's figures), the pipeline's
(``bench/pipeline_load.py``), the regression detector's (``bench/regression_detector.py``), the A/A runs on a loaded
CPU host (``bench/aa_cpu.py``, ``bench/aa_paired_cpu.py``), Postgres at scale (``bench/pg_scale.py``), the
dashboard's pages (``bench/dashboard_load.py``) and the alert detector's noise (``bench/alert_noise.py``). Each
writes its report into the test's folder, never over the committed one; the ones on Postgres seed a database named
for the test, which the benchmark drops at its end. The GPU ones run on a GPU host (bench/README.md); the zoo's, the
paired budget's and the trace cost's quick modes have tests of their own beside this one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from bench.service_seed import PG_ADMIN

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done


def _databases() -> set[str]:
    with psycopg.connect(PG_ADMIN) as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}


@pytest.fixture
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database name of the test's own for a benchmark to create and drop; dropped here too if a run failed."""
    name = f"attnprof_quick_{request.node.name.removeprefix('test_the_')[:24]}_{os.getpid()}"
    yield name
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_service_load_benchmark_runs_every_level_in_its_quick_mode(tmp_path: Path) -> None:
    # Several `attnprof serve` processes (which need the session secret), thousands of jobs queued through HTTP and
    # in process (beyond a project's queue limit), trends and uploads, on its own seeded database.
    report = tmp_path / "service-load.md"
    database = f"attnprof_bench_quick_{os.getpid()}"
    _run(["-m", "bench.service_load", "--quick", "--no-wait", "--database", database, "--report", str(report)], 900)
    text = report.read_text()
    assert "jobs, 2 server process(es)" in text and "## In process" in text, text[:2000]


def test_the_pipeline_load_benchmark_runs_jobs_through_the_whole_stack(tmp_path: Path) -> None:
    report, figures = tmp_path / "pipeline.md", tmp_path / "pipeline.json"
    done = _run(
        ["-m", "bench.pipeline_load", "--jobs", "6", "--quick", "--out", str(report), "--data", str(figures)], 900
    )
    assert "failed 0 of 6" in done.stdout and report.is_file() and figures.is_file(), done.stdout[-2000:]


def test_the_regression_detector_benchmark_writes_its_report(tmp_path: Path) -> None:
    report = tmp_path / "detector.md"
    _run(["-m", "bench.regression_detector", "--quick", "--out", str(report)], 300)
    assert report.read_text().startswith("#")


def test_the_aa_cpu_benchmark_compares_a_triple_on_a_loaded_core(tmp_path: Path) -> None:
    # One triple (two baselines and a candidate, each profiled in a process of its own, a core kept busy) of three
    # cases, then `compare` and the verdict without the suspect marks.
    report, data = tmp_path / "aa-cpu.md", tmp_path / "data"
    _run(["-m", "bench.aa_cpu", "--quick", "--data", str(data), "--report", str(report)], 600)
    (triple,) = [json.loads(line) for line in (data / "triples.jsonl").read_text().splitlines()]
    assert [run["rc"] for run in triple["runs"].values()] == [0, 0, 0], triple
    assert {c["id"] for c in triple["runs"]["cand"]["cases"]} == {"naive[pass=fwd]", "cross", "block"}, triple
    assert triple["compare"]["rc"] in (0, 1) and triple["compare"]["verdict_without_marks"], triple["compare"]
    text = report.read_text()
    assert "of 1** (target 0)" in text and "## Per triple" in text, text[:2000]


def test_the_aa_paired_cpu_benchmark_runs_a_paired_trial(tmp_path: Path) -> None:
    # One `ab` of a case with the same code on both sides, a core kept busy: its verdict, with and without the marks.
    report, data = tmp_path / "aa-paired-cpu.md", tmp_path / "data"
    _run(["-m", "bench.aa_paired_cpu", "--quick", "--data", str(data), "--report", str(report)], 600)
    (row,) = [json.loads(line) for line in (data / "trials.jsonl").read_text().splitlines()]
    assert row["rc"] in (0, 1) and row.get("verdict") in ("pass", "warn", "fail") and row.get("unmarked"), row
    (case,) = row["cases"]
    assert case["case"] == "naive[pass=fwd]" and case["pairs"] >= 2, case
    assert "of 1** (target 0)" in report.read_text()


def test_the_pg_scale_benchmark_measures_sizes_inserts_and_trends(tmp_path: Path, database: str) -> None:
    out = tmp_path / "pg-scale.json"
    _run(["-m", "bench.pg_scale", "--quick", "--database", database, "--out", str(out)], 600)
    figures = json.loads(out.read_text())
    assert figures["runs"] == 500 and figures["sizes"]["runs"]["rows"] == 500, figures
    assert figures["sizes"]["case_samples"]["total_bytes"] > 0, figures["sizes"]
    assert figures["insert"]["n"] == 5 and figures["trend"]["all"]["n"] == 20, figures
    assert database not in _databases()


def test_the_dashboard_load_benchmark_times_every_page(tmp_path: Path, database: str) -> None:
    # A seeded database, `attnprof serve`, an upload, a pin, an exclusion and queued jobs through the API, a sign-in
    # through the form, then every page kind: each must answer 200.
    report = tmp_path / "dashboard-load.md"
    _run(["-m", "bench.dashboard_load", "--quick", "--database", database, "--report", str(report)], 600)
    text = report.read_text()
    assert "## Server time per page" in text and report.with_suffix(".png").is_file(), text[:2000]
    pages = ("overview", "trends, case", "trends, kernel", "jobs list", "job", "jobs state (poll)", "run", "comparison")
    for page in pages:
        assert f"| {page} | 200×3 |" in text, (page, text[:3000])
    assert database not in _databases()


def test_the_alert_noise_benchmark_finds_the_one_real_step() -> None:
    done = _run(["-m", "bench.alert_noise", "--quick"], 300)
    out = done.stdout
    assert "15 cases, 42 runs" in out, out
    assert "one per step: 1 alert(s): {'sdpa[backend=cudnn,pass=fwd]': [('run29', 'run30')]}" in out, out
    assert out.count("(30 histories)") == 4, out


@pytest.mark.parametrize(
    ("module", "flag"),
    [
        ("bench.regression_detector", "--out"),
        ("bench.paired_budget", "--out"),
        ("bench.service_load", "--report"),
        ("bench.pipeline_load", "--out"),
    ],
)
def test_a_quick_run_pointed_into_bench_reports_is_refused(module: str, flag: str) -> None:
    target = ROOT / "bench" / "reports" / "quick-must-not-write-here.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", module, "--quick", flag, str(target)]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--quick writes nothing under bench/reports" in done.stderr, done.stderr[-2000:]
    assert not target.exists()
