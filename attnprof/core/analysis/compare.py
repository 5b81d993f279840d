"""``compare``: one candidate run against pooled baseline runs, case by case, to a verdict.

The rules: docs/architecture.md, "Deciding a regression"; the method and its defaults: docs/regression-method.md.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import numpy as np

from attnprof.core.analysis.checks import accuracy_finding, backend_finding, status_finding
from attnprof.core.analysis.config import PRECEDENCE, PRIOR_RUNS, default_noise_floor, resolve
from attnprof.core.analysis.config import TIMING_METRICS as TIMED_METRICS
from attnprof.core.analysis.errors import AnalysisError
from attnprof.core.analysis.kernels import CLOCK_MOVE
from attnprof.core.analysis.stats import benjamini_hochberg
from attnprof.core.analysis.timing import (
    BOOTSTRAP_REPLICATES,
    CI_LEVEL,
    Context,
    Tested,
    decide,
    dram_finding,
    timing_finding,
    variance_finding,
)
from attnprof.core.documents.comparison import (
    ComparisonDocument,
    ComparisonSettings,
    Finding,
    SoftwareChange,
    Summary,
    Verdict,
)
from attnprof.core.documents.result import Case, ResultDocument, Thresholds

_RANK: dict[Verdict, int] = {"pass": 0, "warn": 1, "fail": 2}
_VERSION_FIELDS = ("driver", "cuda", "cudnn", "torch", "triton", "python")


def _worst(*verdicts: Verdict) -> Verdict:
    return max(verdicts, key=lambda v: _RANK[v], default="pass")


def compare(
    baselines: Sequence[ResultDocument],
    candidate: ResultDocument,
    *,
    config: Thresholds | None = None,
    noise_floor: float | None = None,
    seed: int = 0,
    first_run: bool = True,
) -> ComparisonDocument:
    """Compare ``candidate`` with the pooled ``baselines`` and decide ``pass``, ``warn`` or ``fail``.

    ``config`` overrides the candidate's suite-level thresholds (a case's own thresholds still win).
    ``noise_floor`` is the relative range of run medians that unchanged code shows on this testbed
    (e.g. 0.015 = 1.5%); ``None`` takes the documented default of the candidate's mode. ``seed`` fixes the
    bootstrap: the same inputs and seed give the same document. ``first_run`` says what no ``baselines`` means:
    the first run of all, which passes (``baseline: null``), or, when ``False``, a run whose cases have no
    baseline though other runs exist (another suite's), which warns on each case as a case new in a candidate
    does. Baseline runs measured on another device model than the candidate's are left out, each named in the notes
    (``OTHER DEVICE``); when none of the candidate's device model remains, nothing is compared and the verdict is
    ``warn`` (``baseline: []``). Raises ``AnalysisError`` on input that cannot be compared (no common cases, a noise
    floor outside [0, 1)).
    """
    mode = candidate.run.mode
    floor = default_noise_floor(mode) if noise_floor is None else float(noise_floor)
    if not 0.0 <= floor < 1.0:
        raise AnalysisError(f"noise floor must be a relative spread in [0, 1), got {noise_floor!r}")
    th = resolve(mode, candidate.suite.thresholds, config)
    settings = ComparisonSettings(
        mode=mode,
        thresholds=th.as_dict(),
        fdr=th.fdr,
        noise_floor=floor,
        noise_floor_source="default" if noise_floor is None else "argument",
        prior_runs=PRIOR_RUNS,
        ci_level=CI_LEVEL,
        bootstrap=BOOTSTRAP_REPLICATES,
        seed=seed,
        precedence=PRECEDENCE,
    )
    if not candidate.cases:
        raise AnalysisError(f"candidate {candidate.run.id} has no cases")
    baselines, other_devices = _by_device(baselines, candidate)
    device_notes = [_other_device_note(other_devices, candidate)] if other_devices else []
    if other_devices and not baselines:
        _require_common_cases(other_devices, candidate)  # files of another suite are bad input on any device
        return _no_baseline_of_device(candidate, settings, device_notes)
    if not baselines:
        new = [] if first_run else sorted((_no_baseline(c.id, c.status) for c in candidate.cases), key=_order)
        return ComparisonDocument(
            verdict="warn" if new else "pass",
            baseline=None,
            candidate=candidate.run.id,
            testbed_candidate=candidate.environment.testbed_key,
            suspect=candidate.run.suspect,
            notes=[
                f"no baseline for any of the {len(new)} case(s): this run becomes their history"
                if new
                else "no baseline: the first run of its kind passes and becomes history"
            ],
            findings=new,
            summary=_summary(candidate, 0, new),
            settings=settings,
        )
    _require_common_cases(baselines, candidate)
    base_ids = {c.id for b in baselines for c in b.cases}
    cand_ids = [c.id for c in candidate.cases]
    common = [i for i in cand_ids if i in base_ids]

    notes: list[str] = device_notes
    verdict: Verdict = "pass"
    cand_key = candidate.environment.testbed_key
    base_keys = list(dict.fromkeys(b.environment.testbed_key for b in baselines))
    mismatch = any(k != cand_key for k in base_keys)
    if mismatch:
        verdict = "warn"
        notes.append(_testbed_note(baselines, candidate))
    elif (gpu_note := _other_gpu_note(baselines, candidate)) is not None:
        notes.append(gpu_note)

    findings: list[Finding] = []
    tested: list[Tested] = []
    # ResultDocument.case looks a case up by scanning the list: once per case and baseline, that is quadratic.
    by_id = [{c.id: c for c in reversed(b.cases)} for b in baselines]
    for case in candidate.cases:
        base_cases = [c for cases in by_id if (c := cases.get(case.id)) is not None]
        if not base_cases:
            findings.append(_no_baseline(case.id, case.status))
            continue
        if case.status == "ok" and not any(c.status == "ok" for c in base_cases):
            findings.append(
                Finding(
                    case=case.id,
                    metric="status",
                    status="improved",
                    verdict="warn",
                    baseline=base_cases[-1].status,
                    candidate="ok",
                    detail="no timing baseline: the case did not run in the baseline",
                )
            )
            continue
        cth = resolve(mode, candidate.suite.thresholds, config, case.thresholds)
        # One stream per case id: a case's interval does not depend on which other cases ran.
        rng = np.random.default_rng([seed % 2**63, zlib.crc32(case.id.encode())])
        ctx = Context(mode=mode, noise_floor=floor, rng=rng)
        for check in (
            status_finding(case.id, base_cases, case),
            backend_finding(case.id, base_cases, case),
            accuracy_finding(case.id, base_cases, case, cth.accuracy),
            dram_finding(case.id, base_cases, case, cth),
        ):
            if check is not None:
                findings.append(check)
        for test in (
            timing_finding(case.id, base_cases, case, cth, ctx),
            variance_finding(case.id, base_cases, case, cth, ctx),
        ):
            if test is not None:
                tested.append(test)

    q_values = benjamini_hochberg([t.finding.p if t.finding.p is not None else 1.0 for t in tested])
    for t, q in zip(tested, q_values, strict=True):
        findings.append(decide(t, q, th.fdr))

    missing = sorted(base_ids - set(cand_ids))
    if missing:
        verdict = _worst(verdict, "warn")
        notes.append(f"{len(missing)} baseline case(s) absent from the candidate: {_few(missing)}")
    _excuse_suspect_cases(candidate, findings, notes)
    _note_clock_moves(by_id, candidate, findings)
    verdict = _worst(verdict, *(f.verdict for f in findings))
    for b in baselines:
        if b.run.suspect:
            notes.append(f"baseline run {b.run.id} is suspect: {'; '.join(b.run.suspect)}")
    verdict = _suspect_run(verdict, candidate.run.suspect, notes, "candidate")
    findings.sort(key=_order)
    return ComparisonDocument(
        verdict=verdict,
        baseline=[b.run.id for b in baselines],
        candidate=candidate.run.id,
        testbed_baseline=base_keys,
        testbed_candidate=cand_key,
        testbed_mismatch=mismatch,
        software=_software_diff(baselines, candidate),
        suspect=candidate.run.suspect,
        notes=notes,
        findings=findings,
        summary=_summary(candidate, len(common), findings),
        settings=settings,
    )


def _require_common_cases(baselines: Sequence[ResultDocument], candidate: ResultDocument) -> None:
    base_ids = {c.id for b in baselines for c in b.cases}
    cand_ids = [c.id for c in candidate.cases]
    if not any(i in base_ids for i in cand_ids):
        raise AnalysisError(
            "no common cases between baseline and candidate: baseline has "
            f"{_few(sorted(base_ids))}; candidate has {_few(cand_ids)}"
        )


def _device(doc: ResultDocument) -> tuple[str, str]:
    """What makes two runs' timings comparable at all: the kind of device and its model, as the runtime names it
    (``NVIDIA H200``, ``NVIDIA H100 80GB HBM3``, a CPU's model name)."""
    return doc.environment.device.kind, doc.environment.device.name


def _by_device(
    baselines: Sequence[ResultDocument], candidate: ResultDocument
) -> tuple[list[ResultDocument], list[ResultDocument]]:
    """(the baseline runs of the candidate's device model, those of another), each in the order given."""
    mine = _device(candidate)
    same = [b for b in baselines if _device(b) == mine]
    return same, [b for b in baselines if _device(b) != mine]


def _other_device_note(left_out: Sequence[ResultDocument], candidate: ResultDocument) -> str:
    # Another GPU model has other clocks, memory bandwidth (an H200's is 1.4 times an H100's), cache sizes and kernel
    # choices: the same code reads far apart on two models, which a pooled baseline would report as the code's change.
    runs = "; ".join(f"{b.run.id} ({b.environment.device.name}, testbed {b.environment.testbed_key})" for b in left_out)
    return (
        f"OTHER DEVICE: {len(left_out)} baseline run(s) left out, measured on another device model than the "
        f"candidate's {candidate.environment.device.name}: {runs}. Runs of two device models are never pooled: "
        "their timings differ by the hardware, not the code"
    )


def _no_baseline_of_device(
    candidate: ResultDocument, settings: ComparisonSettings, notes: list[str]
) -> ComparisonDocument:
    """Every baseline run was of another device model: nothing compared, ``warn``. Not ``fail``: a difference between
    two GPU models is no evidence of a regression; not ``pass``: nothing was checked, and a pass would say it was."""
    notes = [
        *notes,
        f"no baseline run on {candidate.environment.device.name}: nothing was compared, so this comparison neither "
        "passes nor fails; profile the baseline on the candidate's device model, or compare on the baseline's",
    ]
    verdict = _suspect_run("warn", candidate.run.suspect, notes, "candidate")
    return ComparisonDocument(
        verdict=verdict,
        baseline=[],
        candidate=candidate.run.id,
        testbed_candidate=candidate.environment.testbed_key,
        suspect=candidate.run.suspect,
        notes=notes,
        summary=_summary(candidate, 0, []),
        settings=settings,
    )


def _suspect_run(verdict: Verdict, suspect: list[str] | None, notes: list[str], side: str) -> Verdict:
    """The verdict once the ``side`` run's suspect marks are weighed (a note says so): a suspect run warns at least,
    and never fails."""
    if not suspect:
        return verdict
    reasons = "; ".join(suspect)
    if verdict == "fail":
        notes.append(f"would fail, but the {side} run is suspect ({reasons}): a suspect run never fails")
        return "warn"
    notes.append(f"the {side} run is suspect ({reasons}): its numbers are doubtful")
    return _worst(verdict, "warn")


def _no_baseline(case_id: str, status: str) -> Finding:
    return Finding(
        case=case_id,
        metric="status",
        status="inconclusive",
        verdict="warn",
        candidate=status,
        detail="no baseline: the case is new in the candidate",
    )


def _order(f: Finding) -> tuple[int, int, float, str, str]:
    status_rank = {"regressed": 0, "inconclusive": 1, "improved": 2, "unchanged": 3}[f.status]
    # Rounded so that float noise (a run scaled by a constant) cannot reorder equal changes.
    return (-_RANK[f.verdict], status_rank, -round(abs(f.change or 0.0), 9), f.case, f.metric)


def _few(items: Sequence[str], limit: int = 5) -> str:
    if not items:
        return "none"
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _testbed_note(baselines: Sequence[ResultDocument], candidate: ResultDocument) -> str:
    cand = candidate.environment
    parts = []
    for b in baselines:
        env = b.environment
        if env.testbed_key == cand.testbed_key:
            continue
        diffs = [
            f"{k}: {env.testbed.get(k)!r} -> {cand.testbed.get(k)!r}"
            for k in sorted(set(env.testbed) | set(cand.testbed))
            if env.testbed.get(k) != cand.testbed.get(k)
        ]
        parts.append(f"{b.run.id} ({env.testbed_key}; {', '.join(diffs) or 'same description'})")
    return (
        f"TESTBED MISMATCH: the candidate ran on testbed {cand.testbed_key} ({cand.device.name}, "
        f"{candidate.run.mode}) but baseline(s) on another: {'; '.join(parts)}. Timings across testbeds "
        "differ for reasons other than the code: read every timing finding with care"
    )


def _other_gpu_note(baselines: Sequence[ResultDocument], candidate: ResultDocument) -> str | None:
    """A note when the candidate ran on another physical GPU than baseline runs of its testbed (NVML's UUIDs differ).

    Two H200s of one testbed (model, driver and software alike), each timed in a lease of its own, read the
    validation set's cases -1.0% to +0.6% apart, 8 of 13 cases by more than they spread across either one's
    processes (docs/findings.md#another-gpu-of-the-same-testbed; the GPU and the time of its lease are not told
    apart there). A comparison across GPUs carries such a difference, which no baseline spread taken on one GPU
    shows. The verdict stands: a fleet of GPUs under one testbed is what a testbed is for, and a paired run, both
    sides on one GPU, is the comparison that does not carry it. Runs whose GPU is unknown (no NVML, a CPU run) are
    left out of the count."""
    cand = candidate.environment.device.uuid
    known = [b for b in baselines if b.environment.device.uuid]
    others = [b for b in known if b.environment.device.uuid != cand]
    if not cand or not others:
        return None
    gpus = ", ".join(dict.fromkeys(short_gpu_id(b.environment.device.uuid) for b in others))
    return (
        f"OTHER GPU: the candidate ran on GPU {short_gpu_id(cand)}, {len(others)} of the {len(known)} baseline run(s) "
        f"whose GPU is known on another of its testbed ({gpus}); two H200s of one testbed, each timed in its own "
        "lease, read the same cases up to 1% apart, so a change of that size may not be the code's: a paired run "
        "times both sides on one GPU"
    )


def short_gpu_id(uuid: str | None) -> str:
    """The first group of a GPU's UUID (NVML's ``GPU-`` prefix dropped): enough to tell a fleet's GPUs apart."""
    return (uuid or "?").removeprefix("GPU-").split("-")[0]


NOT_RECORDED = "not recorded"


def _software_diff(baselines: Sequence[ResultDocument], candidate: ResultDocument) -> list[SoftwareChange]:
    def versions(doc: ResultDocument) -> dict[str, str | None]:
        env = doc.environment
        out: dict[str, str | None] = {f: getattr(env, f) for f in _VERSION_FIELDS}
        out.update(env.software)
        return out

    cand = versions(candidate)
    base = [versions(b) for b in baselines]
    names = list(dict.fromkeys([*cand, *(k for v in base for k in v)]))
    changes = []
    for name in names:
        before = list(dict.fromkeys(v.get(name) for v in base))
        after = cand.get(name)
        if before == [after]:
            continue
        # a version a document does not hold (written before it was recorded) is said so; several baseline values
        # are kept apart by " | ", since a value may hold commas (the timing method's words do)
        shown = " | ".join(NOT_RECORDED if v is None else v for v in before)
        changes.append(SoftwareChange(name=name, baseline=shown, candidate=NOT_RECORDED if after is None else after))
    return changes


def _summary(candidate: ResultDocument, compared: int, findings: Sequence[Finding]) -> Summary:
    def count(**kw: str) -> int:
        return sum(all(getattr(f, k) == v for k, v in kw.items()) for f in findings)

    return Summary(
        cases=len(candidate.cases),
        compared=compared,
        findings=len(findings),
        regressed=count(status="regressed"),
        improved=count(status="improved"),
        unchanged=count(status="unchanged"),
        inconclusive=count(status="inconclusive"),
        fail=count(verdict="fail"),
        warn=count(verdict="warn"),
    )


TIMING_METRICS = frozenset({"latency", "bandwidth", "throughput", "variance", "dram_bytes"})


def _excuse_suspect_cases(
    candidate: ResultDocument,
    findings: list[Finding],
    notes: list[str],
    counts: Callable[[str], bool] = lambda reason: True,
) -> None:
    """A timing finding of a case timed under doubtful conditions (clocks fell) warns instead of failing.

    Backend, accuracy and status findings still fail: clocks do not change what ran or what it computed. Only the
    case's marks that ``counts`` keeps excuse it (a paired comparison drops the ones interleaving cancels).
    """
    for f in findings:
        case = candidate.case(f.case)
        marks = [r for r in (case.suspect or []) if counts(r)] if case is not None else []
        if f.verdict != "fail" or f.metric not in TIMING_METRICS or not marks:
            continue
        f.verdict = "warn"
        reasons = "; ".join(marks)
        f.detail = f"{f.detail + '; ' if f.detail else ''}would fail, but the case is suspect ({reasons})"
        notes.append(f"{f.case}: {f.metric} regression not failed: the case is suspect ({reasons})")


def _note_clock_moves(by_id: Sequence[dict[str, Case]], candidate: ResultDocument, findings: list[Finding]) -> None:
    """Say, on each timing finding that moved, when the case's SM clock under load moved too, beyond the clock pass's
    own spread (both sides measured it). A kernel that keeps the SMs busy runs longer at a lower clock; the clock
    moves with the GPU's power and temperature, and with the code's own power draw, so the note informs and the
    verdict stands: the time is what the candidate takes."""
    for f in findings:
        if f.metric not in TIMED_METRICS or f.status not in ("regressed", "improved"):
            continue
        case = candidate.case(f.case)
        base = [c.sm_clock_mhz for cases in by_id if (c := cases.get(f.case)) is not None and c.sm_clock_mhz]
        if case is None or not case.sm_clock_mhz or not base:
            continue
        before = float(np.median(base))
        moved = case.sm_clock_mhz / before - 1.0
        if abs(moved) < CLOCK_MOVE:
            continue
        note = (
            f"the SM clock under load {'fell' if moved < 0 else 'rose'} {abs(moved):.1%} "
            f"({before:,.0f} → {case.sm_clock_mhz:,.0f} MHz): a kernel that keeps the SMs busy runs "
            f"{'longer' if moved < 0 else 'shorter'} at it"
        )
        f.detail = f"{f.detail}; {note}" if f.detail else note
