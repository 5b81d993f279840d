"""Jobs held by a worker are leases, and claiming one needs the secret its queue message carries.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 20:00:00
"""

from __future__ import annotations

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
