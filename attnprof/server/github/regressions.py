"""The regressed cases of a comparison, largest first, one line each: what the PR comment leads with.

Pure: no database, no network. Durations are microseconds; changes are fractions in the documents and
percentages in the lines, written by ``attnprof.core.units`` as everywhere else. Case ids, kernel keys and the
values a document holds are the user's: each is written by ``attnprof.server.github.markdown``.

**Impact** (the order): what a regression costs, in three tiers, then the microseconds it added:

1. a case that broke: its status (it ran in the baseline and failed now) or its accuracy regressed. A wrong or
   missing result outranks any slowdown, and it has no duration to compare;
2. a regression that fails the verdict (timing beyond its minimum effect, a backend switch), by the absolute change
   of the case's median latency (candidate − baseline, µs);
3. a regression that only warns (variance, a suspect run, a changed kernel set), by the same change.

Absolute microseconds, not the relative change, because they are what the model that calls the kernel loses per
call: a 2 µs decode step that became 30% slower costs less than a 3.4 ms prefill that became 6.6% slower, and the
kernel lines under each case are ordered the same way (``KernelMove`` by the change of its duration, µs). A case
whose medians are unknown (no latency on one side) comes after those whose are, within its tier.

**The estimate** a line prints is its case's timing finding's (latency, bandwidth or throughput, whatever its
status): the change of the case's time per iteration (``time_change``: a bandwidth drop of 5.7% is a time 6.1%
longer) and the medians the finding compared, the baseline being all baseline runs pooled. The comparison page's
chart plots the same change, so the comment, the page's answer and its chart say one number.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnprof.core.documents.comparison import ComparisonDocument, Finding, KernelMove
from attnprof.core.documents.result import Kernel, ResultDocument
from attnprof.core.units import fmt_change, fmt_duration_delta_us, fmt_duration_us, fmt_number, fmt_percent
from attnprof.server.github import markdown

TIMING = ("latency", "bandwidth", "throughput", "dram_bytes")
CASE_TIME = ("latency", "bandwidth", "throughput")
"""The metrics of a case's timing finding: one of them per compared case, named by what the case is bound by."""
_BROKEN = ("status", "accuracy")
NAME_MAX = 120
"""Characters of a case id or kernel key shown in a line; a longer one is cut with "…" (ids come from users)."""
LINE_MAX = 600
"""Characters of one regression's line at most, whatever its case has."""


@dataclass(frozen=True)
class Regression:
    """One regressed case: its regressed findings (timing first) and its medians, µs (None when a side has none)."""

    case: str
    findings: tuple[Finding, ...]
    tier: int
    baseline_us: float | None
    candidate_us: float | None
    change: float | None = None
    """The change of the case's time per iteration (fraction, positive = slower), as its timing finding estimates
    it; None when the case has none."""

    @property
    def delta_us(self) -> float | None:
        """What the case's median gained, µs (candidate − baseline)."""
        if self.baseline_us is None or self.candidate_us is None:
            return None
        return self.candidate_us - self.baseline_us

    @property
    def moves(self) -> list[KernelMove]:
        """The kernels that moved, from the case's first timing finding that names any (largest change first)."""
        for f in self.findings:
            if f.metric in TIMING and f.kernels:
                return list(f.kernels)
        return []


def clip(text: str, limit: int = NAME_MAX) -> str:
    return markdown.clip(text, limit)


def name(text: str, *, table: bool = False) -> str:
    """A case id or kernel key as an inline code span, at most ``NAME_MAX`` characters of it."""
    return markdown.code(text, NAME_MAX, table=table)


def _span(baseline_us: float, candidate_us: float) -> str:
    """``3,428 → 3,654 µs``: the unit once when both sides have the same."""
    was, now = fmt_duration_us(baseline_us), fmt_duration_us(candidate_us)
    if was.rsplit(" ", 1)[1] == now.rsplit(" ", 1)[1]:
        was = was.rsplit(" ", 1)[0]
    return f"{was} → {now}"


def time_change(change: float | None, higher_is_better: bool) -> float | None:
    """A timing finding's relative change as the change of the case's time per iteration (fraction, positive =
    slower). A rate (bandwidth, throughput) is work over time, so a rate times ``1 + change`` is the time divided
    by it: bandwidth −5.7% is time +6.1%, the case's slowdown. None when the rate fell to nothing."""
    if change is None:
        return None
    if not higher_is_better:
        return change
    return 1.0 / (1.0 + change) - 1.0 if change > -1.0 else None


def is_rate(f: Finding) -> bool:
    """Whether ``f`` measures a rate (higher is better), not a time."""
    return f.higher_is_better if f.higher_is_better is not None else f.metric in ("bandwidth", "throughput")


def _work(candidate: ResultDocument | None, case: str, metric: str) -> float | None:
    """The work per iteration that a rate finding of ``case`` divides by time: GB for bandwidth, TFLOP for
    throughput (the candidate's, as the comparison's timing test takes it)."""
    found = candidate.case(case) if candidate is not None else None
    work = found.work if found is not None else None
    if work is None:
        return None
    amount = work.bytes_min / 1e9 if metric == "bandwidth" else work.flops / 1e12 if metric == "throughput" else 0.0
    return amount if amount > 0 else None


def _median(doc: ResultDocument | None, case: str) -> float | None:
    found = doc.case(case) if doc is not None else None
    lat = found.latency_us if found is not None and found.status == "ok" else None
    return float(lat.median) if lat is not None else None


def _estimate(
    case: str, timing: Finding | None, baseline: ResultDocument | None, candidate: ResultDocument | None
) -> tuple[float | None, float | None, float | None]:
    """(baseline µs, candidate µs, change of time) of ``case`` as its timing finding estimates them: a latency
    finding's values are the medians; a rate finding's are the work over them. Without a timing finding, the
    documents' own medians (the baseline one of the pooled runs)."""
    b, c = (timing.baseline, timing.candidate) if timing is not None else (None, None)
    if timing is None or not isinstance(b, float | int) or not isinstance(c, float | int) or b <= 0 or c <= 0:
        b_us, c_us = _median(baseline, case), _median(candidate, case)
        return b_us, c_us, (c_us / b_us - 1.0 if b_us and c_us is not None else None)
    change = time_change(timing.change, is_rate(timing))
    if not is_rate(timing):
        return float(b), float(c), change
    work = _work(candidate, case, timing.metric)
    if work is not None:  # the rates are work over the medians the finding compared
        return work / float(b) * 1e6, work / float(c) * 1e6, change
    c_us = _median(candidate, case)  # no work to divide: the time's ratio is the rates' reciprocal
    return (None if c_us is None else c_us * float(c) / float(b)), c_us, change


def _tier(findings: list[Finding]) -> int:
    if any(f.metric in _BROKEN for f in findings):
        return 0
    return 1 if any(f.verdict == "fail" for f in findings) else 2


def by_impact(
    doc: ComparisonDocument, baseline: ResultDocument | None, candidate: ResultDocument | None
) -> list[Regression]:
    """The regressed cases of ``doc``, largest impact first (the module's docstring says what impact is); ties by
    case id, so the order is the same on every delivery."""
    grouped: dict[str, list[Finding]] = {}
    timing: dict[str, Finding] = {}
    for f in doc.findings:
        if f.status == "regressed":
            grouped.setdefault(f.case, []).append(f)
        if f.metric in CASE_TIME:
            timing.setdefault(f.case, f)
    out = []
    for case, found in grouped.items():
        found.sort(key=lambda f: (f.metric not in TIMING, f.metric))
        b_us, c_us, change = _estimate(case, timing.get(case), baseline, candidate)
        out.append(Regression(case, tuple(found), _tier(found), b_us, c_us, change))
    out.sort(key=lambda r: (r.tier, r.delta_us is None, -(r.delta_us or 0.0), r.case))
    return out


def kernel_of(doc: ResultDocument | None, case: str, move: KernelMove) -> Kernel | None:
    """The kernel of ``case`` that ``move`` stands for: the same key and phase. A key launched more than once in a
    phase (the comparison sums them) gives its longest launch, whose bound and utilisations weigh most."""
    found = doc.case(case) if doc is not None else None
    if found is None:
        return None
    same = [k for k in found.kernels if k.key == move.key and (move.phase is None or k.phase == move.phase)]
    return max(same, key=lambda k: k.duration_us.median) if same else None


def _util(b: Kernel | None, c: Kernel | None) -> str:
    """The utilisation that moved most, baseline → candidate ("bandwidth use 75% → 46%"), or the candidate's."""
    pairs = []
    for field, label in (("bandwidth_util", "bandwidth use"), ("compute_util", "compute use")):
        was, now = getattr(b, field, None), getattr(c, field, None)
        if now is not None:
            moved = abs(now - was) if was is not None else -1.0
            pairs.append((moved, label, was, now))
    if not pairs:
        return ""
    _, label, was, now = max(pairs, key=lambda p: p[0])
    return f"{label} {fmt_percent(was)} → {fmt_percent(now)}" if was is not None else f"{label} {fmt_percent(now)}"


def _kernel_part(reg: Regression, baseline: ResultDocument | None, candidate: ResultDocument | None) -> str:
    moves = reg.moves
    if not moves:
        return ""
    m = moves[0]
    key = name(m.key)
    if m.appeared:
        head = f"{key} new, {fmt_duration_delta_us(m.candidate_us or 0.0)}"
    elif m.vanished:
        head = f"{key} gone, {fmt_duration_delta_us(-(m.baseline_us or 0.0))}"
    else:
        ci = f" [{fmt_change(m.ci.low)}, {fmt_change(m.ci.high)}]" if m.ci is not None else ""
        head = f"{key} {fmt_duration_delta_us(m.delta_us or 0.0)} ({fmt_change(m.change)}{ci})"
    b, c = kernel_of(baseline, reg.case, m), kernel_of(candidate, reg.case, m)
    parts = [head]
    if c is not None and c.bound:
        was = b.bound if b is not None else None
        now = markdown.text(c.bound, 40)
        parts.append(f"{now}-bound" if was in (None, c.bound) else f"{markdown.text(was, 40)}-bound → {now}-bound")
    util = _util(b, c)
    if util:
        parts.append(util)
    more = f" (and {len(moves) - 1} more kernel{'s' if len(moves) > 2 else ''})" if len(moves) > 1 else ""
    return ", ".join(parts) + more


def _value(value: float | str | None) -> str:
    if value is None:
        return "–"
    return markdown.code(value, 60) if isinstance(value, str) else fmt_number(value)


def line(reg: Regression, baseline: ResultDocument | None, candidate: ResultDocument | None) -> str:
    """One markdown list item: the case, its change and medians (its timing finding's estimate), then what moved:
    the kernel that moved most (its change in µs and %, its bound, the utilisation that moved), or what else
    regressed (backend, accuracy, status, variance). At most ``LINE_MAX`` characters: whole parts are left out
    past it ("…"), never cut inside one, where a cut code span would let the rest of a name be read as markdown."""
    text = f"- {name(reg.case)}"
    if reg.baseline_us is not None and reg.candidate_us is not None and reg.change is not None:
        text += f" {fmt_change(reg.change)} ({_span(reg.baseline_us, reg.candidate_us)})"
    what: list[str] = []
    timing_done = False
    for f in reg.findings:
        if f.metric in TIMING:
            if timing_done:
                continue
            timing_done = True
            fallback = f"{markdown.text(f.metric)} {fmt_change(f.change)}, no kernel moved beyond its noise"
            what.append(_kernel_part(reg, baseline, candidate) or fallback)
        elif f.metric == "variance":
            what.append(f"run-to-run variance {fmt_change(f.change)}")
        else:
            what.append(f"{markdown.text(f.metric)} {_value(f.baseline)} → {_value(f.candidate)}")
    shown = 0
    for part in what:
        sep = "; " if shown else ": "
        if len(text) + len(sep) + len(part) + len("; …") > LINE_MAX:
            break
        text += sep + part
        shown += 1
    if shown < len(what):
        text += "; …" if shown else ": …"
    return text
