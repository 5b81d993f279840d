"""Plain-text tables for CI logs: a comparison (regressions first) and a change-point report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnprof.core.documents.comparison import ComparisonDocument, Finding, KernelMove
from attnprof.core.units import fmt_change, fmt_duration_us, fmt_in_unit, fmt_percent, fmt_probability

if TYPE_CHECKING:
    from attnprof.core.analysis.changepoints import ChangepointReport

KERNELS_SHOWN = 5
TIME_METRICS = ("latency", "bandwidth", "throughput")  # the findings whose kernels are compared
_CASE_WIDTH = 44


def _pct(x: float | None) -> str:
    return fmt_change(x, ascii=True)


def _us(x: float | None) -> str:
    return fmt_duration_us(x, ascii=True)


def _value(v: float | str | None, unit: str | None) -> str:
    """A finding's value in its unit; durations in the unit that reads best (ASCII: ``us``)."""
    if isinstance(v, str):
        return v
    if unit == "rel_l2_err" and v is not None:
        # an error relative to the reference spans many decades: scientific notation is its natural form
        return f"{v:.3g}"
    return fmt_in_unit(v, unit, ascii=True)


def _case(name: str) -> str:
    return name if len(name) <= _CASE_WIDTH else name[: _CASE_WIDTH - 1] + "~"


def _kernel_line(m: KernelMove) -> str:
    label = f"{m.key} ({m.phase})" if m.phase else m.key
    if m.appeared:
        what = f"appeared, {_us(m.candidate_us)}" if m.candidate_us is not None else "appeared"
    elif m.vanished:
        what = f"vanished, was {_us(m.baseline_us)}" if m.baseline_us is not None else "vanished"
    else:
        # the interval of the kernel's own change, from every round's traced iterations on both sides
        ci = f" [{_pct(m.ci.low)}, {_pct(m.ci.high)}]" if m.ci is not None else ""
        what = f"{_us(m.baseline_us)} -> {_us(m.candidate_us)} ({_pct(m.change)}{ci})"
    launch = ", ".join(f"{c.field} {c.baseline}->{c.candidate}" for c in m.launch)
    return f"      kernel {label}: {what}" + (f"; {launch}" if launch else "")


_STOP_WORDS = {
    "slower": "slower",
    "faster": "faster",
    "same": "the same",
    "max_rounds": "ambiguous",
    "failed": "failed",
    "skipped": "skipped",
}
STOP_ORDER = ("slower", "faster", "same", "max_rounds", "failed", "skipped")
"""A paired comparison's stopping reasons, in the order they are counted."""


def _pairs(n: int | None) -> str:
    return "? pairs" if n is None else f"{n} pair{'' if n == 1 else 's'}"


def stopping(f: Finding, *, ascii: bool = False) -> str | None:
    """Why the rounds of a paired finding's case stopped, in words: "slower after 4 pairs", "the same within
    ±0.5% after 6 pairs", "ambiguous after 16 pairs, its budget spent; ~40 more would settle it", "slower after 4
    pairs (1 more set aside as disturbed)". None for a finding of no paired test. ``ascii``: ``+-`` for ``±``."""
    if f.stopped_by is None:
        return None
    if f.stopped_by == "failed":
        return "failed: a side gave no round"
    aside = f" ({f.set_aside} more set aside as disturbed)" if f.set_aside else ""
    if f.stopped_by == "max_rounds":
        more = f"; ~{f.more_rounds:,} more would settle it" if f.more_rounds is not None else ""
        spent = {"budget": ", its budget spent", "ceiling": ", the most a case may take"}.get(f.limit or "", "")
        return f"ambiguous after {_pairs(f.rounds)}{aside}{spent}{more}"
    within = ""
    if f.stopped_by == "same" and f.threshold is not None:
        within = f" within {'+-' if ascii else '±'}{fmt_percent(f.threshold, digits=1, ascii=ascii)}"
    return f"{_STOP_WORDS.get(f.stopped_by, f.stopped_by)}{within} after {_pairs(f.rounds)}{aside}"


def stopped_counts(comparison: ComparisonDocument) -> str:
    """A paired comparison's cases by stopping reason: "1 slower, 2 the same, 1 ambiguous"."""
    stopped = comparison.paired.stopped if comparison.paired is not None else {}
    known = [r for r in STOP_ORDER if stopped.get(r)] + sorted(r for r in stopped if r not in STOP_ORDER)
    return ", ".join(f"{stopped[r]} {_STOP_WORDS.get(r, r)}" for r in known) or "no case stopped"


def _row(f: Finding) -> str:
    ci = f"[{_pct(f.ci.low)}, {_pct(f.ci.high)}]" if f.ci else "-"
    q = fmt_probability(f.q, ascii=True)
    return (
        f"{_case(f.case):<{_CASE_WIDTH}} {f.metric:<10} {_value(f.baseline, f.unit):>14} "
        f"{_value(f.candidate, f.unit):>14} {_pct(f.change):>8} {ci:>18} {q:>7}  {f.status.upper()}"
    )


def render_table(comparison: ComparisonDocument) -> str:
    """The comparison as a fixed-width text table: what fails, then what warns, then improvements.

    Unchanged findings are counted, not listed. Timing findings list the kernels that moved (largest
    absolute time change first). Readable in any CI log: ASCII only, no colour codes.
    """
    c = comparison
    lines = [f"verdict: {c.verdict.upper()}"]
    if c.paired is not None:
        p = c.paired
        wall = f" in {p.wall_s:,.0f} s" if p.wall_s is not None else ""
        budget = f" within {p.budget:g}x the device time of its unpaired rounds" if p.budget is not None else ""
        family = f" (a change: split over {p.family} cases)" if p.family and p.family > 1 else ""
        lines.append(
            f"mode: paired (the merge base and the head interleaved on one device, ABBA rounds; {_pairs(p.rounds)} "
            f"of rounds{wall}, at most {p.max_pairs} per case{budget}; minimum effect "
            f"{fmt_percent(p.min_effect, digits=1, ascii=True)}, alpha {p.alpha:g} per case over its looks{family}; "
            f"stopped: {stopped_counts(c)})"
        )
        lines.append(f"head {c.candidate} vs merge base {p.base_run} (the base side: not a stored run)")
    else:
        base = "none (first run)" if c.baseline is None else f"{len(c.baseline)} run(s): {', '.join(c.baseline)}"
        if c.baseline == []:
            base = "none pooled (every run given was of another device model: see notes)"
        lines.append(f"candidate {c.candidate} vs baseline {base}")
    if c.testbed_mismatch:
        lines.append("!! TESTBED MISMATCH: baseline and candidate ran on different testbeds (see notes)")
    for s in c.software:
        lines.append(f"software: {s.name} {s.baseline} -> {s.candidate}")
    for note in c.notes:
        lines.append(f"note: {note}")
    # a paired comparison lists every case's rounds: how each stopped is what the reader checks
    shown = [f for f in c.findings if f.status != "unchanged" or f.verdict != "pass" or f.stopped_by is not None]
    if shown:
        # a paired finding's interval is at its own level (the error split over the looks its case took)
        ci_head = "CI" if c.paired is not None else f"{int(c.settings.ci_level * 100)}% CI"
        lines.append("")
        sides = ("base", "head") if c.paired is not None else ("baseline", "candidate")
        lines.append(
            f"{'case':<{_CASE_WIDTH}} {'metric':<10} {sides[0]:>14} {sides[1]:>14} {'change':>8} "
            f"{ci_head:>18} {'q':>7}  status"
        )
        for f in shown:
            lines.append(_row(f))
            stop = stopping(f, ascii=True)
            if stop is not None:
                lines.append(f"      paired: {stop}")
            if f.status != "unchanged" and f.detail and f.metric in ("backend", "accuracy", "status"):
                lines.append(f"      {f.detail}")
            if f.status in ("regressed", "improved", "inconclusive"):
                if not f.kernels and f.metric in TIME_METRICS:
                    lines.append("      kernels: none moved beyond its own noise")
                for m in f.kernels[:KERNELS_SHOWN]:
                    lines.append(_kernel_line(m))
                if len(f.kernels) > KERNELS_SHOWN:
                    lines.append(f"      ... and {len(f.kernels) - KERNELS_SHOWN} more kernel(s)")
    n = c.summary
    lines.append("")
    lines.append(
        f"{n.cases} case(s), {n.compared} compared, {n.findings} finding(s): {n.regressed} regressed, "
        f"{n.improved} improved, {n.inconclusive} inconclusive, {n.unchanged} unchanged "
        f"({n.fail} fail, {n.warn} warn); fdr {c.settings.fdr:g}"
        + ("" if c.paired is not None else f", noise floor {c.settings.noise_floor:.1%}")
    )
    return "\n".join(lines)


def render_changepoints(report: ChangepointReport) -> str:
    """A change-point report as text: one line per change point, grouped by case."""
    lines = [
        f"change points in {report.metric} over {len(report.runs)} run(s) "
        f"(e-divisive means, alpha {report.alpha:g}, {report.permutations} permutations, seed {report.seed})"
    ]
    for note in report.notes:
        lines.append(f"note: {note}")
    for case in report.cases:
        if not case.points:
            lines.append(f"{case.case}: none in {case.length} point(s)")
            continue
        lines.append(f"{case.case}:")
        for p in case.points:
            lines.append(
                f"  at #{p.index} (run {p.run_id}): {_value(p.mean_before, case.unit)} -> "
                f"{_value(p.mean_after, case.unit)} ({_pct(p.change)}), p {fmt_probability(p.p, ascii=True)}"
            )
    return "\n".join(lines)
