"""The shared evaluator: comparison authors (independent review), benchmark pairs, training
requests.

Revision ID: 0005_shared_evaluator
Revises: 0004_api
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_shared_evaluator"
down_revision = "0004_api"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("reviewed_comparisons") as batch:
        batch.add_column(sa.Column("author", sa.String(256)))
    # "benchmark" labels a candidate's benchmark pairs; it is longer than the old width.
    with op.batch_alter_table("pairs") as batch:
        batch.alter_column("split", existing_type=sa.String(8), type_=sa.String(16))
    op.create_table(
        "shared_training_requests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("base_model", sa.String(512)),
        sa.Column("epochs", sa.Integer),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.current_timestamp()),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shared_training_requests")),
    )


def downgrade() -> None:
    op.drop_table("shared_training_requests")
    with op.batch_alter_table("pairs") as batch:
        batch.alter_column("split", existing_type=sa.String(16), type_=sa.String(8))
    with op.batch_alter_table("reviewed_comparisons") as batch:
        batch.drop_column("author")
