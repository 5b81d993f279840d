"""Paired jobs (docs/architecture.md, "The paired job"): a job that carries its merge base's tree beside its own,
profiled interleaved.

- ``jobs.base_bundle_sha256``: the merge base's source bundle, an artifact like ``bundle_sha256`` (indexed for the
  retention sweep's orphan check, as 0011 indexed the bundle); ``jobs.paired``: the job is paired (kept once the
  sweep has deleted a finished job's bundles).
- ``paired_results``: per paired job, the attempt whose result was stored, its run (the head's), the base's result
  document and the paired document. Not in ``runs``: the base's samples never join a history, a trend or a baseline.
- ``comparisons.mode``: ``history`` (every comparison so far) or ``paired``.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# JSONB on Postgres, JSON text on SQLite (as attnprof.server.db.JSONType).
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # Nullable columns, or ones with a constant default: ALTER TABLE ... ADD COLUMN, no table rewrite.
    op.add_column(
        "jobs",
        sa.Column(
            "base_bundle_sha256",
            sa.String(length=64),
            nullable=True,
            comment="a paired job's second tree, the merge base's source (null: not a paired job)",
        ),
    )
    # SQLite (the embedded mode) alters no constraint short of copying the table: there the column goes without it.
    if op.get_bind().dialect.name != "sqlite":
        op.create_foreign_key(
            op.f("fk_jobs_base_bundle_sha256_artifacts"), "jobs", "artifacts", ["base_bundle_sha256"], ["sha256"]
        )
    op.add_column(
        "jobs",
        sa.Column(
            "paired",
            sa.Boolean(),
            nullable=False,
            server_default=sa.text("false"),
            comment='profiled with its merge base, interleaved (docs/architecture.md, "The paired job")',
        ),
    )
    op.create_index("ix_jobs_base_bundle_sha256", "jobs", ["base_bundle_sha256"], unique=False)
    op.add_column(
        "comparisons",
        sa.Column(
            "mode",
            sa.String(length=8),
            nullable=False,
            server_default="history",
            comment="history: against stored baseline runs; paired: a paired job's head against its base (the "
            "verdict's)",
        ),
    )
    op.create_table(
        "paired_results",
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False, comment="the attempt whose result this is (the run's)"),
        sa.Column("run_id", sa.String(length=36), nullable=False, comment="the head's run, stored with it"),
        sa.Column("base_document", JSON, nullable=False, comment="the base's attnprof.result/v1 document"),
        sa.Column("paired_document", JSON, nullable=False, comment="the attnprof.paired/v1 document"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_paired_results_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_paired_results_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_paired_results")),
    )
    op.create_index(op.f("ix_paired_results_run_id"), "paired_results", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_paired_results_run_id"), table_name="paired_results")
    op.drop_table("paired_results")
    op.drop_column("comparisons", "mode")
    op.drop_index("ix_jobs_base_bundle_sha256", table_name="jobs")
    if op.get_bind().dialect.name != "sqlite":  # SQLite's column has none (upgrade)
        op.drop_constraint(op.f("fk_jobs_base_bundle_sha256_artifacts"), "jobs", type_="foreignkey")
    op.drop_column("jobs", "paired")
    op.drop_column("jobs", "base_bundle_sha256")
