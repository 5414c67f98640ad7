"""Score again of a model's every trace in bounded chunks: the owner's traces are queued for the
model in the scoring queue, marked as asked for, so that they stay queued until scored even when
the model is not (or no longer) among the owner's kept-current models.

Revision ID: 0017_requested_scoring
Revises: 0016_step_leases
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_requested_scoring"
down_revision = "0016_step_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scoring_candidates") as batch:
        batch.add_column(sa.Column("requested", sa.Boolean, nullable=False,
                                   server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("scoring_candidates") as batch:
        batch.drop_column("requested")
