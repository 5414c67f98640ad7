"""What the SQL endpoint shows a caller: five views of that caller's own rows, one definition.

The same SQLAlchemy selects compile to PostgreSQL (persistent ``security_barrier`` views in the
``stash_sql`` schema, filtered by the caller row of the reading session) and to SQLite (temporary
views of one connection, filtered by the caller's id as a literal). JSON columns are shown as text
on both databases, so a query reads them the same way on either (``::json`` on PostgreSQL,
``json_extract`` on SQLite).
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from stash_pipeline.store import schema

VIEW_NAMES = ("traces", "scores", "action_scores", "reward_models", "trust_figures")

TableOf = Callable[[sa.Table], sa.Table]


def view_selects(caller: sa.ColumnElement, table: TableOf = lambda t: t) -> dict[str, sa.Select]:
    """Each view's select; ``caller`` is the expression of the caller's account id and ``table``
    maps a table to the one to read (SQLite qualifies them with ``main``)."""
    t, s, a = table(schema.traces), table(schema.scores), table(schema.action_scores)
    rm, accounts = table(schema.reward_models), table(schema.accounts)
    tf = table(schema.trust_figures)

    def text(column: sa.Column) -> sa.Label:
        return sa.cast(column, sa.Text).label(column.name)

    enabled = sa.exists().where(accounts.c.id == caller, accounts.c.reward_models_enabled)
    return {
        "traces": sa.select(
            t.c.id, t.c.agent, t.c.domain, t.c.task_id, text(t.c.metadata), text(t.c.tools),
            text(t.c.messages), t.c.message_count, t.c.action_count, t.c.contribute,
            t.c.version, t.c.created_at, t.c.updated_at,
        ).where(t.c.owner == caller),
        "scores": sa.select(
            s.c.trace_id, s.c.evaluator, s.c.trace_version, s.c.raw, s.c.calibrated,
            s.c.created_at,
        ).join(t, t.c.id == s.c.trace_id).where(t.c.owner == caller),
        "action_scores": sa.select(
            a.c.action_id, a.c.trace_id, a.c.evaluator, a.c.trace_version, a.c.raw, a.c.credit,
            a.c.created_at,
        ).join(t, t.c.id == a.c.trace_id).where(t.c.owner == caller),
        "reward_models": sa.select(
            rm.c.id, rm.c.name, text(rm.c.trace_ids), rm.c.base_model, rm.c.epochs,
            rm.c.max_pairs, rm.c.status, rm.c.error, text(rm.c.metrics), rm.c.created_at,
            rm.c.started_at, rm.c.finished_at,
        ).where(rm.c.owner == caller, enabled),
        # The caller's trust reports (core.trust) as last computed, one row per figure; a
        # personal model's only while the account has reward models, as reward_models.
        "trust_figures": sa.select(
            tf.c.evaluator, tf.c.kind, tf.c.metric, tf.c.slice_kind, tf.c.slice, tf.c.value,
            tf.c.low, tf.c.high, tf.c.n, text(tf.c.detail), tf.c.computed_at,
        ).where(tf.c.owner == caller, sa.or_(tf.c.kind == "shared", enabled)),
    }


def compile_select(select: sa.Select, dialect: sa.Dialect) -> str:
    """SQL text for a view body: every value inlined (views take no bound parameters)."""
    return str(select.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
