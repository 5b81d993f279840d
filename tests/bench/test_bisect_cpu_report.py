"""The CPU bisection report renders from its committed data: every culprit found, the count of paired jobs against
the budget, and each probe's line."""

from __future__ import annotations

from pathlib import Path

from bench.bisect_cpu import report

DATA = Path(__file__).resolve().parents[2] / "bench" / "reports" / "data" / "bisection-cpu-2026-12-07"


def test_the_committed_runs_render_each_culprit_and_probe(tmp_path: Path) -> None:
    out = tmp_path / "bisection-cpu.md"
    report(DATA, out)
    text = out.read_text()
    assert "Found and confirmed: 4 of 4; the most paired jobs any took: 5 (the target: at most 5)" in text
    for culprit in (3, 8, 11, 16):
        assert f"| c{culprit} | c{culprit} | confirmed |" in text
    assert text.count("| bad |") + text.count("| good |") == 18  # 4 + 5 + 4 + 5 probes
