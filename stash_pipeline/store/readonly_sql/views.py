"""What the SQL endpoint shows a caller: five views of that caller's own rows, one definition.

The same SQLAlchemy selects compile to PostgreSQL (persistent views in the ``stash_sql`` schema,
filtered by the caller row of the reading session, ``caller_views``) and to SQLite (the selects
that copy the caller's rows into the query's private database, ``view_selects``). JSON columns are
shown as text on both databases, so a query reads them the same way on either (``::json`` on
PostgreSQL, ``json_extract`` on SQLite).
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from stash_pipeline.store import schema

VIEW_NAMES = ("traces", "scores", "action_scores", "reward_models", "trust_figures")
# The name of the CTE each PostgreSQL view reads its caller's rows from.
CALLER_ROWS = "caller_rows"

TableOf = Callable[[sa.Table], sa.Table]


def _owned_selects(caller: sa.ColumnElement, table: TableOf) -> dict[str, sa.Select]:
    """Each view's rows, columns as stored: only the caller's (``caller`` is the expression of
    the caller's account id, ``table`` maps a table to the one to read)."""
    t, s, a = table(schema.traces), table(schema.scores), table(schema.action_scores)
    rm, accounts = table(schema.reward_models), table(schema.accounts)
    tf = table(schema.trust_figures)
    enabled = sa.exists().where(accounts.c.id == caller, accounts.c.reward_models_enabled)
    return {
        "traces": sa.select(
            t.c.id, t.c.agent, t.c.domain, t.c.task_id, t.c.metadata, t.c.tools, t.c.messages,
            t.c.message_count, t.c.action_count, t.c.contribute, t.c.version, t.c.created_at,
            t.c.updated_at,
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
            rm.c.id, rm.c.name, rm.c.trace_ids, rm.c.base_model, rm.c.epochs, rm.c.max_pairs,
            rm.c.status, rm.c.error, rm.c.metrics, rm.c.created_at, rm.c.started_at,
            rm.c.finished_at,
        ).where(rm.c.owner == caller, enabled),
        # The caller's trust reports (core.trust) as last computed, one row per figure; a
        # personal model's only while the account has reward models, as reward_models.
        "trust_figures": sa.select(
            tf.c.evaluator, tf.c.kind, tf.c.metric, tf.c.slice_kind, tf.c.slice, tf.c.value,
            tf.c.low, tf.c.high, tf.c.n, tf.c.detail, tf.c.computed_at,
        ).where(tf.c.owner == caller, sa.or_(tf.c.kind == "shared", enabled)),
    }


def _shown(columns: sa.ColumnCollection) -> list[sa.ColumnElement]:
    """The columns as the caller sees them: JSON as text."""
    return [sa.cast(c, sa.Text).label(c.name) if isinstance(c.type, sa.JSON) else c
            for c in columns]


def view_selects(caller: sa.ColumnElement, table: TableOf = lambda t: t) -> dict[str, sa.Select]:
    """Each view's select of the caller's rows as the caller sees them (SQLite's copy)."""
    return {name: select.with_only_columns(*_shown(select.selected_columns))
            for name, select in _owned_selects(caller, table).items()}


def caller_views(caller: sa.ColumnElement) -> dict[str, sa.Select]:
    """Each PostgreSQL view's body: the caller's rows, computed in a ``MATERIALIZED`` CTE that
    no condition of the caller's query can enter, then shown.

    PostgreSQL moves a condition it judges leak-proof below a ``security_barrier`` (and before a
    row-level-security policy): one whose only non-leak-proof calls have no column arguments,
    such as ``CASE WHEN raw > 3 THEN 1/(0*extract(day from now())::int) ELSE 0 END = 0``. It
    would then run on another account's row before the owner filter drops the row, and its error
    would tell. A ``MATERIALIZED`` CTE is planned on its own and never takes a condition of the
    query around it, so the caller's expressions only ever see rows the CTE has emitted: the
    caller's own."""
    views = {}
    for name, select in _owned_selects(caller, lambda t: t).items():
        rows = select.cte(CALLER_ROWS).prefix_with("MATERIALIZED")
        views[name] = sa.select(*_shown(rows.c))
    return views


def compile_select(select: sa.Select, dialect: sa.Dialect) -> str:
    """SQL text for a view body: every value inlined (views take no bound parameters)."""
    return str(select.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
