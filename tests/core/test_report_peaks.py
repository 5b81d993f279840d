"""The report's rates and peaks line: GFLOP/s below 1 TFLOP/s (a CPU's), and where the peaks came from."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from attnprof.core.documents import Peaks, ResultDocument, load_result
from attnprof.core.report import case_headline, header, render_markdown
from attnprof.core.units import fmt_tflops

CPU_RUN = Path(__file__).resolve().parents[1] / "data" / "service" / "cpu-run-1.json"


@pytest.fixture(scope="module")
def cpu_doc() -> ResultDocument:
    return load_result(CPU_RUN)


def with_peaks(doc: ResultDocument, **fields: object) -> ResultDocument:
    peaks = doc.environment.peaks.model_copy(update=fields)
    return doc.model_copy(update={"environment": doc.environment.model_copy(update={"peaks": peaks})})


def peaks_line(doc: ResultDocument) -> str:
    (line,) = [h for h in header(doc) if h.startswith("peaks ")]
    return line


@pytest.mark.parametrize(
    ("tflops", "text"),
    [
        (790.4, "790 TFLOP/s"),
        (1234.5, "1,234 TFLOP/s"),
        (40.23, "40.2 TFLOP/s"),
        (1.971, "1.97 TFLOP/s"),
        (0.187, "187 GFLOP/s"),
        (0.0536, "53.6 GFLOP/s"),
        (0.00079, "0.79 GFLOP/s"),
        (6.3e-5, "0.063 GFLOP/s"),
        (0.0, "0 GFLOP/s"),
        (None, "—"),
    ],
)
def test_rates_below_one_tflops_are_written_in_gflops(tflops: float | None, text: str) -> None:
    assert fmt_tflops(tflops) == text


def test_the_header_of_a_cpu_run_shows_gflops_and_never_zero_tflops(cpu_doc: ResultDocument) -> None:
    line = peaks_line(cpu_doc)
    # the stored peaks: 16.2 GB/s, fp32 0.0536, fp16 0.00079, bf16 0.00085 TFLOP/s; an older document, no origin
    assert line == (
        "peaks 16.2 GB/s (measured), fp32 53.6 GFLOP/s (measured), fp16 0.79 GFLOP/s (measured), "
        "bf16 0.85 GFLOP/s (measured)"
    )
    assert "TFLOP/s" not in render_markdown(cpu_doc)


def test_a_cpu_cases_headline_shows_gflops(cpu_doc: ResultDocument) -> None:
    lines = [case_headline(c) for c in cpu_doc.cases if c.achieved and c.achieved.tflops is not None]
    assert lines and all("GFLOP/s" in line and "TFLOP/s" not in line for line in lines)
    case = next(c for c in cpu_doc.cases if c.id == "sdpa[backend=flash,kv_heads=4]")
    assert "15.4 GFLOP/s (29%), 0.96 GB/s (6%), latency-bound" in case_headline(case)


def test_the_header_says_the_peaks_were_cached_and_when(cpu_doc: ResultDocument) -> None:
    doc = with_peaks(cpu_doc, origin="cached", status="stable", measured_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert peaks_line(doc).endswith("bf16 0.85 GFLOP/s (measured) · cached, 2026-01-02 03:04 UTC")


def test_the_header_says_the_peaks_were_measured_now_and_why_they_were_not_cached(cpu_doc: ResultDocument) -> None:
    doc = with_peaks(cpu_doc, origin="measured now", status="stable", measured_at=datetime.now(UTC))
    assert peaks_line(doc).endswith("(measured) · measured now")
    note = "other processes used 60% of the host's CPU time (limit 25%) in 3 of 3 calibration rounds"
    doc = with_peaks(doc, status="under load", note=note)
    assert peaks_line(doc).endswith(f"(measured) · measured now · not cached: {note}")


def test_the_header_says_the_peaks_are_the_datasheets() -> None:
    gpu = load_result(Path(__file__).resolve().parents[1] / "data" / "h200" / "attnprof" / "result.json")
    sheet = Peaks.model_validate(
        {
            "dram_gbps": {"value": 4800.0, "source": "datasheet"},
            "tflops": {"bf16": {"value": 989.4, "source": "datasheet"}, "fp32": {"value": 67.0, "source": "datasheet"}},
            "origin": "datasheet",
        }
    )
    doc = gpu.model_copy(update={"environment": gpu.environment.model_copy(update={"peaks": sheet})})
    assert (
        peaks_line(doc)
        == "peaks 4,800 GB/s (datasheet), bf16 989 TFLOP/s (datasheet), fp32 67.0 TFLOP/s (datasheet) · datasheet"
    )


def test_older_documents_without_the_new_peaks_fields_still_validate(cpu_doc: ResultDocument) -> None:
    peaks = cpu_doc.environment.peaks
    assert peaks.origin is None and peaks.measured_at is None and peaks.measured_with is None
    assert peaks.status is None and peaks.note is None
    dumped = Peaks.model_validate_json(with_peaks(cpu_doc, origin="cached").environment.peaks.model_dump_json())
    assert dumped.origin == "cached"
