"""A paired comparison document (``attnprof.comparison/v1``, mode paired) read into the zoo's ``Outcome``: the
verdict, each case's latency line as a pull request's comment shows it, and the other findings."""

from __future__ import annotations

from typing import Any

from attnprof.core.documents import parse_comparison
from attnprof.core.documents.comparison import ComparisonDocument, KernelMove
from bench.zoo.records import CaseLine, OtherFinding, Outcome


def kernel_line(k: KernelMove) -> str:
    """One kernel of a finding, as the comparison states its move."""
    name = f"{k.key} ({k.phase})" if k.phase else k.key
    if k.appeared:
        return f"{name}: appeared, {k.candidate_us or 0:,.1f} us"
    if k.vanished:
        return f"{name}: vanished, was {k.baseline_us or 0:,.1f} us"
    if k.baseline_us is not None and k.candidate_us is not None and k.change is not None:
        ci = getattr(k, "ci", None)  # the kernel's own interval, in documents that carry one
        within = f" [{ci.low:+.1%}, {ci.high:+.1%}]" if ci is not None else ""
        return f"{name}: {k.baseline_us:,.1f} -> {k.candidate_us:,.1f} us ({k.change:+.1%}{within})"
    launch = ", ".join(f.field for f in k.launch)
    return f"{name}: launch changed ({launch})" if launch else name


def outcome(doc: ComparisonDocument) -> Outcome:
    found = Outcome(
        verdict=doc.verdict,
        notes=list(doc.notes),
        suspect=list(doc.suspect) if doc.suspect else None,
        pairs=doc.paired.rounds if doc.paired else None,
        paired_wall_s=doc.paired.wall_s if doc.paired else None,
    )
    for f in doc.findings:
        if f.metric == "latency":
            found.cases.append(
                CaseLine(
                    case=f.case,
                    status=f.status,
                    verdict=f.verdict,
                    change=f.change,
                    ci_low=f.ci.low if f.ci else None,
                    ci_high=f.ci.high if f.ci else None,
                    q=f.q,
                    pairs=f.rounds,
                    set_aside=f.set_aside,
                    stopped_by=f.stopped_by,
                    limit=getattr(f, "limit", None),
                    more_rounds=f.more_rounds,
                    detail=f.detail,
                    kernel_lines=[kernel_line(k) for k in f.kernels],
                )
            )
        elif f.status != "unchanged":
            found.others.append(
                OtherFinding(case=f.case, metric=f.metric, status=f.status, verdict=f.verdict, detail=f.detail)
            )
    return found


def parse(data: Any, source: str) -> ComparisonDocument:
    return parse_comparison(data, source=source)
