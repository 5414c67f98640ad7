"""The HTTP API: accounts get a display name (``stash-pipeline accounts create --name N``).

API keys already have their column (``accounts.api_key_hash``, a SHA-256 of the key). The SQL
endpoint's views and its reader role are created at API start-up (``store.readonly_sql.prepare``),
not here: they are rebuilt from the code on every start and need no data migration.

Revision ID: 0004_api
Revises: 0003_pipeline
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_api"
down_revision = "0003_pipeline"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.add_column(sa.Column("name", sa.String(256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.drop_column("name")
