"""The database is the queue: a dispatcher offers each testbed's queued jobs to its live workers, fairly.

- ``jobs.offered_at``: when the job's latest ``profile.run`` message was made. A queued job with none waits in the
  database; the dispatcher offers it (makes and sends its message) when its testbed has a live worker free, taking
  each time the job of the project with the fewest jobs running or offered there (``ix_jobs_waiting``,
  ``ix_jobs_offered``; the project served longest ago first among equals, ``ix_jobs_offers``).
- ``testbeds.dispatched_at``: the dispatcher's update of it is the lock that serialises the dispatchers of a
  testbed (a row lock on Postgres; SQLite serialises writers anyway).
- ``workers``: the profile workers that said they are alive, and when they last did.
- ``ix_jobs_queued_project`` counts a project's queued jobs against its limit; ``ix_jobs_open_pr`` finds the open
  jobs of a pull request's earlier commits, which a newer push cancels.

Queued jobs that have a claim secret were sent a message before this ran: they count as offered (since their
``updated_at``); the others wait for the dispatcher.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The predicates are the ones in attnprof/server/jobs/models.py, where the queries that use these indexes take them
# from.
_PARTIAL = (
    ("ix_jobs_waiting", ["testbed_id", "project_id", "created_at"], "status = 'queued' AND offered_at IS NULL"),
    ("ix_jobs_offered", ["testbed_id", "project_id"], "status = 'queued' AND offered_at IS NOT NULL"),
    ("ix_jobs_offers", ["testbed_id", "project_id", "offered_at"], "offered_at IS NOT NULL"),
    ("ix_jobs_queued_project", ["project_id"], "status = 'queued'"),
    ("ix_jobs_open_pr", ["project_id", "pr"], "pr IS NOT NULL AND status IN ('queued', 'running')"),
)


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column(
            "offered_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when the job's latest profile message was made; while queued, null: it waits for the dispatcher",
        ),
    )
    op.add_column(
        "testbeds",
        sa.Column(
            "dispatched_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when the dispatcher last ran for it (its update is the lock that serialises the dispatchers)",
        ),
    )
    op.create_table(
        "workers",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("testbed_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False, comment="host, process and GPU, as it claims jobs"),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["testbed_id"], ["testbeds.id"], name=op.f("fk_workers_testbed_id_testbeds"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
        sa.UniqueConstraint("testbed_id", "name", name=op.f("uq_workers_testbed_id_name")),
    )
    op.create_index("ix_workers_seen", "workers", ["testbed_id", "last_seen_at"], unique=False)
    op.execute("UPDATE jobs SET offered_at = updated_at WHERE status = 'queued' AND claim_secret_sha256 IS NOT NULL")
    for name, columns, where in _PARTIAL:
        op.create_index(
            name, "jobs", columns, unique=False, postgresql_where=sa.text(where), sqlite_where=sa.text(where)
        )


def downgrade() -> None:
    # The indexes first: SQLite drops no column that an index names.
    for name, _columns, _where in reversed(_PARTIAL):
        op.drop_index(name, table_name="jobs")
    op.drop_index("ix_workers_seen", table_name="workers")
    op.drop_table("workers")
    op.drop_column("testbeds", "dispatched_at")
    op.drop_column("jobs", "offered_at")
