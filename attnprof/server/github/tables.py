"""The markdown tables of the PR comment: findings, and the kernels of a regressed case on both sides.

Pure: no database, no network. Durations are microseconds; changes are fractions in the documents and percentages
here. Every table is bounded: at most ``KERNELS_MAX`` kernel rows, ``WHY_MAX`` changes listed under them, names cut at
``regressions.NAME_MAX`` characters. Every word a document holds (case ids, kernel keys, phases, bounds, field names
and values) is the user's, written by ``attnprof.server.github.markdown`` with its pipes escaped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnprof.core import units
from attnprof.core.documents.comparison import Finding, KernelMove
from attnprof.core.documents.result import Kernel, ResultDocument
from attnprof.core.units import fmt_gbps, fmt_tflops
from attnprof.server.github import markdown
from attnprof.server.github.regressions import NAME_MAX, kernel_of, name

KERNELS_MAX = 20  # rows of a kernel table
WHY_MAX = 10  # launch and rate changes listed under a kernel table


def num(value: float | str | None, unit: str | None = None, *, table: bool = False) -> str:
    """A finding's value: a string (a backend's name) as code, a number with its unit. ``table``: for a cell."""
    if value is None:
        return "–"
    if isinstance(value, str):
        return markdown.code(value, NAME_MAX, table=table)
    if unit:  # a duration, rate or fraction: the one formatter (µs below 10 ms, ms above, with the unit)
        return units.fmt_in_unit(value, unit)
    # unitless (an accuracy's relative error): it spans orders of magnitude, so four significant digits
    return f"{value:.4g}"


def pct(change: float | None) -> str:
    """A relative change as a signed percentage."""
    # + 0.0 turns a negative zero into zero: a stored document has none (Postgres JSON keeps no -0), and an
    # upload's answer, rendered before its comparison is read back, must read the same as its retry's.
    return "–" if change is None else f"{change * 100 + 0.0:+.1f}%"


def _interval(f: Finding) -> str:
    if f.ci is None:
        return "–"
    return f"[{pct(f.ci.low)}, {pct(f.ci.high)}] ({f.ci.level:.0%})"


def kernel_change(m: KernelMove) -> str:
    """A kernel's change with the interval of its own change where both sides' samples gave one:
    ``+5.4% [+4.9%, +5.9%]``."""
    if m.ci is None:
        return pct(m.change)
    return f"{pct(m.change)} [{pct(m.ci.low)}, {pct(m.ci.high)}]"


def cell(text: str) -> str:
    """A case id or kernel key as code for a table cell: one line, its pipes escaped, at most
    ``regressions.NAME_MAX``."""
    return name(text, table=True)


def words(value: object) -> str:
    """A word from a document (a phase, a bound, a field's name or value) as plain text, also in a cell."""
    return markdown.text(value, NAME_MAX)


def findings_table(findings: list[Finding]) -> list[str]:
    lines = [
        "| | Case | Metric | Baseline | Candidate | Δ | Interval |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for f in findings:
        icon = {"regressed": "🔴", "improved": "🟢", "inconclusive": "❔"}.get(f.status, "")
        lines.append(
            f"| {icon} | {cell(f.case)} | {words(f.metric)} | {num(f.baseline, f.unit, table=True)} "
            f"| {num(f.candidate, f.unit, table=True)} "
            f"| {pct(f.change)} | {_interval(f)} |"
        )
    return lines


def _attr(kernel: Kernel | None, name: str) -> float | int | str | None:
    value = getattr(kernel, name, None) if kernel is not None else None
    return value if isinstance(value, (int, float, str)) else None


def _pair(
    baseline: float | int | str | None,
    candidate: float | int | str | None,
    fmt: str | Callable[[Any], str] = "{}",
) -> str:
    def one(v: float | int | str | None) -> str:
        if v is None:
            return "–"
        shown = fmt(v) if callable(fmt) else fmt.format(v)
        return words(shown) if isinstance(v, str) else shown

    if baseline == candidate:
        return one(candidate)
    return f"{one(baseline)} → {one(candidate)}"


def kernel_lines(baseline: ResultDocument | None, candidate: ResultDocument | None, f: Finding) -> list[str]:
    """The table of the kernels that moved in finding ``f`` (at most ``KERNELS_MAX`` rows, largest change first),
    each change with its interval where both sides held every round's samples, then what changed in their launch
    and rates."""
    if not f.kernels:
        return [
            "No kernel moved beyond its own noise (its traced iterations over the rounds): the change is outside the "
            "kernels (launch overhead, host time) or within their spread."
        ]
    lines = [
        "| Kernel | Phase | Baseline | Candidate | Δ (95% interval) | Occupancy | Registers/thread | DRAM BW util "
        "| Compute util | Bound |",
        "|---|---|---:|---:|---:|---|---|---|---|---|",
    ]
    why: list[str] = []
    for m in f.kernels[:KERNELS_MAX]:
        b, c = kernel_of(baseline, f.case, m), kernel_of(candidate, f.case, m)
        state = " (new)" if m.appeared else " (gone)" if m.vanished else ""
        lines.append(
            f"| {cell(m.key)}{state} | {words(m.phase) if m.phase else '–'} "
            f"| {num(m.baseline_us, 'us')} | {num(m.candidate_us, 'us')} "
            f"| {kernel_change(m)} "
            f"| {_pair(_attr(b, 'theoretical_occupancy'), _attr(c, 'theoretical_occupancy'), '{:.0%}')} "
            f"| {_pair(_attr(b, 'registers_per_thread'), _attr(c, 'registers_per_thread'))} "
            f"| {_pair(_attr(b, 'bandwidth_util'), _attr(c, 'bandwidth_util'), '{:.0%}')} "
            f"| {_pair(_attr(b, 'compute_util'), _attr(c, 'compute_util'), '{:.0%}')} "
            f"| {_pair(_attr(b, 'bound'), _attr(c, 'bound'))} |"
        )
        for fc in [*m.launch, *m.rates]:
            change = f" ({pct(fc.change)})" if fc.change is not None else ""
            why.append(f"- {name(m.key)}: {words(fc.field)} {_field(fc.baseline)} → {_field(fc.candidate)}{change}")
        if c is not None and c.occupancy_limiter and b is not None and b.occupancy_limiter != c.occupancy_limiter:
            why.append(f"- {name(m.key)}: occupancy now limited by {words(c.occupancy_limiter)}")
    if len(f.kernels) > KERNELS_MAX:
        lines.append(f"| … {len(f.kernels) - KERNELS_MAX} more kernels moved less | | | | | | | | | |")
    if len(why) > WHY_MAX:
        why = [*why[:WHY_MAX], f"- … and {len(why) - WHY_MAX} more changes"]
    return lines + (["", *why] if why else [])


def _field(value: object) -> str:
    """A launch or rate field's value: four significant digits for a float, else as plain text (cut at a cell's
    length)."""
    return f"{value:.4g}" if isinstance(value, float) else words(value)


def _occurrences(kernels: list[Kernel]) -> dict[tuple[str, str, int], Kernel]:
    """The kernels by key, phase and occurrence: two launches with one key in one phase (the two ``aten::bmm`` of an
    unfused attention on CPU, the two GEMMs of a block) are two entries, never one."""
    seen: dict[tuple[str, str], int] = {}
    out: dict[tuple[str, str, int], Kernel] = {}
    for k in kernels:
        n = seen.get((k.key, k.phase), 0)
        seen[(k.key, k.phase)] = n + 1
        out[(k.key, k.phase, n)] = k
    return out


def kernel_sets(baseline: ResultDocument | None, candidate: ResultDocument | None, case: str) -> list[str]:
    """The kernels of ``case`` on both sides (by key, phase and occurrence), when the backend changed: which vanished,
    which appeared, and what each costs per iteration (median, microseconds). At most ``KERNELS_MAX`` rows."""
    b = baseline.case(case) if baseline is not None else None
    c = candidate.case(case) if candidate is not None else None
    before = _occurrences(b.kernels if b is not None else [])
    after = _occurrences(c.kernels if c is not None else [])
    if not before and not after:
        return []
    lines = ["", "| Kernel | Phase | Baseline | Candidate | Bound |", "|---|---|---:|---:|---|"]
    idents = list(dict.fromkeys([*before, *after]))
    for ident in idents[:KERNELS_MAX]:
        bk, ck = before.get(ident), after.get(ident)
        state = " (new)" if bk is None and b is not None else " (gone)" if ck is None and c is not None else ""
        key, phase, n = ident
        nth = f" (#{n + 1})" if n else ""
        was = num(bk.duration_us.median if bk else None, "us")
        now = num(ck.duration_us.median if ck else None, "us")
        bound = _pair(_attr(bk, "bound"), _attr(ck, "bound"))
        lines.append(f"| {cell(key)}{nth}{state} | {words(phase)} | {was} | {now} | {bound} |")
    if len(idents) > KERNELS_MAX:
        lines.append(f"| … {len(idents) - KERNELS_MAX} more kernels | | | | |")
    return lines


def achieved(baseline: ResultDocument | None, candidate: ResultDocument | None, case: str) -> list[str]:
    """The case's achieved rates and bound, baseline → candidate, when the documents carry them."""
    b = baseline.case(case) if baseline is not None else None
    c = candidate.case(case) if candidate is not None else None
    if c is None or c.achieved is None:
        return []
    ba = b.achieved if b is not None else None
    parts = []
    fields: tuple[tuple[str, str, str | Callable[[Any], str]], ...] = (
        ("bandwidth_util", "DRAM bandwidth util", "{:.0%}"),
        ("compute_util", "compute util", "{:.0%}"),
        ("gbps", "bandwidth", fmt_gbps),
        ("tflops", "FLOP rate", fmt_tflops),  # GFLOP/s below 1 TFLOP/s, as a CPU's
        ("bound", "bound", "{}"),
    )
    for field, label, fmt in fields:
        now = getattr(c.achieved, field)
        if now is not None:
            parts.append(f"{label} {_pair(getattr(ba, field, None) if ba else None, now, fmt)}")
    return ["Whole case: " + "; ".join(parts) + ".", ""] if parts else []
