"""The suite's path on a job, and GitHub feedback owed by an uploaded run; the pull-request indexes of the PR page.

- ``jobs.suite_path``: where the suite file lies in the repository, relative to its root, as the client sent it
  (null: an older client sent none). The job's page prints ``attnprof profile <suite_path>`` to reproduce it.
- ``runs.feedback_due_at``, ``runs.feedback_attempts``, ``runs.feedback_note``: the outbox of a run uploaded from a
  self-hosted runner (``job_id`` null) that names its repository and commit: its commit status and pull-request
  comment are owed from ``feedback_due_at``, as a job's are (migration 0004); ``feedback_note`` holds why the last
  delivery failed (a job keeps that in its ``reason``). ``ix_runs_feedback_due_at`` serves the sweep.
- ``ix_runs_pr`` and ``ix_jobs_pr``: a pull request's runs and jobs of a project, newest first (the PR page, and the
  counts of a pull request's runs on the overview and the jobs list).
- ``ix_runs_listing``: a project's runs, newest first (the runs page, and the uploads the overview's latest pull
  requests are read from; without it a project's whole history is sorted for each page).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_PR = "pr IS NOT NULL"


def upgrade() -> None:
    # Nullable columns, or one with a constant default: ALTER TABLE ... ADD COLUMN, no table rewrite.
    op.add_column(
        "jobs",
        sa.Column(
            "suite_path",
            sa.String(length=500),
            nullable=True,
            comment="the suite file's path relative to the repository's root, as submitted (null: not sent)",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "feedback_due_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="an upload's GitHub feedback is owed from this time (null: nothing owed)",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "feedback_attempts",
            sa.Integer(),
            nullable=False,
            server_default="0",
            comment="failed deliveries of the feedback now owed",
        ),
    )
    op.add_column(
        "runs",
        sa.Column("feedback_note", sa.Text(), nullable=True, comment="why the last delivery of its feedback failed"),
    )
    op.create_index("ix_runs_feedback_due_at", "runs", ["feedback_due_at"], unique=False)
    op.create_index("ix_runs_listing", "runs", ["project_id", "created_at"], unique=False)
    for table in ("runs", "jobs"):
        op.create_index(
            f"ix_{table}_pr",
            table,
            ["project_id", "pr", "created_at"],
            unique=False,
            postgresql_where=sa.text(_PR),
            sqlite_where=sa.text(_PR),
        )


def downgrade() -> None:
    # The indexes first: SQLite drops no column that an index names.
    for table in ("jobs", "runs"):
        op.drop_index(f"ix_{table}_pr", table_name=table)
    op.drop_index("ix_runs_listing", table_name="runs")
    op.drop_index("ix_runs_feedback_due_at", table_name="runs")
    op.drop_column("runs", "feedback_note")
    op.drop_column("runs", "feedback_attempts")
    op.drop_column("runs", "feedback_due_at")
    op.drop_column("jobs", "suite_path")
