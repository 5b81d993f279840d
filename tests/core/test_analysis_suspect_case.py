"""A case timed while its clocks fell cannot fail on timing; the rest of the comparison still can."""

from __future__ import annotations

from pathlib import Path

from attnprof.core.analysis import compare
from attnprof.core.documents import ResultDocument, load_result

SET_A = Path(__file__).resolve().parents[2] / "bench" / "reports" / "data" / "h200-2026-11-29" / "set-a"


def _slowed(doc: ResultDocument, case_ids: set[str], factor: float) -> ResultDocument:
    out = doc.model_copy(deep=True)
    out.run.id = doc.run.id + "-slow"
    for c in out.cases:
        if c.id in case_ids and c.latency_us is not None:
            lat = c.latency_us
            lat.samples = [s * factor for s in lat.samples]
            for field in ("median", "p25", "p75", "min", "max"):
                setattr(lat, field, getattr(lat, field) * factor)
            for k in c.kernels:
                k.duration_us.median *= factor
    return out


def test_suspect_case_warns_while_an_unsuspected_slowdown_still_fails() -> None:
    baselines = [load_result(SET_A / f"run{i}.json.gz") for i in (3, 4, 5)]
    candidate = _slowed(load_result(SET_A / "run2.json.gz"), {"block", "sdpa[backend=flash,pass=fwd]"}, 1.15)
    assert [c.id for c in candidate.cases if c.suspect] == []
    plain = compare(baselines, candidate)
    assert plain.verdict == "fail"
    failing = {f.case for f in plain.findings if f.verdict == "fail"}
    assert {"block", "sdpa[backend=flash,pass=fwd]"} <= failing

    block = candidate.case("block")
    assert block is not None
    block.suspect = ["SM clock fell to 1860 MHz (top 1980 MHz) while timing: power or thermal capping"]
    excused = compare(baselines, candidate)
    assert excused.verdict == "fail"  # flash still fails
    block_findings = [f for f in excused.findings if f.case == "block" and f.metric != "variance"]
    assert block_findings and all(f.verdict != "fail" for f in block_findings)
    assert any("case is suspect" in (f.detail or "") for f in block_findings)
    assert any(n.startswith("block:") and "suspect" in n for n in excused.notes)

    flash = candidate.case("sdpa[backend=flash,pass=fwd]")
    assert flash is not None
    flash.suspect = ["SM clock fell"]
    assert compare(baselines, candidate).verdict == "warn"


def test_kernel_set_ignores_kernels_under_one_percent_but_not_heavier_ones() -> None:
    baselines = [load_result(SET_A / f"run{i}.json.gz") for i in (3, 4, 5)]
    candidate = load_result(SET_A / "run2.json.gz").model_copy(deep=True)
    case = candidate.case("sdpa[backend=math,pass=fwd]")
    assert case is not None
    tiny = next(k for k in case.kernels if (k.share or 0) < 0.01)
    tiny.key = "elementwise:fill_renamed"
    quiet = compare(baselines, candidate)
    assert not [f for f in quiet.findings if f.case == case.id and f.metric == "backend"]
    heavy = next(k for k in case.kernels if (k.share or 0) >= 0.05)
    heavy.key = heavy.key + "_v2"
    loud = compare(baselines, candidate)
    changed = [f for f in loud.findings if f.case == case.id and f.metric == "backend"]
    assert len(changed) == 1 and changed[0].verdict == "warn" and heavy.key in (changed[0].detail or "")
