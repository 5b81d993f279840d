"""A matrix of testbeds for one change (docs/service.md, "A matrix of testbeds").

- ``jobs.matrix_id``: one submission that names several testbeds (``testbeds``, or the suite's ``[suite] testbeds``)
  becomes one job per testbed, each on its own testbed's queue with its own baseline; this id links them, so that the
  commit statuses, the one pull-request comment and the portability of what they found are read from the whole
  matrix. Null for a job alone, and for every job from before. Indexed: a matrix's jobs are read by it on every
  delivery of their feedback.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-08 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column(
            "matrix_id",
            sa.String(length=36),
            nullable=True,
            comment="the submission it came from when that named several testbeds, one job each (null: a job alone)",
        ),
    )
    op.create_index(op.f("ix_jobs_matrix_id"), "jobs", ["matrix_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_jobs_matrix_id"), table_name="jobs")
    op.drop_column("jobs", "matrix_id")
