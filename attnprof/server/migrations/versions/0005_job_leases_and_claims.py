"""Jobs held by a worker are leases, and claiming one needs the secret its queue message carries.

- ``lease_expires_at``: a worker holding a job (``running``: a profile worker, renewed by its heartbeats;
  ``analyzing``: the analysis task, renewed from a thread while it works) holds it until then. The sweep
  (``jobs.sweep``) re-queues or resends what an expired lease held, from this record alone; the index serves
  its ``status = ... AND lease_expires_at < now``.
- ``claim_secret_sha256``: the sha256 of the one-time secret in the job's latest ``profile.run`` message. A claim
  must show the secret; the plain secret is only ever in the message.
- ``job_token_sha256``, ``job_token_expires_at``: the token a claim returned, bound to the job and its attempt;
  only it opens the job's bundle, heartbeat, result, failure and trace routes. Null once revoked.

Rows of jobs that a worker held when this ran get no lease: the sweep takes a missing lease for an expired one.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 20:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_COLUMNS = (
    (
        "lease_expires_at",
        sa.DateTime(timezone=True),
        "running or analyzing: the worker holding the job holds it until then (renewed while it works)",
    ),
    (
        "claim_secret_sha256",
        sa.String(length=64),
        "sha256 of the secret in the job's latest profile message (what a claim must show)",
    ),
    (
        "job_token_sha256",
        sa.String(length=64),
        "sha256 of the token of the attempt that claimed the job (null: revoked)",
    ),
    (
        "job_token_expires_at",
        sa.DateTime(timezone=True),
        "the job token works until then (null: for as long as its attempt runs)",
    ),
)


def upgrade() -> None:
    # Nullable columns without defaults: ALTER TABLE ... ADD COLUMN on both Postgres and SQLite, no table rewrite.
    for name, kind, comment in _COLUMNS:
        op.add_column("jobs", sa.Column(name, kind, nullable=True, comment=comment))
    op.create_index("ix_jobs_lease", "jobs", ["status", "lease_expires_at"], unique=False)


def downgrade() -> None:
    # The index first: SQLite drops no column that an index names.
    op.drop_index("ix_jobs_lease", table_name="jobs")
    for name, _kind, _comment in reversed(_COLUMNS):
        op.drop_column("jobs", name)
