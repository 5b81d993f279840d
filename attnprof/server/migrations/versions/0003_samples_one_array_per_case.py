"""Samples as one array per case (``case_samples``) instead of one row per sample (``samples``).

Measured on the 100-case upload (bench/reports/service-load.md): its ~22,000 sample rows took 0.17-0.25 s to
write with a binary COPY, ~0.11 s of it the foreign-key check of every row against ``run_cases``; at 10,000 runs
the table held 10 million rows, each with a 24-byte tuple header and an index entry for an 8-byte value. Nothing
queries single samples: they are read a case at a time. Upgrading and downgrading both carry the data across.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 01:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_RUN_CASE_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    op.create_table(
        "case_samples",
        sa.Column("run_case_id", _RUN_CASE_ID, nullable=False),
        sa.Column("values_us", sa.JSON().with_variant(postgresql.ARRAY(sa.Float()), "postgresql"), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_case_id"], ["run_cases.id"], name=op.f("fk_case_samples_run_case_id_run_cases"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_case_id", name=op.f("pk_case_samples")),
    )
    if _postgres():
        op.execute(
            'INSERT INTO case_samples (run_case_id, values_us) SELECT run_case_id, array_agg(value_us ORDER BY "index")'
            " FROM samples GROUP BY run_case_id"
        )
    else:
        # json_group_array keeps the order of the rows it is given.
        op.execute(
            "INSERT INTO case_samples (run_case_id, values_us) SELECT run_case_id, json_group_array(value_us)"
            ' FROM (SELECT run_case_id, value_us FROM samples ORDER BY run_case_id, "index") GROUP BY run_case_id'
        )
    op.drop_table("samples")


def downgrade() -> None:
    op.create_table(
        "samples",
        sa.Column("run_case_id", _RUN_CASE_ID, nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("value_us", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_case_id"], ["run_cases.id"], name=op.f("fk_samples_run_case_id_run_cases"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_case_id", "index", name=op.f("pk_samples")),
    )
    if _postgres():
        op.execute(
            'INSERT INTO samples (run_case_id, "index", value_us) SELECT s.run_case_id, (u.n - 1)::integer, u.v'
            " FROM case_samples AS s, unnest(s.values_us) WITH ORDINALITY AS u(v, n)"
        )
    else:
        op.execute(
            'INSERT INTO samples (run_case_id, "index", value_us) SELECT s.run_case_id, CAST(j.key AS INTEGER), j.value'
            " FROM case_samples AS s, json_each(s.values_us) AS j"
        )
    op.drop_table("case_samples")
