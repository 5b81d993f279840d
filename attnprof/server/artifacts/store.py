"""Content-addressed artifact storage behind a protocol: bytes in the database today, an object store later.

A store is used inside the caller's session and never commits: the artifact lands with the row that
refers to it, or not at all.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from attnprof.server.artifacts.models import Artifact
from attnprof.server.db import insert_for, utcnow


class ArtifactStore(Protocol):
    def put(self, session: Session, *, kind: str, data: bytes) -> str:
        """Store ``data`` (idempotent) and return its sha256."""
        ...

    def get(self, session: Session, sha256: str) -> bytes | None: ...


class DatabaseArtifactStore:
    """Artifacts as rows of ``artifacts`` (bytea on Postgres, BLOB on SQLite)."""

    def put(self, session: Session, *, kind: str, data: bytes) -> str:
        """One statement, ``INSERT ... ON CONFLICT DO NOTHING``: two requests storing the same bytes at once both
        succeed (the second waits for the first's row, then finds it there)."""
        digest = hashlib.sha256(data).hexdigest()
        row = {"sha256": digest, "kind": kind, "size_bytes": len(data), "data": data, "created_at": utcnow()}
        session.execute(insert_for(session)(Artifact).values(**row).on_conflict_do_nothing(index_elements=["sha256"]))
        return digest

    def get(self, session: Session, sha256: str) -> bytes | None:
        return session.scalars(select(Artifact.data).where(Artifact.sha256 == sha256)).first()


store: ArtifactStore = DatabaseArtifactStore()
