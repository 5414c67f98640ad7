"""Scores that stay true: content digests (identical reimports, changed actions orphan their
feedback) and Score again requests for chosen traces.

Revision ID: 0006_scores_that_stay_true
Revises: 0005_shared_evaluator
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_scores_that_stay_true"
down_revision = "0005_shared_evaluator"
branch_labels = None
depends_on = None

DIGEST = sa.String(64)
_COLUMNS = {
    "traces": ("content_digest",),
    "actions": ("content_digest",),
    "comments": ("action_digest",),
    "ratings": ("action_digest",),
    "reviewed_comparisons": ("chosen_action_digest", "rejected_action_digest"),
}


def upgrade() -> None:
    for table, columns in _COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.add_column(sa.Column(column, DIGEST))
    op.create_table(
        "scoring_requests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("evaluator", sa.String(128), nullable=False),
        sa.Column("traces", sa.JSON, nullable=False),
        sa.Column("actions", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.current_timestamp()),
        sa.ForeignKeyConstraint(["owner"], ["accounts.id"],
                                name=op.f("fk_scoring_requests_owner_accounts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scoring_requests")),
    )


def downgrade() -> None:
    op.drop_table("scoring_requests")
    for table, columns in _COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.drop_column(column)
