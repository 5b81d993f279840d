"""Host health (docs/service.md, "Host health").

- ``hosts``: each GPU (or CPU) of a testbed, as its workers name it without their process: its state (learning,
  healthy or quarantined), why, and when it last passed a canary;
- ``canaries``: each canary a profile worker ran on its host, its figures and clocks, its cost and the band it was
  judged against (the rule in words beside the numbers);
- ``host_notices``: a host's quarantine or release owed to a project's alert webhook;
- ``runs.host``, ``runs.host_note``: the host that measured a job's run, and why that host is in doubt (a run made
  between its last passing canary and a failing one serves no baseline);
- ``workers.host``: a worker's host, so that a quarantined host's workers are not counted live.

All new columns are nullable: rows from before have no host, serve baselines as before and count as live.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 23:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# JSONB on Postgres, JSON text on SQLite (as attnprof.server.db.JSONType).
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "canaries",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("testbed_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("worker", sa.String(length=200), nullable=False, comment="the worker process that ran it"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("device", sa.String(length=200), nullable=False),
        sa.Column("mode", sa.String(length=8), nullable=False),
        sa.Column("figures", JSON, nullable=False, comment="figure name to value (attnprof.core.measure.canary)"),
        sa.Column("clocks", JSON, nullable=False, comment="NVML's readings while it ran"),
        sa.Column("method", JSON, nullable=False, comment="how each figure was measured"),
        sa.Column("seconds", sa.Float(), nullable=False, comment="its wall time: what it cost the device"),
        sa.Column("state", sa.String(length=16), nullable=False, comment="learning, healthy or quarantined"),
        sa.Column("reasons", JSON, nullable=False, comment="why it failed"),
        sa.Column("band", JSON, nullable=False, comment="the band it was judged against: per figure, bound and rule"),
        sa.ForeignKeyConstraint(
            ["testbed_id"], ["testbeds.id"], name=op.f("fk_canaries_testbed_id_testbeds"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_canaries")),
    )
    op.create_index("ix_canaries_testbed", "canaries", ["testbed_id", "created_at"], unique=False)
    op.create_table(
        "host_notices",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("testbed_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False, comment="quarantined or released"),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("runs_marked", sa.Integer(), nullable=False, comment="this project's runs marked by it"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "notify_due_at", sa.DateTime(timezone=True), nullable=True, comment="the webhook is owed it from this time"
        ),
        sa.Column("notify_attempts", sa.Integer(), nullable=False),
        sa.Column("notified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notify_error", sa.String(length=500), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_host_notices_project_id_projects"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["testbed_id"], ["testbeds.id"], name=op.f("fk_host_notices_testbed_id_testbeds"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_host_notices")),
    )
    op.create_index("ix_host_notices_due", "host_notices", ["notify_due_at"], unique=False)
    op.create_table(
        "hosts",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("testbed_id", sa.Integer(), nullable=False),
        sa.Column(
            "name", sa.String(length=200), nullable=False, comment="host and GPU, as the workers on it name them"
        ),
        sa.Column("state", sa.String(length=16), nullable=False, comment="learning, healthy or quarantined"),
        sa.Column("reason", sa.Text(), nullable=True, comment="why it is quarantined: the figures outside the band"),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_canary_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_good_at", sa.DateTime(timezone=True), nullable=True, comment="its last canary inside the band"),
        sa.Column(
            "quarantined_at", sa.DateTime(timezone=True), nullable=True, comment="when its current quarantine began"
        ),
        sa.ForeignKeyConstraint(
            ["testbed_id"], ["testbeds.id"], name=op.f("fk_hosts_testbed_id_testbeds"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_hosts")),
        sa.UniqueConstraint("testbed_id", "name", name=op.f("uq_hosts_testbed_id_name")),
    )
    op.add_column(
        "runs",
        sa.Column(
            "host",
            sa.String(length=200),
            nullable=True,
            comment="the host whose worker measured it (a job's; null: an upload)",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "host_note",
            sa.Text(),
            nullable=True,
            comment="why its host is in doubt: it failed a canary after this run and before passing another; such a "
            'run serves no baseline (docs/service.md, "Host health")',
        ),
    )
    op.add_column(
        "workers",
        sa.Column(
            "host",
            sa.String(length=200),
            nullable=True,
            comment="its host (the name without the process): a quarantined host's workers are not live",
        ),
    )


def downgrade() -> None:
    op.drop_column("workers", "host")
    op.drop_column("runs", "host_note")
    op.drop_column("runs", "host")
    op.drop_table("hosts")
    op.drop_index("ix_host_notices_due", table_name="host_notices")
    op.drop_table("host_notices")
    op.drop_index("ix_canaries_testbed", table_name="canaries")
    op.drop_table("canaries")
