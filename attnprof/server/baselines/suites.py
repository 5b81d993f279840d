"""Which stored runs ran the candidate's suite. Baselines, the noise floor's history and the change points' history
are drawn from those runs only: a project profiles several suites on one testbed, and another suite's runs are no
history of this one's cases.

A run is of the candidate's suite when it carries the same suite name and shares at least one case id with it. The
case ids are matched in SQL (``repository.shares_a_case``), so a suite that replaced all of its cases finds no
history for them; the name keeps out another suite whose case ids happen to be the same (a bigger model's
``prefill[seq_q=2048]``), whose timings are not this suite's.

The name is only in the result document, which Postgres decompresses whole to read it (about 5 ms for a 100-case
document; the noise floor and change points would read 20 and 40 of them per analysis). A run's document never
changes, so the names are remembered here by run id, and the analysis tells the name of the run it holds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection

from sqlalchemy.orm import Session

from attnprof.server.runs import repository as runs
from attnprof.server.runs.models import Run


class _Names:
    """Suite names of stored runs by run id, the most recently used ``size`` (about 200 bytes each)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._names: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, run_id: str, name: str | None) -> None:
        with self._lock:
            self._names[run_id] = name
            self._names.move_to_end(run_id)
            while len(self._names) > self.size:
                self._names.popitem(last=False)

    def of(self, session: Session, run_ids: Collection[str]) -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        with self._lock:
            for run_id in run_ids:
                if run_id in self._names:
                    self._names.move_to_end(run_id)
                    found[run_id] = self._names[run_id]
        missing = [r for r in run_ids if r not in found]
        for run_id, name in runs.suite_names(session, missing):
            self.remember(run_id, name)
            found[run_id] = name
        return found


_names = _Names(size=10_000)


def remember(run_id: str, name: str) -> None:
    """Record that run ``run_id`` ran suite ``name`` (the analysis holds the candidate's document)."""
    _names.remember(run_id, name)


def name_of(session: Session, run_id: str) -> str | None:
    """The suite name of run ``run_id``."""
    return _names.of(session, [run_id]).get(run_id)


def keep(session: Session, suite: str | None, runs: list[Run]) -> list[Run]:
    """Those of ``runs`` that ran suite ``suite``, in their order."""
    names = _names.of(session, [r.id for r in runs])
    return [r for r in runs if suite is not None and names.get(r.id) == suite]


def first_of_suite(session: Session, suite: str | None, fetch: Callable[[int], list[Run]], limit: int) -> list[Run]:
    """The first ``limit`` runs of suite ``suite`` among what ``fetch(n)`` returns: the first ``n`` runs of a query
    that already keeps runs sharing a case with the candidate, so nearly all of them are of its suite. Asked again
    for four times as many while runs of another name took places and more may follow."""
    size = max(limit, 1)
    while True:
        found = fetch(size)
        kept = keep(session, suite, found)
        if len(kept) >= limit or len(found) < size:
            return kept[:limit]
        size *= 4
