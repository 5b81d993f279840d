"""The level a process shares against the stream and the host's CPUs: the pure parts of
`bench/h200_stream_report.py` on synthetic processes, and what it reads from the committed data
(`bench/reports/data/h200-stream-2026-12-03`)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from bench.h200_rounds_report import SHARED, Process, heavy, load_runs
from bench.h200_stream_report import load_labelled, render, shared_sd, variance_ratio_p
from tests.profiling_support import REPO
from tests.test_analysis_fixtures import make_case

DATA = REPO / "bench" / "reports" / "data" / "h200-stream-2026-12-03"
BEFORE = REPO / "bench" / "reports" / "data" / "h200-rounds-2026-12-03"


def _process(name: str, level: float, jitter: float = 0.0) -> Process:
    """A process whose SHARED cases all sit ``level`` (relative) off 100 µs, each moved by ``jitter`` in turn."""
    cases = {
        i: make_case(i, median_us=100.0 * (1.0 + level + jitter * (k - 1.5)), n=30) for k, i in enumerate(SHARED)
    }
    return Process(name, cases, {})


def test_a_shared_level_that_varies_less_is_told_apart_from_one_that_does_not() -> None:
    wide = [_process(f"w{k}", level) for k, level in enumerate([-0.004, 0.004] * 6)]
    narrow = [_process(f"n{k}", level) for k, level in enumerate([-0.0005, 0.0005] * 6)]
    assert shared_sd(wide) > 5 * shared_sd(narrow)
    assert variance_ratio_p(wide, narrow) < 0.01
    # the same spread on both sides: no evidence either way
    other = [_process(f"o{k}", level) for k, level in enumerate([0.004, -0.004] * 6)]
    assert variance_ratio_p(wide, other) > 0.2


def test_labels_with_dashes_are_read_whole_and_processes_kept_in_time_order(tmp_path: Path) -> None:
    sources = sorted((DATA / "pin").glob("pin-lo-*.json.gz"))[:2] + sorted((DATA / "pin").glob("reuse-*.json.gz"))[:1]
    for source in sources:
        shutil.copy(source, tmp_path / source.name)
    found = load_labelled(tmp_path)
    assert {k: len(v) for k, v in found.items()} == {"pin-lo": 2, "reuse": 1}
    assert all(p.name.startswith("pin-lo-") for p in found["pin-lo"])
    with gzip.open(sources[0], "rt") as f:
        assert f.read(1) == "{"


def test_the_committed_data_holds_what_the_report_says() -> None:
    pins = load_labelled(DATA / "pin")
    assert {k: len(v) for k, v in pins.items()} == {"pin-lo": 9, "pin-hi": 9, "reuse": 9}
    variants = load_labelled(DATA / "stream")
    assert {k: len(v) for k, v in variants.items()} == {"stream": 13, "reuse": 13}
    assert all(set(SHARED) <= set(p.cases) for ps in variants.values() for p in ps)
    runs = load_runs(DATA / "runs")
    assert len(runs) == 9 and len(heavy(runs)) == 29
    assert len({d.environment.device.uuid for p in runs for d in p.documents}) == 1


def test_the_report_regenerates_from_its_data() -> None:
    text, variants = render(DATA, BEFORE, "h200-stream.png")
    assert text == (REPO / "bench" / "reports" / "h200-stream.md").read_text()
    assert "| stream per round (785d8bc) | 9 | 19/29 |" in text
    assert "falls from +0.86 to +0.01" in text
    assert shared_sd(variants["reuse"]) > 3 * shared_sd(variants["stream"])
