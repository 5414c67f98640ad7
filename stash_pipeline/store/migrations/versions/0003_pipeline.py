"""The pipeline's bookkeeping: reward-model attempts and Score again requests, and each pair's
split.

Revision ID: 0003_pipeline
Revises: 0002
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_pipeline"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("reward_models") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer, nullable=False, server_default="1"))
        batch.add_column(sa.Column("run_id", sa.String(64)))
        batch.add_column(sa.Column("score_generation", sa.Integer, nullable=False,
                                   server_default="0"))
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("split", sa.String(8)))


def downgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        batch.drop_column("split")
    with op.batch_alter_table("reward_models") as batch:
        batch.drop_column("score_generation")
        batch.drop_column("run_id")
        batch.drop_column("attempt")
