"""Tokens can expire and be rotated; token creation, use from a new address and revocation are audited.

``tokens.expires_at`` (null: never) and ``tokens.last_address`` (the client address a token was last used from:
the request that sees another one writes an audit event, so unchanged use writes nothing); ``audit_events`` holds
the events, listed per project newest first (``ix_audit_events_listing``).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 20:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

ADDRESS_CHARS = 64


def upgrade() -> None:
    op.add_column(
        "tokens",
        sa.Column(
            "expires_at", sa.DateTime(timezone=True), nullable=True, comment="stops working from this time; null: never"
        ),
    )
    op.add_column(
        "tokens",
        sa.Column(
            "last_address",
            sa.String(length=ADDRESS_CHARS),
            nullable=True,
            comment="the client address it was last used from (an audit event when it changes)",
        ),
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("token_prefix", sa.String(length=16), nullable=True),
        sa.Column("project_id", sa.Integer(), nullable=True),
        sa.Column("testbed_id", sa.Integer(), nullable=True),
        sa.Column(
            "address",
            sa.String(length=ADDRESS_CHARS),
            nullable=True,
            comment="the client address of the request; null: the command line",
        ),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"], ["tokens.id"], name=op.f("fk_audit_events_token_id_tokens"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_audit_events_project_id_projects"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["testbed_id"], ["testbeds.id"], name=op.f("fk_audit_events_testbed_id_testbeds"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    op.create_index("ix_audit_events_listing", "audit_events", ["project_id", "created_at"], unique=False)
    op.create_index(op.f("ix_audit_events_token_id"), "audit_events", ["token_id"], unique=False)
    op.create_index(op.f("ix_audit_events_testbed_id"), "audit_events", ["testbed_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_audit_events_testbed_id"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_token_id"), table_name="audit_events")
    op.drop_index("ix_audit_events_listing", table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_column("tokens", "last_address")
    op.drop_column("tokens", "expires_at")
