"""Indexes for the trend of a case over every testbed, and for a testbed key's history on a branch.

Measured on 10,000 runs (bench/reports/service-load.md): a trend without a testbed read every case row of the
project (a parallel sequential scan, ~40 ms), and the default-branch history of a testbed key (the baseline when
no ancestor has runs, the noise floor, the change-point history) scanned the runs table (~5 ms, growing with it),
as neither existing index leads with what those queries filter on.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 00:10:00
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_run_cases_trend_all_testbeds", "run_cases", ["project_id", "branch", "case_id", "created_at"], unique=False
    )
    op.create_index("ix_runs_key_history", "runs", ["project_id", "testbed_key", "branch", "created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_runs_key_history", table_name="runs")
    op.drop_index("ix_run_cases_trend_all_testbeds", table_name="run_cases")
