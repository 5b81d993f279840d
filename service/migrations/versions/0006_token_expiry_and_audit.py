"""Tokens can expire and be rotated; token creation, use from a new address and revocation are audited.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 20:00:00
"""

from __future__ import annotations

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
