"""The pull-request comment, in GitHub markdown, rendered from a job's comparison and its run documents.

Pure: no database, no network. ``render`` takes everything it shows; ``service.github.service`` gathers it.
Changes are fractions in the documents and percentages here; durations are microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnprof.contract.links import Links
from profiler_core.documents.comparison import ComparisonDocument, Finding, KernelMove
from profiler_core.documents.result import Kernel, ResultDocument

MARKER_PREFIX = "<!-- attnprof:"
_ICONS = {"pass": "✅", "warn": "⚠️", "fail": "❌"}
_MOVED = ("regressed", "improved")
_ENDED = {"failed": "failed", "timed_out": "timed out", "cancelled": "was cancelled"}
_KERNELS_MAX = 20  # rows of a backend switch's kernel table
_REASON_MAX = 4000  # characters of the reason shown (a worker's output tail can be long)
_NEXT = {
    "failed": "If the cause is in the code, fix it and push; if it was the worker or the infrastructure, comment "
    "`/attnprof rerun` to run this commit again.",
    "timed_out": "The profiling ran past the worker's wall-clock limit: a target that hangs, or a suite too large "
    "for the limit. Reproduce it locally, then push, or comment `/attnprof rerun`.",
    "cancelled": "Push again or comment `/attnprof rerun` to get a verdict.",
}


def marker(project: str) -> str:
    """The hidden line that finds the project's comment again among a pull request's comments."""
    return f"{MARKER_PREFIX}{project} -->"


@dataclass(frozen=True)
class CommentInput:
    """What the comment shows about one job (or one upload: ``job_id`` empty). ``baseline`` is one of the pooled
    baseline runs' documents. ``traces``: the names of the run's stored traces, the only ones linked (None: every
    trace the candidate names, as for an upload, whose client sends its traces after the answer)."""

    project: str
    job_id: str
    status: str
    suite_name: str
    testbed: str
    branch: str
    commit: str
    public_url: str
    pr: int | None = None
    reason: str | None = None
    run_id: str | None = None
    comparison_id: str | None = None
    comparison: ComparisonDocument | None = None
    candidate: ResultDocument | None = None
    baseline: ResultDocument | None = None
    traces: frozenset[str] | None = None


def _num(value: float | str | None, unit: str | None = None) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return f"`{value}`"
    text = f"{value:.4g}" if abs(value) < 1e6 else f"{value:.3e}"
    return f"{text} {unit}" if unit and unit != "fraction" else text


def _pct(change: float | None) -> str:
    # + 0.0 turns a negative zero into zero: a stored document has none (Postgres JSON keeps no -0), and an
    # upload's answer, rendered before its comparison is read back, must read the same as its retry's.
    return "–" if change is None else f"{change * 100 + 0.0:+.1f}%"


def _interval(f: Finding) -> str:
    if f.ci is None:
        return "–"
    return f"[{_pct(f.ci.low)}, {_pct(f.ci.high)}] ({f.ci.level:.0%})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(findings: list[Finding]) -> list[str]:
    lines = [
        "| | Case | Metric | Baseline | Candidate | Δ | Interval |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for f in findings:
        icon = {"regressed": "🔴", "improved": "🟢", "inconclusive": "❔"}.get(f.status, "")
        lines.append(
            f"| {icon} | `{_cell(f.case)}` | {f.metric} | {_num(f.baseline, f.unit)} | {_num(f.candidate, f.unit)} "
            f"| {_pct(f.change)} | {_interval(f)} |"
        )
    return lines


def _kernel(doc: ResultDocument | None, case: str, move: KernelMove) -> Kernel | None:
    found = doc.case(case) if doc is not None else None
    if found is None:
        return None
    for k in found.kernels:
        if k.key == move.key and (move.phase is None or k.phase == move.phase):
            return k
    return None


def _attr(kernel: Kernel | None, name: str) -> float | int | str | None:
    value = getattr(kernel, name, None) if kernel is not None else None
    return value if isinstance(value, (int, float, str)) else None


def _pair(baseline: float | int | str | None, candidate: float | int | str | None, fmt: str = "{}") -> str:
    def one(v: float | int | str | None) -> str:
        return "–" if v is None else fmt.format(v)

    if baseline == candidate:
        return one(candidate)
    return f"{one(baseline)} → {one(candidate)}"


def _kernel_lines(inp: CommentInput, f: Finding) -> list[str]:
    lines = [
        "| Kernel | Phase | Baseline | Candidate | Δ | Occupancy | Registers/thread | DRAM BW util "
        "| Compute util | Bound |",
        "|---|---|---:|---:|---:|---|---|---|---|---|",
    ]
    why: list[str] = []
    for m in f.kernels:
        b, c = _kernel(inp.baseline, f.case, m), _kernel(inp.candidate, f.case, m)
        state = " (new)" if m.appeared else " (gone)" if m.vanished else ""
        lines.append(
            f"| `{_cell(m.key)}`{state} | {m.phase or '–'} "
            f"| {_num(m.baseline_us, 'us')} | {_num(m.candidate_us, 'us')} "
            f"| {_pct(m.change)} "
            f"| {_pair(_attr(b, 'theoretical_occupancy'), _attr(c, 'theoretical_occupancy'), '{:.0%}')} "
            f"| {_pair(_attr(b, 'registers_per_thread'), _attr(c, 'registers_per_thread'))} "
            f"| {_pair(_attr(b, 'bandwidth_util'), _attr(c, 'bandwidth_util'), '{:.0%}')} "
            f"| {_pair(_attr(b, 'compute_util'), _attr(c, 'compute_util'), '{:.0%}')} "
            f"| {_pair(_attr(b, 'bound'), _attr(c, 'bound'))} |"
        )
        for fc in [*m.launch, *m.rates]:
            change = f" ({_pct(fc.change)})" if fc.change is not None else ""
            why.append(f"- `{_cell(m.key)}`: {fc.field} {fc.baseline} → {fc.candidate}{change}")
        if c is not None and c.occupancy_limiter and b is not None and b.occupancy_limiter != c.occupancy_limiter:
            why.append(f"- `{_cell(m.key)}`: occupancy now limited by {c.occupancy_limiter}")
    if not f.kernels:
        return ["No kernel moved beyond its noise: the change is outside the kernels (launch overhead, host time)."]
    return lines + (["", *why] if why else [])


def _kernel_sets(inp: CommentInput, case: str) -> list[str]:
    """The kernels of ``case`` on both sides, by key, when the backend changed: which vanished, which appeared,
    and what each costs per iteration (median, microseconds)."""
    b = inp.baseline.case(case) if inp.baseline is not None else None
    c = inp.candidate.case(case) if inp.candidate is not None else None
    before = {k.key: k for k in (b.kernels if b is not None else [])}
    after = {k.key: k for k in (c.kernels if c is not None else [])}
    if not before and not after:
        return []
    lines = ["", "| Kernel | Phase | Baseline | Candidate | Bound |", "|---|---|---:|---:|---|"]
    for key in list(dict.fromkeys([*before, *after]))[:_KERNELS_MAX]:
        bk, ck = before.get(key), after.get(key)
        state = " (new)" if bk is None and b is not None else " (gone)" if ck is None and c is not None else ""
        either = ck or bk
        phase = either.phase if either is not None else "–"
        was = _num(bk.duration_us.median if bk else None, "us")
        now = _num(ck.duration_us.median if ck else None, "us")
        bound = _pair(_attr(bk, "bound"), _attr(ck, "bound"))
        lines.append(f"| `{_cell(key)}`{state} | {phase} | {was} | {now} | {bound} |")
    return lines


def _achieved(inp: CommentInput, case: str) -> list[str]:
    """The case's achieved rates and bound, baseline → candidate, when the documents carry them."""
    b = inp.baseline.case(case) if inp.baseline is not None else None
    c = inp.candidate.case(case) if inp.candidate is not None else None
    if c is None or c.achieved is None:
        return []
    ba = b.achieved if b is not None else None
    parts = []
    for name, label, fmt in (
        ("bandwidth_util", "DRAM bandwidth util", "{:.0%}"),
        ("compute_util", "compute util", "{:.0%}"),
        ("gbps", "GB/s", "{:.4g}"),
        ("tflops", "TFLOP/s", "{:.4g}"),
        ("bound", "bound", "{}"),
    ):
        now = getattr(c.achieved, name)
        if now is not None:
            parts.append(f"{label} {_pair(getattr(ba, name, None) if ba else None, now, fmt)}")
    return ["Whole case: " + "; ".join(parts) + ".", ""] if parts else []


def _links(inp: CommentInput, cases: list[str]) -> list[str]:
    """The dashboard's pages of the job, its run, its comparison and the regressed cases' traces (a person reads
    the comment: the API's routes would ask their browser for a token)."""
    ui = Links(inp.public_url)
    links = [f"[job]({ui.ui_job(inp.project, inp.job_id)})"] if inp.job_id else []  # an upload has no job
    if inp.run_id:
        links.append(f"[run]({ui.ui_run(inp.project, inp.run_id)})")
    if inp.comparison_id:
        links.append(f"[comparison]({ui.ui_comparison(inp.project, inp.comparison_id)})")
    traces = []
    for case in cases:
        found = inp.candidate.case(case) if inp.candidate is not None else None
        trace = found.trace if found is not None else None
        if inp.run_id and trace and (inp.traces is None or trace in inp.traces):
            traces.append(f"[trace of `{case}`]({ui.ui_trace(inp.project, inp.run_id, trace)})")
    return ["**Links:** " + " · ".join(links + traces)]


def _reproduce(inp: CommentInput, cases: list[str], *, compare: bool = True) -> list[str]:
    """How to run it locally; ``compare`` adds the baseline side and the comparison (not for a failed job)."""
    suite = f"{inp.suite_name}.toml"
    lines = ["<details><summary>Reproduce locally</summary>", "", "```sh"]
    lines.append(f"git checkout {inp.commit}")
    if cases:
        selected = " ".join(f"--case '{c}'" for c in cases[:5])
        lines.append(f"attnprof profile {suite} {selected} --out candidate.json")
    else:
        lines.append(f"attnprof profile {suite} --out candidate.json")
    if compare:
        lines += [
            "# the same on the base commit, written to baseline.json, then:",
            "attnprof compare baseline.json candidate.json",
        ]
    lines += [
        "```",
        "",
        "</details>",
    ]
    return lines


def _headline(inp: CommentInput) -> str:
    doc = inp.comparison
    if doc is not None:
        return f"## {_ICONS[doc.verdict]} attnprof `{inp.project}`: **{doc.verdict}** on `{inp.testbed}`"
    if inp.status in _ENDED:
        return f"## ⛔ attnprof `{inp.project}`: **no verdict** (job {_ENDED[inp.status]}) on `{inp.testbed}`"
    return f"## ⏳ attnprof `{inp.project}`: job {inp.status} on `{inp.testbed}`"


def _no_verdict(inp: CommentInput) -> list[str]:
    """What a job that ended without a comparison says: that this commit has no verdict, why, what to do.

    The comment is the pull request's one, updated in place: it says outright that the earlier commit's table is
    gone rather than leaving a verdict that no longer describes the code under review.
    """
    if inp.status not in _ENDED:
        return ["", f"No verdict yet: the job is **{inp.status}**.", "", *_links(inp, []), ""]
    reason = (inp.reason or "no reason was recorded").strip()
    if len(reason) > _REASON_MAX:
        reason = "…" + reason[-_REASON_MAX:]
    fence = "````" if "```" in reason else "```"
    stale = " A verdict on an earlier commit of this pull request no longer applies." if inp.pr is not None else ""
    out = [
        "",
        f"**This commit has no verdict:** the job {_ENDED[inp.status]} before its results were compared with the "
        f"baseline, so nothing is known about its performance.{stale}",
        "",
        "**Why:**",
        "",
        f"{fence}text",
        reason,
        fence,
        "",
        _NEXT[inp.status],
        "",
        *_links(inp, []),
        "",
    ]
    if inp.status != "cancelled":
        out += [*_reproduce(inp, [], compare=False), ""]
    return out


def render(inp: CommentInput) -> str:
    """The comment's markdown; its first line is the project's hidden marker."""
    out = [marker(inp.project), _headline(inp), ""]
    out.append(f"Suite `{inp.suite_name}`, commit `{inp.commit[:12]}` on `{inp.branch}`.")
    doc = inp.comparison
    if doc is None:
        return "\n".join(out + _no_verdict(inp))
    s = doc.summary
    baselines = len(doc.baseline or [])
    out.append(
        f"{s.compared} of {s.cases} cases compared against {baselines} baseline run(s) "
        f"(testbed `{doc.testbed_candidate}`): {s.regressed} regressed, {s.improved} improved, "
        f"{s.inconclusive} inconclusive, {s.unchanged} unchanged."
    )
    if doc.testbed_mismatch:
        out.append(f"\n⚠️ The baselines ran on other testbeds: {', '.join(doc.testbed_baseline)}.")
    if doc.suspect:
        out.append("\n⚠️ The candidate's numbers are doubtful: " + "; ".join(doc.suspect))
    out += [f"\n> {n}" for n in doc.notes]

    moved = [f for f in doc.findings if f.status in _MOVED]
    moved.sort(key=lambda f: (f.status != "regressed", f.case, f.metric))
    if moved:
        out += ["", "### Regressions and improvements", "", *_table(moved)]
    regressions = [f for f in moved if f.status == "regressed"]
    for f in regressions:
        if f.metric == "backend":
            out += ["", f"#### ⚠️ `{f.case}`: backend switch {_num(f.baseline)} → {_num(f.candidate)}"]
            out += [f.detail] if f.detail else []
            out += _kernel_sets(inp, f.case)
        elif f.metric == "variance":
            out += ["", f"#### `{f.case}`: run-to-run variance {_pct(f.change)}"]
            out += [f.detail] if f.detail else []
        elif f.metric == "accuracy":
            out += ["", f"#### ❌ `{f.case}`: accuracy {_num(f.baseline)} → {_num(f.candidate)}"]
            out += [f.detail] if f.detail else []
        elif f.metric in ("latency", "bandwidth", "throughput", "dram_bytes"):
            out += ["", f"#### `{f.case}`: {f.metric} {_pct(f.change)}"]
            out += [f.detail, ""] if f.detail else [""]
            out += _achieved(inp, f.case)
            out += _kernel_lines(inp, f)
    if doc.software:
        out += [
            "",
            "**Software that differs:** "
            + ", ".join(f"{sw.name} {sw.baseline or '–'} → {sw.candidate or '–'}" for sw in doc.software),
        ]
    if doc.findings:
        out += ["", f"<details><summary>All {len(doc.findings)} findings</summary>", "", *_table(doc.findings)]
        out += ["", "</details>"]
    cases = list(dict.fromkeys(f.case for f in regressions))
    out += ["", *_links(inp, cases), "", *_reproduce(inp, cases), ""]
    return "\n".join(out)
