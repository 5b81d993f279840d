"""The one way in to a stored run's result document: ``result_of`` gives it as the typed ``ResultDocument``.

A run's document is stored in two parts, each number once: the ``runs.document`` column holds the document without
its cases' samples (``stored_form``), and each case's samples are one row of ``case_samples`` (migration 0008).
``result_of`` puts the two together and validates the result once per process: a stored document never changes, so
the model is kept, by run id, for the ``KEPT_RESULTS`` most recently used runs (a 100-case document holds some 5 MB
as models). The models are shared by every caller: read them, never change them.

A stored document that its model refuses (edited in the database, or stored before the model changed) raises
``StoredDocumentInvalid`` naming the run and the first offending fields, never a bare validation error.

``Kept`` is the cache itself, which ``attnprof.server.comparisons.documents`` uses for the stored comparison documents.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from typing import Any, Final, Generic, TypeVar

from pydantic import ValidationError
from sqlalchemy.orm import Session

from attnprof.core.documents import Case, ResultDocument, parse_result
from attnprof.core.errors import DocumentError
from attnprof.server.errors import NotFound, StoredDocumentInvalid
from attnprof.server.runs import repository
from attnprof.server.runs.models import Run

KEPT_RESULTS: Final = 8
# What the ``runs.document`` column leaves out: the samples, whose one copy is ``case_samples``.
_SAMPLES: Final[Any] = {"cases": {"__all__": {"latency_us": {"samples"}}}}

D = TypeVar("D")


class Kept(Generic[D]):
    """Validated documents by id, the most recently used ``size`` of them; safe to share between threads (the server
    answers requests from a pool of them)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._docs: OrderedDict[str, D] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> D | None:
        with self._lock:
            found = self._docs.get(key)
            if found is not None:
                self._docs.move_to_end(key)
            return found

    def put(self, key: str, doc: D) -> None:
        with self._lock:
            self._docs[key] = doc
            self._docs.move_to_end(key)
            while len(self._docs) > self.size:
                self._docs.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._docs.clear()

    def __len__(self) -> int:
        return len(self._docs)


results: Kept[ResultDocument] = Kept(KEPT_RESULTS)


def stored_form(document: ResultDocument) -> dict[str, Any]:
    """What the ``runs.document`` column holds of ``document``: all of it but the samples (JSON values)."""
    return document.model_dump(mode="json", by_alias=True, exclude=_SAMPLES)


def remember(run_id: str, document: ResultDocument) -> None:
    """Keep ``document``, just validated and stored as run ``run_id``, so that reading it back validates nothing."""
    results.put(run_id, document)


def result_of(session: Session, run: Run | str) -> ResultDocument:
    """The result document of stored run ``run`` (a row, or its id), validated once per process.

    Raises ``NotFound`` for an unknown run id, ``StoredDocumentInvalid`` for a stored document its model refuses."""
    run_id = run if isinstance(run, str) else run.id
    found = results.get(run_id)
    if found is not None:
        return found
    stored: Any
    if isinstance(run, str):
        row = repository.document_of(session, run_id)
        if row is None:
            raise NotFound(f"no run {run_id}")
        stored = row[0]
    else:
        stored = run.document  # loaded here when the query deferred it
    doc = _validated(run_id, _with_samples(stored, repository.samples_of_run(session, run_id)))
    results.put(run_id, doc)
    return doc


def cases_of(session: Session, run_id: str, case_ids: Collection[str]) -> dict[str, Case]:
    """The cases ``case_ids`` of stored run ``run_id`` (those it has), by id: from its kept document, else only those
    cases are read and validated (a comparison page names the few cases that moved of a hundred)."""
    kept = results.get(run_id)
    if kept is not None:
        wanted = set(case_ids)
        return {c.id: c for c in kept.cases if c.id in wanted}
    stored = repository.document_cases(session, run_id, case_ids)
    samples_us = repository.samples_of_run(session, run_id, case_ids)
    out: dict[str, Case] = {}
    for i, raw in enumerate(_with_samples({"cases": stored}, samples_us)["cases"]):
        try:
            case = Case.model_validate(raw)
        except ValidationError as exc:
            where = raw.get("id", f"#{i}") if isinstance(raw, dict) else f"#{i}"
            detail = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
            raise StoredDocumentInvalid(
                f"the stored result document of run {run_id}: case {where} is invalid: {detail}"
            ) from exc
        out[case.id] = case
    return out


def _validated(run_id: str, data: Any) -> ResultDocument:
    try:
        return parse_result(data, source=f"the stored result document of run {run_id}")
    except DocumentError as exc:
        raise StoredDocumentInvalid(str(exc)) from exc


def _with_samples(stored: Any, samples_us: Mapping[str, list[float]]) -> Any:
    """``stored`` (the column's JSON) with each case's samples put back, in new containers (the row's value is left
    as it was read). Anything not shaped like a document is left for the validation to name."""
    if not isinstance(stored, dict) or not isinstance(stored.get("cases"), list):
        return stored
    cases = []
    for case in stored["cases"]:
        latency = case.get("latency_us") if isinstance(case, dict) else None
        if isinstance(latency, dict):
            case = {**case, "latency_us": {**latency, "samples": samples_us.get(str(case.get("id")), [])}}
        cases.append(case)
    return {**stored, "cases": cases}
