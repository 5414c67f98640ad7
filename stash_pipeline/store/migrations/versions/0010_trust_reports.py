"""How far to trust an evaluator: token counts of scored inputs, and the trust reports.

Revision ID: 0010_trust_reports
Revises: 0009_review_loop
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_trust_reports"
down_revision = "0009_review_loop"
branch_labels = None
depends_on = None

NOW = sa.func.current_timestamp()


def upgrade() -> None:
    for table in ("scores", "action_scores"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("input_tokens", sa.Integer))
    op.create_table(
        "trust_reports",
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("evaluator", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("report", sa.JSON, nullable=False),
        sa.Column("inputs_digest", sa.String(64), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.ForeignKeyConstraint(["owner"], ["accounts.id"],
                                name=op.f("fk_trust_reports_owner_accounts")),
        sa.PrimaryKeyConstraint("owner", "evaluator", name=op.f("pk_trust_reports")),
    )
    op.create_table(
        "trust_figures",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("evaluator", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("slice_kind", sa.String(16), nullable=False),
        sa.Column("slice", sa.String(256), nullable=False),
        sa.Column("value", sa.Float),
        sa.Column("low", sa.Float),
        sa.Column("high", sa.Float),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.ForeignKeyConstraint(["owner"], ["accounts.id"],
                                name=op.f("fk_trust_figures_owner_accounts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trust_figures")),
    )
    op.create_index(op.f("ix_trust_figures_owner_evaluator"), "trust_figures",
                    ["owner", "evaluator"])


def downgrade() -> None:
    op.drop_index(op.f("ix_trust_figures_owner_evaluator"), table_name="trust_figures")
    op.drop_table("trust_figures")
    op.drop_table("trust_reports")
    for table in ("scores", "action_scores"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("input_tokens")
