"""GPU time accounted (docs/service.md, "GPU time").

- ``jobs.gpu_seconds``: the time profile workers held their device for the job, every attempt's claim to its end
  (a result, a failure, a lost lease's last heartbeat, a cancel), summed. A constant default: ``ALTER TABLE ... ADD
  COLUMN`` without a rewrite. Jobs from before count 0.
- ``projects.gpu_seconds_per_day``: an optional quota, set by the service's admin (``attnprof admin gpu-quota``):
  a project past it on a UTC day has its jobs wait (never dropped) until the next.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 18:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column(
            "gpu_seconds",
            sa.Float(),
            server_default=sa.text("0"),
            nullable=False,
            comment="the time profile workers held their device for it, every attempt's claim to its end, summed",
        ),
    )
    op.add_column(
        "projects",
        sa.Column(
            "gpu_seconds_per_day",
            sa.Float(),
            nullable=True,
            comment="device seconds its jobs may hold per UTC day; past it they wait for the next day (null: no quota)",
        ),
    )


def downgrade() -> None:
    op.drop_column("projects", "gpu_seconds_per_day")
    op.drop_column("jobs", "gpu_seconds")
