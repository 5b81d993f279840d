"""A matrix of testbeds: one submission that named several testbeds became one job per testbed, linked by
``jobs.matrix_id`` (``service.create_matrix``). Each job is queued, claimed, compared with its own testbed's baseline
and given its own verdict exactly as a job alone is; this module reads them together: which have ended, the worst
verdict, and, once every one has ended, the findings that are not portable from one testbed to another
(``attnprof.core.analysis.crossbed``). Nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from attnprof.core.analysis.crossbed import NotPortable, not_portable
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.server.comparisons import documents as comparison_documents
from attnprof.server.comparisons import repository as comparisons
from attnprof.server.errors import NotFound
from attnprof.server.jobs import repository
from attnprof.server.jobs.models import FINAL, Job
from attnprof.server.testbeds import repository as testbed_rows

_WORST = ("fail", "warn", "pass")


@dataclass(frozen=True)
class Member:
    """One job of a matrix, with its testbed's name and the comparison that gave its verdict (None: none yet, or it
    ended without one)."""

    testbed: str
    job: Job
    comparison: ComparisonDocument | None
    comparison_id: str | None


@dataclass(frozen=True)
class Matrix:
    matrix_id: str
    members: list[Member]
    """By testbed name."""

    @property
    def complete(self) -> bool:
        """Whether every job has ended (a verdict, a failure, a timeout or a cancel)."""
        return all(m.job.status in FINAL for m in self.members)

    @property
    def verdict(self) -> str | None:
        """The worst verdict of its jobs once every one has one (fail, then warn, then pass); None before, or when
        one ended without a verdict."""
        verdicts = {m.job.verdict for m in self.members}
        if not self.complete or None in verdicts:
            return None
        return next(v for v in _WORST if v in verdicts)

    @property
    def not_portable(self) -> list[NotPortable]:
        """The findings that differ across its testbeds beyond their intervals, once every job has ended (before,
        a testbed still running could change the answer: nothing is said)."""
        if not self.complete:
            return []
        return not_portable({m.testbed: m.comparison for m in self.members if m.comparison is not None})


def _testbed(session: Session, job: Job) -> str:
    row = testbed_rows.get(session, job.testbed_id)
    return row.name if row else ""


def of(session: Session, matrix_id: str) -> Matrix:
    """The matrix ``matrix_id`` as stored now (``StoredDocumentInvalid`` when a stored comparison does not load)."""
    members = []
    for job in repository.of_matrix(session, matrix_id):
        found = comparisons.latest_for_run(session, job.run_id) if job.run_id and job.status == "done" else None
        doc = comparison_documents.comparison_of(found) if found is not None else None
        found_id = found.id if found is not None else None
        members.append(Member(testbed=_testbed(session, job), job=job, comparison=doc, comparison_id=found_id))
    members.sort(key=lambda m: m.testbed)
    return Matrix(matrix_id=matrix_id, members=members)


def of_job(session: Session, job: Job) -> Matrix:
    """The matrix ``job`` belongs to (404 for a job alone)."""
    if job.matrix_id is None:
        raise NotFound(f"job {job.id} is no matrix's: its submission named one testbed")
    return of(session, job.matrix_id)
