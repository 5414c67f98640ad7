"""Leases on the worker's steps: a step of a run is worked by the one process that holds its
lease, so a second start of the same step does nothing.

Revision ID: 0016_step_leases
Revises: 0015_release_queueing
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_step_leases"
down_revision = "0015_release_queueing"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "step_leases",
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("holder", sa.String(256), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_step_leases")),
    )
    op.create_index(op.f("ix_step_leases_run_id"), "step_leases", ["run_id"])
    op.create_index(op.f("ix_step_leases_finished_at"), "step_leases", ["finished_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_step_leases_finished_at"), table_name="step_leases")
    op.drop_index(op.f("ix_step_leases_run_id"), table_name="step_leases")
    op.drop_table("step_leases")
