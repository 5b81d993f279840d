"""Each number stored once: a run's samples leave its ``document`` column; ``case_samples`` keeps their one copy.

Every case's samples were in two places, ``runs.document`` (``cases[*].latency_us.samples``) and ``case_samples``
(one array per case, since 0003): about a fifth of a 100-case document's JSON. ``attnprof.server.runs.documents`` puts
them back when it reads a document; docs/findings.md#samples-stored-once records what that costs a read. The upgrade
drops ``latency_us.samples`` from every stored case (``case_samples`` already holds each case's non-empty samples: the
service has stored them there since 0001); the downgrade writes them back from ``case_samples`` (an empty list for a
case without a row there), so the column holds what the service stored before.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 12:00:00
"""

from __future__ import annotations

import json
from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_STRIP_POSTGRES = """
UPDATE runs SET document = jsonb_set(document, '{cases}', (
    SELECT COALESCE(jsonb_agg(c.value #- '{latency_us,samples}' ORDER BY c.n), '[]'::jsonb)
    FROM jsonb_array_elements(document->'cases') WITH ORDINALITY AS c(value, n)
))
WHERE jsonb_typeof(document->'cases') = 'array'
"""

_RESTORE_POSTGRES = """
UPDATE runs AS r SET document = jsonb_set(r.document, '{cases}', (
    SELECT COALESCE(jsonb_agg(
        CASE WHEN jsonb_typeof(c.value->'latency_us') = 'object'
        THEN jsonb_set(c.value, '{latency_us,samples}', COALESCE(to_jsonb(s.values_us), '[]'::jsonb))
        ELSE c.value END
        ORDER BY c.n), '[]'::jsonb)
    FROM jsonb_array_elements(r.document->'cases') WITH ORDINALITY AS c(value, n)
    LEFT JOIN run_cases AS rc ON rc.run_id = r.id AND rc.case_id = c.value->>'id'
    LEFT JOIN case_samples AS s ON s.run_case_id = rc.id
))
WHERE jsonb_typeof(r.document->'cases') = 'array'
"""


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    if _postgres():
        op.execute(_STRIP_POSTGRES)
        return
    _rewrite_sqlite(lambda _run_id: None)


def downgrade() -> None:
    if _postgres():
        op.execute(_RESTORE_POSTGRES)
        return
    bind = op.get_bind()

    def samples_of(run_id: str) -> dict[str, list[float]]:
        rows = bind.execute(
            sa.text(
                "SELECT rc.case_id, s.values_us FROM run_cases AS rc JOIN case_samples AS s ON s.run_case_id = rc.id"
                " WHERE rc.run_id = :run_id"
            ),
            {"run_id": run_id},
        )
        return {case_id: json.loads(values) for case_id, values in rows}

    _rewrite_sqlite(samples_of)


def _rewrite_sqlite(samples_of: Callable[[str], dict[str, list[float]] | None]) -> None:
    """Each run's document, its cases' samples dropped (``samples_of(run_id)`` None) or put back from what it gives
    (the embedded mode's SQLite holds few runs: one at a time in Python)."""
    bind = op.get_bind()
    run_ids = [r for (r,) in bind.execute(sa.text("SELECT id FROM runs"))]
    for run_id in run_ids:
        stored = bind.execute(sa.text("SELECT document FROM runs WHERE id = :id"), {"id": run_id}).scalar_one()
        document = json.loads(stored)
        samples = samples_of(run_id)
        cases = document.get("cases") if isinstance(document, dict) else None
        for case in cases if isinstance(cases, list) else []:
            latency = case.get("latency_us") if isinstance(case, dict) else None
            if not isinstance(latency, dict):
                continue
            if samples is None:
                latency.pop("samples", None)
            else:
                latency["samples"] = samples.get(case.get("id"), [])
        bind.execute(
            sa.text("UPDATE runs SET document = :document WHERE id = :id"),
            {"document": json.dumps(document), "id": run_id},
        )
