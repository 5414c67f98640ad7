"""Error oracles with non-constant error terms, per view and per clause position, on both databases.

Each query raises an error exactly when an expression sees a row that names the target id and
passes a column test (PostgreSQL: ``1/(0*extract(day from now())::int)``, which the planner cannot
fold and judges leak-proof; SQLite: an ``abs`` integer overflow that reads the date). The error
term sits in one clause position per test: WHERE, the select list, CASE, JOIN ON, HAVING, GROUP BY,
ORDER BY, subqueries, window functions, LIMIT and OFFSET expressions, CTEs, aggregate FILTERs, set
operations. Another account aiming at the victim's ids gets the same answer as for ids that exist
nowhere; the victim aiming at its own ids gets the error, which shows each query can tell.
"""

from __future__ import annotations

import httpx
import pytest

from stash_pipeline_tests.support.api_helpers import Api
from stash_pipeline_tests.support.isolation import answer, mallory, secrets, victim  # noqa: F401 - fixtures  # noqa: F401 - fixture

# The error term of each database: an error when {cond} holds on a row, no value otherwise.
ERROR_TERMS = {
    "postgresql": "(CASE WHEN {cond} THEN 1 / (0 * extract(day from now())::int) ELSE 0 END)",
    "sqlite": "(CASE WHEN {cond} THEN abs(-9223372036854775807 - (date('now') > '0')) "
              "ELSE 0 END)",
}
# Per view: the test a row passes when it is the target (its id and a column's value).
CONDITIONS = {
    "traces": "id = '{trace}' AND version > 0",
    "scores": "trace_id = '{trace}' AND raw > 3",
    "action_scores": "action_id = '{action}' AND raw > 3",
    "reward_models": "id = '{model}' AND epochs > 0",
    "trust_figures": "evaluator = '{model}' AND n >= 0",
}
KEY_COLUMNS = {"traces": "id", "scores": "trace_id", "action_scores": "action_id",
               "reward_models": "id", "trust_figures": "evaluator"}
# {v}: the view, {e}: the error term over its columns, {k}: its key column.
POSITIONS = {
    "where": "SELECT 1 FROM {v} WHERE {e} = 0",
    "where_after_key": "SELECT 1 FROM {v} WHERE {k} = '{target}' AND {e} = 0",
    "select_list": "SELECT {e} AS e FROM {v}",
    "case": "SELECT CASE WHEN {e} = 0 THEN 'a' ELSE 'b' END AS c FROM {v}",
    "join_on": "SELECT 1 FROM (SELECT 1 AS one) AS x JOIN {v} ON {e} = x.one - 1",
    "left_join_on": "SELECT 1 FROM (SELECT 1 AS one) AS x LEFT JOIN {v} ON {e} = x.one - 1",
    "self_join_on": "SELECT 1 FROM {v} JOIN (SELECT {k} AS other FROM {v}) AS o "
                    "ON o.other = {k} AND {e} = 0",
    "having": "SELECT count(*) FROM {v} GROUP BY {k} HAVING max({e}) = 0",
    "group_by": "SELECT count(*) FROM {v} GROUP BY {e}",
    "order_by": "SELECT 1 FROM {v} ORDER BY {e}",
    "order_by_limit": "SELECT {k} FROM {v} ORDER BY {e}, {k} LIMIT 1",
    "scalar_subquery": "SELECT (SELECT max({e}) FROM {v}) AS m",
    "exists": "SELECT 1 WHERE EXISTS (SELECT 1 FROM {v} WHERE {e} = 0)",
    "in_subquery": "SELECT 1 WHERE 0 IN (SELECT {e} FROM {v})",
    "derived_table": "SELECT 1 FROM (SELECT * FROM {v}) AS s WHERE {e} = 0",
    "cte": "WITH c AS (SELECT {e} AS e FROM {v}) SELECT count(*) FROM c WHERE e = 0",
    "window_argument": "SELECT sum({e}) OVER () AS w FROM {v}",
    "window_partition": "SELECT row_number() OVER (PARTITION BY {e}) AS w FROM {v}",
    "window_order": "SELECT rank() OVER (ORDER BY {e}) AS w FROM {v}",
    "limit": "SELECT 1 FROM {v} LIMIT (SELECT max({e}) + 1 FROM {v})",
    "offset": "SELECT 1 FROM {v} LIMIT 1 OFFSET (SELECT max({e}) FROM {v})",
    "aggregate": "SELECT sum({e}) AS s FROM {v}",
    "aggregate_filter": "SELECT count(*) FILTER (WHERE {e} = 0) AS n FROM {v}",
    "union": "SELECT {e} AS e FROM {v} UNION SELECT 0",
    "distinct": "SELECT DISTINCT {e} AS e FROM {v}",
    "nested_functions": "SELECT 1 FROM {v} WHERE coalesce(nullif({e}, 1), 0) = 0",
}
POSTGRES_POSITIONS = {
    "lateral": "SELECT 1 FROM {v}, LATERAL (SELECT {e} AS e) AS l WHERE l.e = 0",
    "distinct_on": "SELECT DISTINCT ON ({e}) 1 FROM {v}",
    "array_subscript": "SELECT (ARRAY[0, 1])[{e} + 1] AS a FROM {v}",
}
ABSENT = {"trace": "no-such-trace", "action": "no-such-trace/m2", "model": "no-such-model"}
TARGET_KEY = {"traces": "trace", "scores": "trace", "action_scores": "action",
              "reward_models": "model", "trust_figures": "model"}


def query(dialect: str, position: str, view: str, ids: dict[str, str]) -> str:
    template = {**POSITIONS, **POSTGRES_POSITIONS}[position]
    error = ERROR_TERMS[dialect].format(cond=CONDITIONS[view].format(**ids))
    return template.format(v=view, e=error, k=KEY_COLUMNS[view],
                           target=ids[TARGET_KEY[view]])


@pytest.mark.parametrize("position", [*POSITIONS, *POSTGRES_POSITIONS])
def test_no_clause_position_tells_about_another_accounts_rows(
        position: str, api: Api, victim: dict, mallory: httpx.Client, secrets: dict) -> None:
    dialect = api.store.engine.dialect.name
    if position in POSTGRES_POSITIONS and dialect != "postgresql":
        pytest.skip(f"{position} is PostgreSQL syntax")
    for view in CONDITIONS:
        aimed, blind = query(dialect, position, view, secrets), query(dialect, position, view,
                                                                      ABSENT)
        # The same query tells the victim that its own row is there: it can tell.
        status, text = answer(victim["client"], aimed)
        assert status == 422 and ("division by zero" in text or "integer overflow" in text), (
            view, aimed, text)
        assert answer(mallory, aimed) == answer(mallory, blind), (view, aimed)
