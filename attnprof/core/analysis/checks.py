"""Per-case findings that need no statistics: status, backend and kernel set, accuracy."""

from __future__ import annotations

from collections.abc import Sequence

from attnprof.core.analysis.kernels import kernel_set
from attnprof.core.attribution.sdpa_calls import call_changes, refusal_words
from attnprof.core.documents.comparison import Finding
from attnprof.core.documents.result import Accuracy, Case


def status_finding(case_id: str, base_cases: Sequence[Case], cand: Case) -> Finding | None:
    """A case that ran in the baseline and fails now (fail), or is skipped now (warn); else ``None``."""
    ran_before = any(c.status == "ok" for c in base_cases)
    if cand.status == "ok" or not ran_before:
        return None
    why = f"{cand.error.type}: {cand.error.message}" if cand.error else "no error recorded"
    failed = cand.status == "failed"
    return Finding(
        case=case_id,
        metric="status",
        status="regressed",
        verdict="fail" if failed else "warn",
        baseline="ok",
        candidate=cand.status,
        detail=f"ran in the baseline, {cand.status} in the candidate ({why})",
    )


def backend_finding(case_id: str, base_cases: Sequence[Case], cand: Case) -> Finding | None:
    """The backend that ran changed (fail), or its kernel set did (warn); else ``None``."""
    base = [c for c in base_cases if c.status == "ok"]
    if cand.status != "ok" or not base:
        return None
    used = [c.backend_used for c in base if c.backend_used is not None]
    if used and cand.backend_used is not None and cand.backend_used not in used:
        was = ", ".join(dict.fromkeys(used))
        return Finding(
            case=case_id,
            metric="backend",
            status="regressed",
            verdict="fail",
            baseline=was,
            candidate=cand.backend_used,
            detail=f"the backend that ran changed: {was} -> {cand.backend_used}" + _why(base, cand, used),
        )
    cand_set = kernel_set(cand.kernels)
    base_sets = [kernel_set(c.kernels) for c in base if c.kernels]
    if not cand_set or not base_sets or cand_set in base_sets:
        return None
    latest = base_sets[-1]
    appeared = sorted(cand_set - latest)
    vanished = sorted(latest - cand_set)
    parts = []
    if appeared:
        parts.append("appeared: " + ", ".join(appeared))
    if vanished:
        parts.append("vanished: " + ", ".join(vanished))
    return Finding(
        case=case_id,
        metric="backend",
        status="inconclusive",
        verdict="warn",
        baseline=f"{len(latest)} kernels",
        candidate=f"{len(cand_set)} kernels",
        detail=f"kernel set changed within backend {cand.backend_used or '?'}; " + "; ".join(parts) + _why(base, cand),
    )


def _why(base: Sequence[Case], cand: Case, was: Sequence[str] = ()) -> str:
    """Why, in PyTorch's words where it gave them: each backend that ran before and was refused now, with its
    reasons, and what changed in the SDPA call itself (a mask that appeared, a dtype, strides)."""
    parts = []
    for backend in dict.fromkeys(was):
        words = refusal_words(cand.sdpa_calls or [], backend)
        if words:
            parts.append(words)
    latest = next((c for c in reversed(base) if c.sdpa_calls), None)
    if latest is not None and cand.sdpa_calls:
        changes = call_changes(latest.sdpa_calls or [], cand.sdpa_calls)
        if changes:
            parts.append("the SDPA call changed: " + "; ".join(changes[:4]) + ("; …" if len(changes) > 4 else ""))
    return "".join(f"; {p}" for p in parts)


def _failures(acc: Accuracy, tolerance: float | None) -> list[str]:
    """Tensors whose relative L2 error is past tolerance (``tolerance`` overrides the document's)."""
    out = []
    if (tolerance is None and not acc.ok) or (tolerance is not None and acc.rel_l2_err > tolerance):
        out.append("output")
    for g in acc.grads or []:
        if (tolerance is None and not g.ok) or (tolerance is not None and g.rel_l2_err > tolerance):
            out.append(g.tensor)
    return out


def accuracy_finding(case_id: str, base_cases: Sequence[Case], cand: Case, tolerance: float | None) -> Finding | None:
    """Error past tolerance in the candidate where the baseline was within it (fail); else ``None``.

    ``tolerance`` (a relative L2 error) overrides each document's own when a thresholds table sets
    ``accuracy``. A baseline already past tolerance is not a regression of this change.
    """
    if cand.status != "ok" or cand.accuracy is None:
        return None
    base = [c.accuracy for c in base_cases if c.status == "ok" and c.accuracy is not None]
    if not base:
        return None
    bad_now = _failures(cand.accuracy, tolerance)
    if not bad_now:
        return None
    bad_before = set().union(*(_failures(a, tolerance) for a in base))
    new = [t for t in bad_now if t not in bad_before]
    if not new:
        return None
    tol = tolerance if tolerance is not None else cand.accuracy.tolerance
    before = max(a.rel_l2_err for a in base)
    after = cand.accuracy.rel_l2_err
    return Finding(
        case=case_id,
        metric="accuracy",
        status="regressed",
        verdict="fail",
        baseline=before,
        candidate=after,
        unit="rel_l2_err",
        change=(after - before) / before if before > 0 else None,
        higher_is_better=False,
        threshold=tol,
        detail=f"past tolerance {tol:g} ({', '.join(new)}; reference: {cand.accuracy.reference})",
    )
