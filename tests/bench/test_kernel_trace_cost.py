"""bench/kernel_trace_cost.py's quick mode: one profile of one case on the CPU, the later rounds' traces timed."""

from __future__ import annotations

from pathlib import Path

from attnprof.core.measure import case as case_module
from attnprof.core.measure import runner
from bench.kernel_trace_cost import one_run

ROOT = Path(__file__).resolve().parents[2]


def test_quick_mode_times_each_later_round_trace_and_puts_the_runner_back(peaks_cache: Path) -> None:
    before = (runner.trace_round, case_module.pool_durations)
    spent = one_run(ROOT / "examples" / "cpu.toml", "cpu", peaks_cache, ["cross"])
    assert (runner.trace_round, case_module.pool_durations) == before
    assert spent.traces == 2, "cpu.toml times three rounds: the two after the first trace again"
    assert 0 < spent.trace_wall_s < spent.run_wall_s and 0 < spent.pool_cpu_s < spent.run_cpu_s
