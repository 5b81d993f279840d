"""The run page: environment, provenance, cases, each case's kernels and roofline, backends, accuracy, traces;
and the baseline actions on a run (pin, exclude, accept, and their removal) for a project admin."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Form, Path, Query
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup
from sqlalchemy.orm import Session

from attnprof.contract.links import PATHS
from attnprof.core.attribution.reconcile import case_reconciliation
from attnprof.core.attribution.sdpa_calls import call_words
from attnprof.core.documents import Achieved, Case, Kernel, Peaks, ResultDocument, RunInfo, SdpaCall, SuiteInfo
from attnprof.core.report import WORK_FROM, advice_lines, counter_class, peaks_origin
from attnprof.core.rounds import round_levels
from attnprof.server.baselines import service as baselines
from attnprof.server.baselines.models import BaselineRule
from attnprof.server.db import SessionDep
from attnprof.server.runs import documents
from attnprof.server.runs import repository as runs_repository
from attnprof.server.runs import service as runs
from attnprof.server.web import pull_repository, repository
from attnprof.server.web.dependencies import AdminFormDep, PageError, Viewer, ViewerDep, not_found
from attnprof.server.web.pages import figures, paired_view
from attnprof.server.web.render import environment, page

router = APIRouter(prefix="/ui/p/{project}", include_in_schema=False)

RunId = Annotated[str, Path(min_length=1, max_length=200)]
Kind = Literal["pin", "exclude", "accept"]
# ncu metrics shown beside each kernel, as (column, metric, unit); percentages are of peak sustained.
COUNTER_COLUMNS = (
    ("DRAM throughput", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%"),
    ("memory SOL", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "%"),
    ("SM throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%"),
    ("tensor pipe", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "%"),
)
ACHIEVED_OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DRAM_BYTES = ("dram__bytes_read.sum", "dram__bytes_write.sum")
# What a confirmation says after a baseline action, by the ``done`` query parameter (never echoed text).
DONE = {
    "pin": "Pinned: this run is now a baseline of its testbed key, whatever else is true.",
    "exclude": "Excluded: this run never serves as a baseline, nor in the noise history.",
    "accept": "Accepted as an intended change: this run is the baseline from now on; older runs stop serving.",
    "unpin": "Unpinned: the baseline is chosen from the history again.",
    "unexclude": "No longer excluded: this run may serve as a baseline again.",
    "unaccept": "No longer accepted: the history before this run serves again.",
}
RULE_WORDS = {
    "pin": "Pinned as baseline",
    "exclude": "Excluded from baselines",
    "accept": "Accepted as intended change",
}


def render_fragment(name: str, **context: Any) -> Markup:
    """A template rendered to HTML that another page includes as it is."""
    # Safe as markup: the template escapes what it interpolates.
    return Markup(environment().get_template(name).render(**context))


def run_href(viewer: Viewer, run_id: str) -> str:
    return PATHS.ui_run(viewer.project.name, run_id)


def dram_bytes_per_iter(kernel: Kernel) -> float | None:
    """DRAM bytes read and written per iteration from ncu's counters (one launch counted, times the launches)."""
    counters = kernel.counters or {}
    if any(name not in counters for name in DRAM_BYTES):
        return None
    return sum(counters[name] for name in DRAM_BYTES) * max(kernel.launches_per_iter or 1.0, 1.0)


def _kernel_view(k: Kernel) -> dict[str, Any]:
    counters = k.counters or {}
    achieved = counters.get(ACHIEVED_OCCUPANCY)
    return {
        "phase": k.phase,
        "key": k.key,
        "name": k.name,
        "op": k.op,
        "duration": k.duration_us,
        "share": k.share,
        "launches": k.launches_per_iter,
        "bound": k.bound,
        "counter_bound": counter_class(k) if k.counter_bound else None,
        "bandwidth_util": k.bandwidth_util,
        "compute_util": k.compute_util,
        "work_from": WORK_FROM.get(k.work_source or ""),
        "tflops": k.tflops,
        "gbps": k.gbps,
        "intensity": figures.kernel_intensity(k),
        "on_roofline": figures.on_roofline(k),
        "achieved_occupancy": None if achieved is None else achieved / 100.0,
        "theoretical_occupancy": k.theoretical_occupancy,
        "occupancy_limiter": k.occupancy_limiter,
        "registers": k.registers_per_thread,
        "shared_mem_bytes": k.shared_mem_bytes,
        "grid": k.grid,
        "block": k.block,
        "dram_bytes": dram_bytes_per_iter(k),
        "counters": [counters.get(metric) for _, metric, _ in COUNTER_COLUMNS],
        "sm_clock_mhz": k.sm_clock_mhz,
    }


def _case_view(case: Case, peaks: Peaks, *, mode: str) -> dict[str, Any]:
    kernels = [_kernel_view(k) for k in case.kernels]
    return {
        "id": case.id,
        "anchor": figures.case_anchor(case.id),
        "status": case.status,
        "error": case.error,
        "suspect": case.suspect,
        "backend_requested": case.backend_requested,
        "backend_used": case.backend_used,
        "latency": case.latency_us,
        "achieved": case.achieved or Achieved(),
        "accuracy": case.accuracy,
        "work": case.work,
        "params": case.params,
        "trace": case.trace,
        "kernels": kernels,
        "with_counters": any(k.counters for k in case.kernels),
        "with_clock": any(k.sm_clock_mhz for k in case.kernels),
        "sm_clock_mhz": case.sm_clock_mhz,
        "roofline": figures.roofline(case, peaks),
        "off_roofline": [k for k in kernels if not k["on_roofline"]],
        "reconciliation": case_reconciliation(case, mode),
        "levels": levels.describe() if (levels := round_levels(case.latency_us)) is not None else None,
        "sdpa_calls": [_sdpa_view(call) for call in case.sdpa_calls or []],
        "advice": advice_lines(case, limit=5),
        "advice_tried": len(case.advice or []),
    }


def _sdpa_view(call: SdpaCall) -> dict[str, Any]:
    """One SDPA call of a case: what it passed, the backends PyTorch would take, and its reasons for the others."""
    return {
        "call": call_words(call),
        "eligible": call.eligible,
        "refused": sorted((call.refused or {}).items()),
        "not_asked": call.not_asked,
    }


def _rules_by_kind(rules: list[BaselineRule]) -> dict[str, BaselineRule]:
    return {r.kind: r for r in rules}


@dataclass(frozen=True)
class RenderedRun:
    """What the run page draws from the stored document alone, rendered: the lead chart with the environment and
    provenance, and the cases with their kernels, rooflines, backends and accuracy; plus the small parts of the
    document that the rest of the page reads."""

    head: Markup
    cases: Markup
    doc_run: RunInfo
    suite: SuiteInfo
    traces: list[tuple[str, str]]


class RenderedRuns:
    """Rendered documents of the most recently viewed runs, by run id. A stored document never changes, and a
    100-case run renders to a megabyte of HTML that takes some 100 ms of CPU to build; eight runs hold some 10 MB."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._runs: OrderedDict[tuple[str | None, ...], RenderedRun] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str | None, ...]) -> RenderedRun | None:
        with self._lock:
            found = self._runs.get(key)
            if found is not None:
                self._runs.move_to_end(key)
            return found

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()

    def put(self, key: tuple[str | None, ...], rendered: RenderedRun) -> None:
        with self._lock:
            self._runs[key] = rendered
            while len(self._runs) > self.size:
                self._runs.popitem(last=False)


rendered_runs = RenderedRuns(size=8)


def _render_document(viewer: Viewer, row: Any, doc: ResultDocument, href: str) -> RenderedRun:
    env = doc.environment
    cases = [_case_view(c, env.peaks, mode=doc.run.mode) for c in doc.cases]
    common = {
        "viewer_project": viewer.project.name,
        "run": row,
        "doc_run": doc.run,
        "env": env,
        "peaks_origin": peaks_origin(env.peaks),
        "href": href,
    }
    head = render_fragment("_run_head.html", latency_chart=figures.case_latency(doc.cases, href), **common)
    body = render_fragment(
        "_run_cases.html",
        cases=cases,
        counter_columns=[(label, unit) for label, _, unit in COUNTER_COLUMNS],
        backend_chart=figures.backend_comparison(doc.cases),
        accuracy=[c for c in cases if c["accuracy"]],
        **common,
    )
    traces = [(c.id, c.trace) for c in doc.cases if c.trace]
    return RenderedRun(head=head, cases=body, doc_run=doc.run, suite=doc.suite, traces=traces)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(
    viewer: ViewerDep,
    session: SessionDep,
    run_id: RunId,
    done: Annotated[str | None, Query(max_length=20)] = None,
) -> HTMLResponse:
    row = repository.run_page_row(session, viewer.project.id, run_id)
    if row is None:
        raise not_found(f"no run {run_id} in project {viewer.project.name}")
    href = run_href(viewer, row.id)
    # The job link and the project's name are the only parts of the rendered document that come from elsewhere.
    key = (row.id, row.job_id, viewer.project.name)
    rendered = rendered_runs.get(key)
    if rendered is None:
        rendered = _render_document(viewer, row, documents.result_of(session, row.id), href)
        rendered_runs.put(key, rendered)
    stored_traces = set(runs_repository.list_traces(session, row.id))
    # a paired job's run has two comparisons: the paired one (the verdict's) first, the stored-history one beside it
    compared = repository.comparisons_beside(session, viewer.project.id, row.id)
    return page(
        "run.html",
        viewer=viewer,
        run=row,
        doc_run=rendered.doc_run,
        suite=rendered.suite,
        head_html=rendered.head,
        cases_html=rendered.cases,
        traces=[(case_id, name, name in stored_traces) for case_id, name in rendered.traces],
        comparison=compared[0] if compared else None,
        beside=compared[1] if len(compared) > 1 else None,
        mode_words=paired_view.MODE_WORDS,
        feedback=None if row.job_id else pull_repository.run_feedback(session, row.id),
        rules=_rules_by_kind(repository.rules_of_runs(session, viewer.project.id, [row.id])),
        rule_words=RULE_WORDS,
        rule_action=partial(PATHS.ui_run_rule, viewer.project.name, row.id),
        href=href,
        done=DONE.get(done or ""),
    )


@router.get("/runs/{run_id}/traces/{name}")
def trace(
    viewer: ViewerDep, session: SessionDep, run_id: RunId, name: Annotated[str, Path(min_length=1, max_length=500)]
) -> Response:
    """The stored gzip Chrome trace, as a download (Perfetto and chrome://tracing open it as it is)."""
    run = repository.run_without_document(session, viewer.project.id, run_id)
    if run is None:
        raise not_found(f"no run {run_id} in project {viewer.project.name}")
    data = runs.get_trace(session, run=run, name=name)
    ascii_name = "".join(ch for ch in name if 32 <= ord(ch) < 127 and ch not in '"\\') or "trace.json.gz"
    return Response(
        data,
        media_type="application/gzip",
        headers={
            "Content-Disposition": f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}",
            "Cache-Control": "private, no-store",
        },
    )


def apply_rule(session: Session, viewer: Viewer, *, run_id: str, kind: str, reason: str, remove: bool) -> None:
    """Add or remove a baseline rule on a run of the viewer's project (an admin, checked by ``AdminFormDep``)."""
    if repository.run_without_document(session, viewer.project.id, run_id) is None:
        raise not_found(f"no run {run_id} in project {viewer.project.name}")
    if remove:
        baselines.remove_rule(session, project_id=viewer.project.id, kind=kind, run_id=run_id)
        return
    reason = reason.strip()
    if kind == "exclude" and not reason:
        raise PageError(422, "Invalid input", "reason: excluding a run from baselines needs a reason")
    baselines.add_rule(session, project_id=viewer.project.id, kind=kind, run_id=run_id, reason=reason or None)


@router.post("/runs/{run_id}/baselines/{kind}")
def add_rule(
    viewer: AdminFormDep,
    session: SessionDep,
    run_id: RunId,
    kind: Annotated[Kind, Path()],
    reason: Annotated[str, Form(max_length=2000)] = "",
) -> RedirectResponse:
    apply_rule(session, viewer, run_id=run_id, kind=kind, reason=reason, remove=False)
    return RedirectResponse(f"{run_href(viewer, run_id)}?done={kind}#baselines", status_code=303)


@router.post("/runs/{run_id}/baselines/{kind}/remove")
def remove_rule(
    viewer: AdminFormDep, session: SessionDep, run_id: RunId, kind: Annotated[Kind, Path()]
) -> RedirectResponse:
    apply_rule(session, viewer, run_id=run_id, kind=kind, reason="", remove=True)
    return RedirectResponse(f"{run_href(viewer, run_id)}?done=un{kind}#baselines", status_code=303)
