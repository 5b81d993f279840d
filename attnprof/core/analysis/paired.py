"""``compare_paired``: the candidate (the head) against the baseline (the merge base), profiled interleaved on one
device (docs/regression-method.md, "Paired comparisons").

The timing finding of each case comes from its paired round differences (``paired_stats``), with the case's
paired minimum effect (``thresholds.paired``: 0.5% on CUDA by default; a suite's or case's table overrides it);
its p-value (adjusted over the looks) joins Benjamini-Hochberg across the comparison as in a stored-history
comparison. The rounds and the verdict tell one story: the rounds call a case slower or faster only at
``alpha / family`` (the rule's error split over the run's cases), so Benjamini-Hochberg at ``alpha`` confirms every
such call whatever the other cases show; where the comparison's own level is stricter than the one the rounds ran at
(``--config``), or Benjamini-Hochberg confirms a change the rounds left ambiguous (with the run's other changes), the
finding and the notes say so. Status, backend, accuracy and DRAM-byte findings and the kernels that moved are read
from the two sides' result documents exactly as a stored-history comparison reads them, with the merge base's as the
one baseline.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

from attnprof.core.analysis.checks import accuracy_finding, backend_finding, status_finding
from attnprof.core.analysis.compare import (
    _excuse_suspect_cases,
    _no_baseline,
    _order,
    _software_diff,
    _summary,
    _suspect_run,
    _worst,
)
from attnprof.core.analysis.config import PRECEDENCE, PRIOR_RUNS, default_noise_floor, resolve
from attnprof.core.analysis.errors import AnalysisError
from attnprof.core.analysis.kernels import case_spread, kernel_moves
from attnprof.core.analysis.paired_stats import Rule, assess, log_ratios
from attnprof.core.analysis.stats import benjamini_hochberg
from attnprof.core.analysis.timing import CI_LEVEL, Tested, _naming, _rate, decide, dram_finding
from attnprof.core.documents.comparison import (
    ComparisonDocument,
    ComparisonSettings,
    Finding,
    Interval,
    PairedInfo,
    Verdict,
)
from attnprof.core.documents.paired import PairedCase, PairedDocument
from attnprof.core.documents.result import CLOCK_DROP_MARK, Case, ResultDocument, Thresholds
from attnprof.core.units import fmt_duration_us, fmt_probability


def rule_for(paired: PairedDocument, min_effect: float, case: PairedCase | None = None) -> Rule:
    """The document's rule with a case's own minimum effect and, where the case was planned on its own budget, its
    own looks."""
    r = paired.rule
    looks = case.looks if case is not None and case.looks else r.looks
    return Rule(
        min_effect=min_effect,
        alpha=r.alpha,
        min_pairs=looks[0],
        max_pairs=looks[-1],
        schedule=tuple(looks),
        trim=r.trim,
        max_set_aside=r.max_set_aside,
        family=r.family,
    )


def _uneven(reason: str) -> bool:
    """Whether a suspect mark can bias a paired comparison. A clock that fell while timing (power or thermal capping)
    cannot: the rounds alternate base, head, head, base, so both sides ran under the same clock, and each pair's ratio
    cancels it (a head that draws more power and so runs at a lower clock is the change itself, which the ratio should
    show). Another process on the GPU, throttling the driver reports and a loaded host can: they come and go, and one
    side's rounds may take more of them."""
    return not reason.startswith(CLOCK_DROP_MARK)


def _clock_notes(baseline: ResultDocument, candidate: ResultDocument) -> list[str]:
    """The cases whose clock fell while timing, said once: a note, not an excuse (``_uneven``)."""
    sides = (baseline, candidate)
    fell = sorted({c.id for doc in sides for c in doc.cases if any(not _uneven(r) for r in c.suspect or [])})
    if not fell:
        return []
    return [
        f"SM clock fell while timing {', '.join(fell[:5])}{' ...' if len(fell) > 5 else ''} (power or thermal capping):"
        " both sides were timed interleaved under it, so the paired test stands"
    ]


def compare_paired(
    baseline: ResultDocument,
    candidate: ResultDocument,
    paired: PairedDocument,
    *,
    config: Thresholds | None = None,
) -> ComparisonDocument:
    """Decide ``pass``, ``warn`` or ``fail`` for ``candidate`` (the head's result document) against ``baseline``
    (the merge base's) from the pairs in ``paired``.

    ``paired.base_run`` must name ``baseline`` and ``paired.head_run`` ``candidate``. ``config`` overrides the
    candidate's suite-level thresholds (a case's own still win). Raises ``AnalysisError`` when the three documents do
    not belong together."""
    if paired.base_run != baseline.run.id or paired.head_run != candidate.run.id:
        raise AnalysisError(
            f"the paired document joins base {paired.base_run} and head {paired.head_run}, "
            f"not {baseline.run.id} and {candidate.run.id}"
        )
    if not candidate.cases:
        raise AnalysisError(f"head {candidate.run.id} has no cases")
    mode = candidate.run.mode
    th = resolve(mode, candidate.suite.thresholds, config)
    settings = ComparisonSettings(
        mode=mode,
        thresholds=th.as_dict(),
        fdr=th.fdr,
        noise_floor=default_noise_floor(mode),
        noise_floor_source="default",
        prior_runs=PRIOR_RUNS,
        ci_level=CI_LEVEL,
        bootstrap=0,
        seed=0,
        precedence=PRECEDENCE,
    )
    base_cases = {c.id: c for c in baseline.cases}
    findings: list[Finding] = []
    tested: list[Tested] = []
    compared = 0
    for case in candidate.cases:
        before = base_cases.get(case.id)
        if before is None:
            findings.append(_no_baseline(case.id, case.status))
            continue
        compared += 1
        cth = resolve(mode, candidate.suite.thresholds, config, case.thresholds)
        for check in (
            status_finding(case.id, [before], case),
            backend_finding(case.id, [before], case),
            accuracy_finding(case.id, [before], case, cth.accuracy),
            dram_finding(case.id, [before], case, cth),
        ):
            if check is not None:
                findings.append(check)
        rounds = paired.case(case.id)
        if rounds is None or len(rounds.counted) < 2 or case.status != "ok" or before.status != "ok":
            continue
        tested.append(_paired_finding(case, before, rounds, rule_for(paired, cth.paired, rounds)))
    q_values = benjamini_hochberg([t.finding.p if t.finding.p is not None else 1.0 for t in tested])
    told: list[str] = []
    for t, q in zip(tested, q_values, strict=True):
        f = decide(t, q, th.fdr)
        if f.stopped_by == "max_rounds" and f.status == "unchanged":
            # Not shown to be within the minimum effect: the rounds ran out first.
            f.status = "inconclusive"
        why = _one_story(f, paired.rule.alpha, paired.rule.family, th.fdr)
        if why:
            f.detail = f"{f.detail}; {why}"
            told.append(f"{f.case}: {why}")
        findings.append(f)
    warmups = sum(len(c.warmup) for c in paired.cases)
    notes = [
        f"paired run on one {candidate.environment.device.name}: the merge base and the head interleaved (ABBA), "
        f"{sum(len(c.pairs) for c in paired.cases)} pairs of rounds"
        + (f" after {warmups} warm-up pairs" if warmups else "")
        + "; the base's samples join no history"
    ]
    verdict: Verdict = "pass"
    missing = sorted(set(base_cases) - {c.id for c in candidate.cases})
    if missing:
        verdict = "warn"
        notes.append(f"{len(missing)} base case(s) absent from the head: {', '.join(missing[:5])}")
    set_aside = sum(len(c.pairs) - len(c.counted) for c in paired.cases)
    if set_aside:
        notes.append(
            f"{set_aside} pair(s) of rounds set aside as disturbed (each far out of line with its case's other pairs: "
            "one side's round stalled) and run again; they stay in the paired document, out of the test"
        )
    notes += _stopping_notes(paired, findings)
    notes += [f"the rounds and the verdict differ on {line}" for line in told]
    notes += _clock_notes(baseline, candidate)
    _excuse_suspect_cases(candidate, findings, notes, _uneven)
    verdict = _worst(verdict, *(f.verdict for f in findings))
    base_marks = [r for r in baseline.run.suspect or [] if _uneven(r)]
    if base_marks:
        notes.append(f"the base side is suspect: {'; '.join(base_marks)}")
    verdict = _suspect_run(verdict, [r for r in candidate.run.suspect or [] if _uneven(r)], notes, "head")
    findings.sort(key=_order)
    return ComparisonDocument(
        mode="paired",
        verdict=verdict,
        baseline=[baseline.run.id],
        candidate=candidate.run.id,
        testbed_baseline=[baseline.environment.testbed_key],
        testbed_candidate=candidate.environment.testbed_key,
        testbed_mismatch=baseline.environment.testbed_key != candidate.environment.testbed_key,
        software=_software_diff([baseline], candidate),
        suspect=candidate.run.suspect,
        notes=notes,
        findings=findings,
        summary=_summary(candidate, compared, findings),
        settings=settings,
        paired=PairedInfo(
            base_run=baseline.run.id,
            rounds=sum(len(c.pairs) for c in paired.cases),
            max_pairs=paired.rule.max_pairs,
            min_effect=th.paired,
            alpha=paired.rule.alpha,
            isolation=paired.isolation,
            stopped=dict(Counter(c.stopped_by for c in paired.cases)),
            wall_s=paired.wall_s,
            family=paired.rule.family,
            budget=paired.rule.budget,
        ),
    )


def _one_story(f: Finding, alpha: float, family: int, fdr: float) -> str | None:
    """Why a finding's status is not what its rounds said, or None where the two agree. The rounds call a change at
    ``alpha / family``, so Benjamini-Hochberg at ``alpha`` confirms it; a stricter level of the comparison's own can
    leave it unconfirmed, and Benjamini-Hochberg can confirm a change the rounds left ambiguous when the run holds
    other changes (its step for the k-th smallest p is k times the first's)."""
    called = f.stopped_by if f.stopped_by in ("slower", "faster") else None
    q = fmt_probability(f.q, ascii=True)
    if called and f.status not in ("regressed", "improved"):
        return (
            f"the rounds called it {called} at alpha {alpha:g} / {family} case(s); the comparison's false-discovery "
            f"level {fdr:g} does not confirm it (q {q}), so it is {f.status}"
        )
    if f.stopped_by == "max_rounds" and f.status in ("regressed", "improved"):
        return (
            f"its rounds alone left it ambiguous; Benjamini-Hochberg across the run's cases confirms it with the "
            f"run's other changes (q {q} <= {fdr:g})"
        )
    return None


def _stopping_notes(paired: PairedDocument, findings: list[Finding]) -> list[str]:
    notes = []
    by_case = {c.case: c for c in paired.cases}
    ambiguous = [by_case[f.case] for f in findings if f.stopped_by == "max_rounds" and f.case in by_case]
    if ambiguous:
        limits = Counter(c.limit or "ceiling" for c in ambiguous)
        why = ", ".join(
            f"{n} {'its device-time budget spent' if limit == 'budget' else 'the most pairs a case may take'}"
            for limit, n in sorted(limits.items())
        )
        notes.append(
            f"{len(ambiguous)} case(s) ambiguous when their pairs ran out ({why}): neither a change past the minimum "
            "effect nor the same within it; each finding says how many more pairs would settle it"
        )
    unsettled = [c.case for c in paired.cases if c.warmup_end == "bound"]
    if unsettled:
        notes.append(
            f"{len(unsettled)} case(s) began their pairs before their warm-up rounds agreed (the bound of "
            f"{paired.rule.warmup_rounds} rounds spent): {', '.join(unsettled[:5])}"
        )
    return notes


def _paired_finding(case: Case, before: Case, rounds: PairedCase, rule: Rule) -> Tested:
    # The pairs set aside as disturbed are the record's: the rounds set them aside and ran others in their place.
    pairs = rounds.counted
    set_aside = len(rounds.pairs) - len(pairs)
    base_us = [p.base_us for p in pairs]
    head_us = [p.head_us for p in pairs]
    d = log_ratios(base_us, head_us)
    # The rounds stopped at a look or ran out: either way their last assessment is the rule's on the pairs kept.
    result = assess(d, rule, final=True)
    cycles = None
    if all(p.base_mhz and p.head_mhz for p in pairs):
        c = [x + math.log((p.head_mhz or 1) / (p.base_mhz or 1)) for x, p in zip(d, pairs, strict=True)]
        cycles = assess(c, rule, final=True).change
    metric, unit, work = _naming([before], case)
    b_med, h_med = statistics.median(base_us), statistics.median(head_us)
    if work is None:
        change, low, high = result.change, result.low, result.high
    else:  # a rate's relative change is the reciprocal of the time ratio
        change = 1 / (1 + result.change) - 1
        low, high = 1 / (1 + result.high) - 1, 1 / (1 + result.low) - 1
    stopped = rounds.stopped_by
    detail = (
        f"paired: {result.pairs} pairs of rounds on one device (base {fmt_duration_us(b_med, ascii=True)}, head "
        f"{fmt_duration_us(h_med, ascii=True)}, medians of the rounds); head/base time {result.change:+.2%} "
        f"[{result.low:+.2%}, {result.high:+.2%}] at {result.level:.2%}; sd of the pairs {math.expm1(result.sd):.2%}"
    )
    if result.trimmed:
        detail += f" ({result.trimmed} set aside at each end: a trimmed mean)"
    if rounds.warmup:
        settled = "agreed" if rounds.warmup_end == "steady" else "had not agreed when the bound was spent"
        detail += f"; after {len(rounds.warmup)} warm-up pairs, whose rounds {settled}"
    if rounds.spent_s is not None and rounds.budget_s is not None and rounds.max_pairs is not None:
        detail += (
            f"; its budget {rounds.max_pairs} pairs, {rounds.budget_s:.3g} s of device time "
            f"({rounds.spent_s:.3g} s spent)"
        )
    if set_aside:
        detail += f"; {set_aside} more pair(s) set aside as disturbed and run again (the paired document says why)"
    if cycles is not None:
        detail += f"; time x SM clock {cycles:+.2%}"
    if result.state == "ambiguous" and result.more_pairs is not None:
        detail += f"; ambiguous: about {result.more_pairs} more pairs would settle it"
    finding = Finding(
        case=case.id,
        metric=metric,
        status="unchanged",
        verdict="pass",
        baseline=_rate(b_med, work),
        candidate=_rate(h_med, work),
        unit=unit,
        change=change,
        higher_is_better=work is not None,
        threshold=rule.min_effect,
        ci=Interval(low=low, high=high, level=result.level),
        p=result.p,
        detail=detail,
        rounds=result.pairs,
        set_aside=set_aside or None,
        stopped_by=stopped,
        limit=rounds.limit if stopped == "max_rounds" else None,
        more_rounds=result.more_pairs if result.state == "ambiguous" else None,
        cycles_change=cycles,
        kernels=kernel_moves([before.kernels], case.kernels, case_us=b_med, case_spread=case_spread([before, case])),
    )
    if result.state == "same":
        # Shown to be within the minimum effect: not a change, whatever its p.
        finding.p = 1.0
    # The rule's minimum is on time; a rate's change is its reciprocal, so a time 0.5% longer is a rate 0.4975%
    # lower, and the minimum is mapped the same way (else a case the rounds call slower at the margin is unchanged).
    minimum = rule.min_effect if work is None else 1 - 1 / (1 + rule.min_effect)
    return Tested(finding, minimum, "fail")
