"""The trust report's untrained baseline: a personal model's base with its fresh score head,
scored once when the model trained (untrained_scores).

Revision ID: 0013_untrained_scores
Revises: 0012_uuid_ids
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_untrained_scores"
down_revision = "0012_uuid_ids"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "untrained_scores",
        sa.Column("trace_id", sa.String(64), nullable=False),
        sa.Column("evaluator", sa.String(128), nullable=False),
        sa.Column("trace_version", sa.Integer, nullable=False),
        sa.Column("raw", sa.Float, nullable=False),
        sa.ForeignKeyConstraint(["trace_id"], ["traces.id"],
                                name=op.f("fk_untrained_scores_trace_id_traces")),
        sa.PrimaryKeyConstraint("trace_id", "evaluator", name=op.f("pk_untrained_scores")),
    )


def downgrade() -> None:
    op.drop_table("untrained_scores")
