"""The review loop: a trace's preview and search text, the tool and credit indexes, the review
queue's item states and saved filters.

Existing traces get their preview and search text here, a batch at a time (core.trace_search,
the functions imports use).

Revision ID: 0009_review_loop
Revises: 0007_sessions_record_identity
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_review_loop"
down_revision = "0007_sessions_record_identity"
branch_labels = None
depends_on = None

BATCH = 200
_TRACE_COLUMNS = ("id", "owner", "agent", "domain", "metadata", "tools", "contribute",
                  "version", "messages")


def upgrade() -> None:
    with op.batch_alter_table("traces") as batch:
        batch.add_column(sa.Column("preview", sa.String(256)))
        batch.add_column(sa.Column("search_text", sa.Text))
    op.create_index(op.f("ix_actions_tool_name_trace_id"), "actions", ["tool_name", "trace_id"])
    op.create_index(op.f("ix_action_scores_evaluator_trace_id"), "action_scores",
                    ["evaluator", "trace_id", "trace_version", "credit"])
    op.create_table(
        "review_items",
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("item_id", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16)),
        sa.Column("trace_version", sa.Integer),
        sa.Column("assignee", sa.String(256)),
        sa.Column("reviewer", sa.String(256)),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.current_timestamp()),
        sa.ForeignKeyConstraint(["owner"], ["accounts.id"],
                                name=op.f("fk_review_items_owner_accounts")),
        sa.PrimaryKeyConstraint("kind", "item_id", name=op.f("pk_review_items")),
    )
    op.create_index(op.f("ix_review_items_owner"), "review_items", ["owner"])
    op.create_table(
        "saved_filters",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.current_timestamp()),
        sa.ForeignKeyConstraint(["owner"], ["accounts.id"],
                                name=op.f("fk_saved_filters_owner_accounts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_saved_filters")),
        sa.UniqueConstraint("owner", "name", name=op.f("uq_saved_filters_owner_name")),
    )
    _fill_search_columns()


def _fill_search_columns() -> None:
    from stash_pipeline.core.serialize import trace_from_dict
    from stash_pipeline.core.trace_search import search_text, trace_preview

    traces = sa.table("traces", *(sa.column(name) for name in _TRACE_COLUMNS),
                      sa.column("preview"), sa.column("search_text"))
    traces.c.metadata.type = traces.c.tools.type = traces.c.messages.type = sa.JSON()
    connection = op.get_bind()
    after = ""
    while True:
        rows = connection.execute(
            sa.select(*(traces.c[name] for name in _TRACE_COLUMNS))
            .where(traces.c.id > after).order_by(traces.c.id).limit(BATCH)).all()
        if not rows:
            return
        values = []
        for row in rows:
            trace = trace_from_dict(row._asdict())
            values.append({"b_id": row.id, "b_preview": trace_preview(trace),
                           "b_search_text": search_text(trace)})
        connection.execute(
            traces.update().where(traces.c.id == sa.bindparam("b_id"))
            .values(preview=sa.bindparam("b_preview"),
                    search_text=sa.bindparam("b_search_text")), values)
        after = rows[-1].id


def downgrade() -> None:
    op.drop_table("saved_filters")
    op.drop_index(op.f("ix_review_items_owner"), "review_items")
    op.drop_table("review_items")
    op.drop_index(op.f("ix_action_scores_evaluator_trace_id"), "action_scores")
    op.drop_index(op.f("ix_actions_tool_name_trace_id"), "actions")
    with op.batch_alter_table("traces") as batch:
        batch.drop_column("search_text")
        batch.drop_column("preview")
