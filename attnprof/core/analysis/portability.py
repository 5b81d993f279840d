"""A portability report: the same suite on two GPU models, read apart into what the hardware explains and what the
code does worse on one of them. Never a pass or a fail: two models differ by their hardware, not by the code.

For each case, and each kernel found on both (by phase and key): the time on each GPU, and how much of that GPU's own
measured peaks it used (bandwidth, and compute at the case's dtype), from each run's document. A case or kernel
bound by one resource is expected to take ``peak on A / peak on B`` times as long on B. The reading:

``same``       within 3% on both
``hardware``   B's time is what B's peak of the bound resource predicts (within 10%), at a like share of each peak
``worse``      the bound resource's share of B's peak is 10 points or more below A's: the code uses B worse
``better``     the same share 10 points or more above A's
``other``      none of these: a latency-bound case, or a change of kernels between the two

Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnprof.core.documents import Case, Kernel, ResultDocument
from attnprof.core.units import fmt_duration_us

SAME = 0.03
EXPECTED = 0.10
SHARE_POINTS = 0.10


@dataclass(frozen=True)
class Row:
    case: str
    kernel: str | None  # None: the case as a whole
    a_us: float
    b_us: float
    bound: str | None
    a_share: float | None  # of A's peak of the bound resource
    b_share: float | None
    expected: float | None  # the time ratio B's peaks predict
    reading: str
    words: str

    @property
    def ratio(self) -> float:
        return self.b_us / self.a_us if self.a_us else float("nan")


@dataclass(frozen=True)
class Portability:
    a: ResultDocument
    b: ResultDocument
    rows: list[Row]

    @property
    def a_name(self) -> str:
        return self.a.environment.device.name

    @property
    def b_name(self) -> str:
        return self.b.environment.device.name


def _peak_ratio(a: ResultDocument, b: ResultDocument, bound: str | None, dtype: str) -> float | None:
    """A's peak over B's for the resource ``bound`` names: the time ratio B's hardware predicts."""
    pa, pb = a.environment.peaks, b.environment.peaks
    if bound == "memory":
        return pa.dram_gbps.value / pb.dram_gbps.value if pb.dram_gbps.value else None
    if bound == "compute":
        ta, tb = pa.tflops.get(dtype), pb.tflops.get(dtype)
        return ta.value / tb.value if ta and tb and tb.value else None
    return None


def _shares(
    bound: str | None, ua: tuple[float | None, float | None], ub: tuple[float | None, float | None]
) -> tuple[float | None, float | None]:
    """(A's, B's) share of the bound resource's peak; ``ua``/``ub`` are (bandwidth, compute) utilisations."""
    index = {"memory": 0, "compute": 1}.get(bound or "")
    return (None, None) if index is None else (ua[index], ub[index])


def _read(
    ratio: float,
    expected: float | None,
    a_share: float | None,
    b_share: float | None,
    names: tuple[str, str],
    bound: str | None,
) -> tuple[str, str]:
    a_name, b_name = names
    if abs(ratio - 1.0) <= SAME:
        return "same", f"within {SAME:.0%} on both"
    if a_share is not None and b_share is not None:
        resource = "bandwidth" if bound == "memory" else "compute"
        if b_share <= a_share - SHARE_POINTS:
            return "worse", (
                f"uses {b_name} worse: {b_share:.0%} of its {resource} peak against {a_share:.0%} on {a_name}"
            )
        if b_share >= a_share + SHARE_POINTS:
            return "better", f"uses {b_name} better: {b_share:.0%} of its {resource} peak against {a_share:.0%}"
    if expected is not None and abs(ratio / expected - 1.0) <= EXPECTED:
        resource = "bandwidth" if bound == "memory" else "compute rate"
        return "hardware", f"the hardware: {b_name}'s {resource} predicts ×{expected:.2f}, at a like share of each peak"
    return "other", f"{bound or 'no'}-bound; neither the peaks nor the shares explain ×{ratio:.2f}"


def _case_row(case_a: Case, case_b: Case, a: ResultDocument, b: ResultDocument) -> Row | None:
    if case_a.latency_us is None or case_b.latency_us is None:
        return None
    ach_a, ach_b = case_a.achieved, case_b.achieved
    bound = (ach_a.bound if ach_a else None) or (ach_b.bound if ach_b else None)
    ua = (ach_a.bandwidth_util, ach_a.compute_util) if ach_a else (None, None)
    ub = (ach_b.bandwidth_util, ach_b.compute_util) if ach_b else (None, None)
    return _row(case_a.id, None, case_a.latency_us.median, case_b.latency_us.median, bound, ua, ub, a, b, case_a)


def _kernel_row(case: Case, ka: Kernel, kb: Kernel, a: ResultDocument, b: ResultDocument) -> Row:
    bound = ka.counter_bound or ka.bound or kb.bound
    ua, ub = (ka.bandwidth_util, ka.compute_util), (kb.bandwidth_util, kb.compute_util)
    return _row(case.id, ka.key, ka.duration_us.median, kb.duration_us.median, bound, ua, ub, a, b, case)


def _row(
    case_id: str,
    kernel: str | None,
    a_us: float,
    b_us: float,
    bound: str | None,
    ua: tuple[float | None, float | None],
    ub: tuple[float | None, float | None],
    a: ResultDocument,
    b: ResultDocument,
    case: Case,
) -> Row:
    dtype = str(case.params.get("dtype", "bf16"))
    expected = _peak_ratio(a, b, bound, dtype)
    a_share, b_share = _shares(bound, ua, ub)
    names = (a.environment.device.name, b.environment.device.name)
    ratio = b_us / a_us if a_us else float("nan")
    reading, words = _read(ratio, expected, a_share, b_share, names, bound)
    return Row(case_id, kernel, a_us, b_us, bound, a_share, b_share, expected, reading, words)


def portability(a: ResultDocument, b: ResultDocument, *, kernel_share: float = 0.05) -> Portability:
    """Every case both runs timed, then its kernels on both that take at least ``kernel_share`` of the case on A."""
    rows: list[Row] = []
    for case_a in a.cases:
        case_b = b.case(case_a.id)
        if case_b is None or case_a.status != "ok" or case_b.status != "ok":
            continue
        row = _case_row(case_a, case_b, a, b)
        if row is None:
            continue
        rows.append(row)
        theirs = {(k.phase, k.key): k for k in case_b.kernels}
        for ka in case_a.kernels:
            kb = theirs.get((ka.phase, ka.key))
            if kb is not None and (ka.share or 0.0) >= kernel_share:
                rows.append(_kernel_row(case_a, ka, kb, a, b))
    return Portability(a, b, rows)


def render_portability(report: Portability) -> str:
    a, b = report.a_name, report.b_name
    pa, pb = report.a.environment.peaks, report.b.environment.peaks
    lines = [
        f"PORTABILITY: {a} (run {report.a.run.id}) against {b} (run {report.b.run.id}); no verdict: two GPU models "
        "differ by their hardware, not the code",
        f"peaks: {a} {pa.dram_gbps.value:,.0f} GB/s, {b} {pb.dram_gbps.value:,.0f} GB/s"
        + "".join(
            f"; {k} {pa.tflops[k].value:,.0f} / {pb.tflops[k].value:,.0f} TFLOP/s" for k in pa.tflops if k in pb.tflops
        ),
        "",
    ]
    for row in report.rows:
        name = row.case if row.kernel is None else f"  {row.kernel[:70]}"
        times = f"{fmt_duration_us(row.a_us)} → {fmt_duration_us(row.b_us)} (×{row.ratio:.2f})"
        lines.append(f"{name}: {times}; {row.reading}: {row.words}")
    counts = {
        r: sum(1 for row in report.rows if row.reading == r) for r in ("hardware", "worse", "better", "same", "other")
    }
    lines += ["", "readings: " + ", ".join(f"{k} {v}" for k, v in counts.items())]
    return "\n".join(lines)
