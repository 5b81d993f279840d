"""Alerts worth reading: one alert per step, with its interval and units, acknowledgements, and a webhook outbox.

An alert was keyed on the run that revealed it, so one step found again from a neighbouring run was a second alert.
It is now keyed on the step: the pair of runs the change lies between (``before_run_id``, the last run of the old
level, and ``run_id``, the first of the new one), unique per project, testbed, case and metric (``uq_alerts_step``).
The upgrade fills ``before_run_id`` of the stored alerts with the run before ``run_id`` on its branch and testbed
key (an alert without one, at the very start of a history, cannot be a step and is dropped). The new columns: the
unit, each level's spread and run count, the interval of the change, the minimum effect it passed, when detection
last saw it, the acknowledgement (when, who, a note) and the webhook's outbox (``notify_*``); and
``alert_webhooks``, one per project. The downgrade drops them, keeps one alert per (run, case, metric) as the old
key wants, and restores the old key.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_OLD_KEY = "uq_alerts_project_id_testbed_id_case_id_metric_run_id"
_STEP_KEY = "uq_alerts_step"
_NEW_COLUMNS = (
    "before_run_id",
    "unit",
    "before_sd",
    "after_sd",
    "before_runs",
    "after_runs",
    "ci_low",
    "ci_high",
    "min_effect",
    "updated_at",
    "acknowledged_at",
    "acknowledged_by",
    "acknowledged_note",
    "notify_due_at",
    "notify_attempts",
    "notified_at",
    "notify_error",
)


def _columns() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("before_run_id", sa.String(length=36), nullable=True, comment="last run of the old level"),
        sa.Column("unit", sa.String(length=16), nullable=False, server_default="us"),
        sa.Column("before_sd", sa.Float(), nullable=True),
        sa.Column("after_sd", sa.Float(), nullable=True),
        sa.Column("before_runs", sa.Integer(), nullable=True),
        sa.Column("after_runs", sa.Integer(), nullable=True),
        sa.Column("ci_low", sa.Float(), nullable=True),
        sa.Column("ci_high", sa.Float(), nullable=True),
        sa.Column("min_effect", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acknowledged_by", sa.String(length=300), nullable=True),
        sa.Column("acknowledged_note", sa.Text(), nullable=True),
        sa.Column("notify_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notify_attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("notified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notify_error", sa.String(length=500), nullable=True),
    )


# The run before each alert's run on the same branch and testbed key: the last run of the old level.
_FILL_BEFORE = """
UPDATE alerts SET before_run_id = (
    SELECT prev.id FROM runs AS cur JOIN runs AS prev
      ON prev.project_id = cur.project_id AND prev.testbed_key = cur.testbed_key AND prev.branch = cur.branch
     AND prev.created_at < cur.created_at
    WHERE cur.id = alerts.run_id
    ORDER BY prev.created_at DESC, prev.id DESC
    LIMIT 1
)
"""


def upgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        for column in _columns():
            batch.add_column(column)
    op.execute(_FILL_BEFORE)
    op.execute("DELETE FROM alerts WHERE before_run_id IS NULL")
    with op.batch_alter_table("alerts") as batch:
        batch.alter_column("before_run_id", existing_type=sa.String(length=36), nullable=False)
        batch.drop_constraint(_OLD_KEY, type_="unique")
        batch.create_unique_constraint(
            _STEP_KEY, ["project_id", "testbed_id", "case_id", "metric", "before_run_id", "run_id"]
        )
        batch.create_foreign_key("fk_alerts_before_run_id_runs", "runs", ["before_run_id"], ["id"], ondelete="CASCADE")
    op.create_index("ix_alerts_notify_due", "alerts", ["notify_due_at"], unique=False)
    op.create_table(
        "alert_webhooks",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("secret", sa.String(length=200), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=300), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_alert_webhooks_project_id_projects"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("project_id", name=op.f("pk_alert_webhooks")),
    )


def downgrade() -> None:
    op.drop_table("alert_webhooks")
    op.drop_index("ix_alerts_notify_due", table_name="alerts")
    # The old key allows one alert per (run, case, metric): keep the first of any that share one.
    op.execute(
        "DELETE FROM alerts WHERE id NOT IN (SELECT min(id) FROM alerts "
        "GROUP BY project_id, testbed_id, case_id, metric, run_id)"
    )
    with op.batch_alter_table("alerts") as batch:
        batch.drop_constraint("fk_alerts_before_run_id_runs", type_="foreignkey")
        batch.drop_constraint(_STEP_KEY, type_="unique")
        for name in reversed(_NEW_COLUMNS):
            batch.drop_column(name)
        batch.create_unique_constraint(_OLD_KEY, ["project_id", "testbed_id", "case_id", "metric", "run_id"])
