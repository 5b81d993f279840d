"""Bisections: from an alert's step to the commit that made it (docs/bisection.md).

- ``bisections``: one per step of the default branch that alerts found (the alerts of the step point at it), or
  per request (API, dashboard, a ``/attnprof bisect`` comment); the range searched, the step, the trees fetched,
  the outcome, and the pull-request comment owed for a confirmed culprit.
- ``bisection_probes``: each paired job a bisection ran, once per pair (``uq_probe_pair``), with its outcome.
- ``alerts.bisection_id`` and ``alerts.culprit``: the bisection of an alert's step, and the commit it confirmed.
- ``jobs.background``: a bisection's probe, offered only while no other job waits on its testbed. A constant
  default: ``ALTER TABLE ... ADD COLUMN`` without a rewrite.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# JSONB on Postgres, JSON text on SQLite (as attnprof.server.db.JSONType).
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column(
            "background",
            sa.Boolean(),
            server_default=sa.text("false"),
            nullable=False,
            comment="a bisection's probe: offered only while no other job waits on its testbed (docs/bisection.md)",
        ),
    )
    op.create_table(
        "bisections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("testbed_id", sa.Integer(), nullable=False),
        sa.Column(
            "before_run_id", sa.String(length=36), nullable=True, comment="the step's last good run (null: requested)"
        ),
        sa.Column("run_id", sa.String(length=36), nullable=True, comment="the step's first bad run (null: requested)"),
        sa.Column("repo", sa.String(length=200), nullable=False),
        sa.Column("good", sa.String(length=64), nullable=False, comment="the last commit known good"),
        sa.Column("bad", sa.String(length=64), nullable=False, comment="the first commit known bad"),
        sa.Column("spec", sa.Text(), nullable=False, comment="the suite TOML each probe runs"),
        sa.Column("suite_name", sa.String(length=200), nullable=False),
        sa.Column("suite_path", sa.String(length=500), nullable=True),
        sa.Column("cases", JSON, nullable=False, comment="the case ids that stepped"),
        sa.Column("effect", sa.Float(), nullable=True, comment="the step: bad / good - 1 of the latency"),
        sa.Column("low", sa.Float(), nullable=True, comment="the step's interval, low end"),
        sa.Column("high", sa.Float(), nullable=True, comment="the step's interval, high end"),
        sa.Column(
            "commits",
            JSON,
            nullable=False,
            comment="the range searched now, oldest first: [0] good, [-1] bad (empty: not read yet)",
        ),
        sa.Column(
            "merges",
            JSON,
            nullable=False,
            comment="merge commits found to hold the step, each searched through its second parent",
        ),
        sa.Column("trees", JSON, nullable=False, comment="commit to the sha256 of its source bundle, fetched once"),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("culprit", sa.String(length=64), nullable=True),
        sa.Column("culprit_pr", sa.Integer(), nullable=True, comment="the pull request the culprit came from"),
        sa.Column("summary", sa.Text(), nullable=True, comment="what it found, in words"),
        sa.Column(
            "environment",
            JSON,
            nullable=True,
            comment="the software that differs between the step's two runs: {name: [before, after]}",
        ),
        sa.Column("requested_by", sa.String(length=300), nullable=False),
        sa.Column("requested_via", sa.String(length=16), nullable=False, comment="alert, api, dashboard or comment"),
        sa.Column("pr", sa.Integer(), nullable=True, comment="the pull request a /attnprof bisect comment came from"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "comment_due_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="a pull-request comment naming the culprit is owed from this time",
        ),
        sa.Column("comment_attempts", sa.Integer(), nullable=False),
        sa.Column("comment_note", sa.String(length=500), nullable=True, comment="why the last comment delivery failed"),
        sa.ForeignKeyConstraint(
            ["before_run_id"], ["runs.id"], name=op.f("fk_bisections_before_run_id_runs"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_bisections_run_id_runs"), ondelete="SET NULL"),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_bisections_project_id_projects"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["testbed_id"], ["testbeds.id"], name=op.f("fk_bisections_testbed_id_testbeds")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bisections")),
    )
    op.create_index("ix_bisections_project", "bisections", ["project_id", "created_at"], unique=False)
    op.create_index("ix_bisections_status", "bisections", ["status"], unique=False)
    op.create_table(
        "bisection_probes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("bisection_id", sa.Integer(), nullable=False),
        sa.Column("good", sa.String(length=64), nullable=False),
        sa.Column("candidate", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=36), nullable=True),
        sa.Column("outcome", sa.String(length=8), nullable=True, comment="bad, good or skip (null: its job runs)"),
        sa.Column("effect", sa.Float(), nullable=True),
        sa.Column("low", sa.Float(), nullable=True),
        sa.Column("high", sa.Float(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["bisection_id"],
            ["bisections.id"],
            name=op.f("fk_bisection_probes_bisection_id_bisections"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_bisection_probes_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bisection_probes")),
        sa.UniqueConstraint("bisection_id", "good", "candidate", name="uq_probe_pair"),
    )
    op.create_index(op.f("ix_bisection_probes_bisection_id"), "bisection_probes", ["bisection_id"], unique=False)
    op.create_index(op.f("ix_bisection_probes_job_id"), "bisection_probes", ["job_id"], unique=False)
    op.add_column(
        "alerts",
        sa.Column(
            "bisection_id",
            sa.Integer(),
            nullable=True,
            comment="the bisection that searches its step's commits (docs/bisection.md)",
        ),
    )
    op.add_column(
        "alerts",
        sa.Column(
            "culprit",
            sa.String(length=64),
            nullable=True,
            comment="the commit its bisection confirmed made the step (the webhook is owed it again)",
        ),
    )
    # SQLite (the embedded mode) alters no constraint short of copying the table: there the column goes without it.
    if op.get_bind().dialect.name != "sqlite":
        op.create_foreign_key(
            op.f("fk_alerts_bisection_id_bisections"),
            "alerts",
            "bisections",
            ["bisection_id"],
            ["id"],
            ondelete="SET NULL",
        )
    op.create_index(op.f("ix_alerts_bisection_id"), "alerts", ["bisection_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_alerts_bisection_id"), table_name="alerts")
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint(op.f("fk_alerts_bisection_id_bisections"), "alerts", type_="foreignkey")
    op.drop_column("alerts", "culprit")
    op.drop_column("alerts", "bisection_id")
    op.drop_index(op.f("ix_bisection_probes_job_id"), table_name="bisection_probes")
    op.drop_index(op.f("ix_bisection_probes_bisection_id"), table_name="bisection_probes")
    op.drop_table("bisection_probes")
    op.drop_index("ix_bisections_status", table_name="bisections")
    op.drop_index("ix_bisections_project", table_name="bisections")
    op.drop_table("bisections")
    op.drop_column("jobs", "background")
