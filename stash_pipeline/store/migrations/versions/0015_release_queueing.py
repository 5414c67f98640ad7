"""A release's queueing in batches: each release records how far its queueing has gone, so that
every batch holds the queue's lock briefly and a batch cut short resumes where it stopped.
Releases saved before were queued (or dropped) in one statement: settled.

Revision ID: 0015_release_queueing
Revises: 0014_review_versions
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_release_queueing"
down_revision = "0014_review_versions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.add_column(sa.Column("queued_through", sa.String(64)))
        batch.add_column(sa.Column("queue_settled", sa.Boolean, nullable=False,
                                   server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("queue_settled")
        batch.drop_column("queued_through")
