"""GitHub feedback owed by a job: when it is next due, and how many deliveries failed so far.

A job whose commit status or pull-request comment could not be delivered keeps ``feedback_due_at`` set; the
sweep (``jobs.sweep``) delivers it again from the stored job and comparison when it is due, with backoff, until
``feedback_attempts`` reaches the configured maximum. The index serves the sweep's ``feedback_due_at <= now``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 01:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column(
            "feedback_due_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="GitHub feedback is owed from this time (null: nothing owed)",
        ),
    )
    op.add_column(
        "jobs",
        sa.Column(
            "feedback_attempts",
            sa.Integer(),
            nullable=False,
            server_default="0",
            comment="failed deliveries of the feedback now owed",
        ),
    )
    op.create_index("ix_jobs_feedback_due_at", "jobs", ["feedback_due_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_jobs_feedback_due_at", table_name="jobs")
    op.drop_column("jobs", "feedback_attempts")
    op.drop_column("jobs", "feedback_due_at")
