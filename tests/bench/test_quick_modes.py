"""The CPU benchmarks that back the docs, each run in its quick mode as a user runs it, so that none rots unseen: the
load of the service (``bench/service_load.py``, its source of docs/deploy.md's figures), the pipeline's
(``bench/pipeline_load.py``) and the regression detector's (``bench/regression_detector.py``). Each writes its report
into the test's folder, never over the committed one. The GPU ones run on a GPU host (bench/README.md); the zoo's,
the paired budget's and the trace cost's quick modes have tests of their own beside this one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done


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
