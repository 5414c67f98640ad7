"""Reviews that notice each other: each review-queue item carries a version, raised by every
change to it (a status, an assignment, a comparison's verdict), so a change made against an older
version is refused instead of silently overwriting another reviewer's.

Revision ID: 0014_review_versions
Revises: 0013_untrained_scores
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_review_versions"
down_revision = "0013_untrained_scores"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("review_items") as batch:
        batch.add_column(sa.Column("version", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("review_items") as batch:
        batch.drop_column("version")
