"""Runs of two GPU models are never compared for a verdict: ``attnprof compare`` prints a portability report, each
case and heavy kernel read as what the hardware explains or what the code does worse on one model. The runs: the
real H200 run of the example suite, and an H100 variant of it made here (its peaks an H100's, the memory-bound case
slower by the bandwidth alone, the compute-bound case slower at a lower share of the H100's compute)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from attnprof.cli import main
from attnprof.core.analysis.portability import portability, render_portability
from attnprof.core.documents import ResultDocument, load_result

H200 = Path(__file__).resolve().parents[1] / "data" / "h200" / "attnprof" / "result.json"
MEMORY = "sdpa[backend=math,pass=fwd]"  # memory-bound on the H200
COMPUTE = "sdpa[backend=cudnn,pass=fwd]"  # compute-bound on the H200


def h100_variant(doc: ResultDocument) -> ResultDocument:
    out = copy.deepcopy(doc)
    env = out.environment
    env.device.name = "NVIDIA H100 80GB HBM3"
    env.testbed_key = "h100-test"
    bw = env.peaks.dram_gbps.value / 1.4  # an H100's copy bandwidth: the H200's over 1.4
    env.peaks.dram_gbps.value = bw
    for case in out.cases:
        if case.latency_us is None or case.achieved is None:
            continue
        if case.id == MEMORY:  # the same share of a lower peak: 1.4 times the time
            factor, share = 1.4, case.achieved.bandwidth_util
            case.achieved.bandwidth_util = share
        elif case.id == COMPUTE:  # the same compute peak, a share 20 points lower: the code uses the H100 worse
            util = case.achieved.compute_util or 0.0
            factor = util / (util - 0.2)
            case.achieved.compute_util = util - 0.2
        else:
            factor = 1.0
        case.latency_us.median *= factor
        for k in case.kernels:
            k.duration_us.median *= factor
            if case.id == COMPUTE and k.compute_util is not None:
                k.compute_util = max(0.0, k.compute_util - 0.2)
    return out


def test_the_hardware_and_the_code_are_read_apart() -> None:
    h200 = load_result(H200)
    report = portability(h200, h100_variant(h200))
    rows = {(r.case, r.kernel): r for r in report.rows}
    memory = rows[(MEMORY, None)]
    assert memory.reading == "hardware" and memory.expected == pytest.approx(1.4) and memory.ratio == pytest.approx(1.4)
    compute = rows[(COMPUTE, None)]
    assert compute.reading == "worse" and "uses NVIDIA H100 80GB HBM3 worse" in compute.words
    same = rows[("sdpa[backend=flash,pass=fwd]", None)]
    assert same.reading == "same"
    assert any(r.kernel is not None for r in report.rows)  # the heavy kernels too
    text = render_portability(report)
    assert text.startswith("PORTABILITY: NVIDIA H200") and "no verdict" in text and "readings: hardware" in text


def test_compare_across_gpu_models_prints_the_report_and_exits_0_or_2_with_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h100 = tmp_path / "h100.json"
    h100.write_text(h100_variant(load_result(H200)).to_json())
    with pytest.raises(SystemExit) as exit_:
        main(["compare", str(H200), str(h100)])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert out.startswith("PORTABILITY:") and "FAIL" not in out
    with pytest.raises(SystemExit) as exit_:
        main(["compare", str(H200), str(h100), "--verdict"])
    assert exit_.value.code == 2 and "no verdict across GPU models" in capsys.readouterr().err
