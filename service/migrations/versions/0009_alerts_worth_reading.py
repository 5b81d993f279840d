"""Alerts worth reading: one alert per step, acknowledgements, and a webhook outbox.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 13:00:00
"""

from __future__ import annotations

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
