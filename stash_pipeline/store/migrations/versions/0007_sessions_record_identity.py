"""Viewer sessions that Log out ends (a session epoch per account), and preference traces whose
stored content no longer holds their record's position in its file.

The preference importer stored ``metadata.preference.record = "line N"``, which the content
digest covers, so the same record at another line reimported as changed (and lost its scores).
It no longer stores it; this removes it from stored traces and recomputes their digests, so a
reimport of the same data finds them ``unchanged``.

Revision ID: 0007_sessions_record_identity
Revises: 0006_scores_that_stay_true
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from stash_pipeline.core.digests import stored_trace_digest

revision = "0007_sessions_record_identity"
down_revision = "0006_scores_that_stay_true"
branch_labels = None
depends_on = None

CHUNK = 500


def upgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.add_column(sa.Column("session_epoch", sa.Integer, nullable=False,
                                   server_default="0"))
    _drop_preference_positions(op.get_bind())


def _drop_preference_positions(connection: sa.Connection) -> None:
    traces = sa.table("traces", sa.column("id", sa.String), sa.column("agent", sa.String),
                      sa.column("domain", sa.String), sa.column("metadata", sa.JSON),
                      sa.column("tools", sa.JSON), sa.column("messages", sa.JSON),
                      sa.column("content_digest", sa.String))
    # Only rows whose metadata text names a preference record are read whole.
    candidates = [row.id for row in connection.execute(
        sa.select(traces.c.id).where(sa.cast(traces.c.metadata, sa.Text).like('%"record"%')))]
    for start in range(0, len(candidates), CHUNK):
        chunk = candidates[start:start + CHUNK]
        updates = []
        for row in connection.execute(sa.select(traces).where(traces.c.id.in_(chunk))):
            preference = (row.metadata or {}).get("preference")
            if not isinstance(preference, dict) or "record" not in preference:
                continue
            metadata = {**row.metadata, "preference": {k: v for k, v in preference.items()
                                                       if k != "record"}}
            digest = None if row.content_digest is None else stored_trace_digest(
                row.agent, row.domain, metadata, row.tools, row.messages)
            updates.append({"b_id": row.id, "b_metadata": metadata, "b_digest": digest})
        if updates:
            connection.execute(
                traces.update().where(traces.c.id == sa.bindparam("b_id"))
                .values(metadata=sa.bindparam("b_metadata", type_=sa.JSON),
                        content_digest=sa.bindparam("b_digest")), updates)


def downgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.drop_column("session_epoch")
