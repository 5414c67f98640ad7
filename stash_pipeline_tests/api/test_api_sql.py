"""POST /api/v1/sql: the caller's own rows in four views, a row limit and a statement timeout."""

from __future__ import annotations

import httpx
import pytest

from stash_pipeline.store import ActionScore, Release, Store, TraceScore
from stash_pipeline.store.readonly_sql import ReadonlySql, SqlUnavailable
from stash_pipeline_tests.support.api_helpers import SETTINGS, Api, import_traces

SQL = "/api/v1/sql"


def sql(client: httpx.Client, query: str) -> httpx.Response:
    return client.post(SQL, json={"sql": query})


@pytest.fixture
def ana(api: Api) -> httpx.Client:
    _, client = api.account("ana")
    import_traces(client, "t1", "t2")
    model = client.post("/api/v1/rm/reward-models",
                        json={"name": "m", "trace_ids": ["t1"]}).json()["id"]
    api.store.save_scores([TraceScore("t1", 1, model, 2.5)])
    api.store.save_release(Release("v1", "file:///x", {}, {}))
    action = api.store.get_trace("t1").actions()[0]
    api.store.save_action_scores("v1", {"t1": 1}, [ActionScore(action.id, "t1", 1, "v1", 1.0, 0.2)])
    return client


def test_each_view_shows_the_callers_rows(ana: httpx.Client) -> None:
    rows = sql(ana, "SELECT id, version, message_count FROM traces ORDER BY id").json()
    assert rows["columns"] == ["id", "version", "message_count"]
    assert rows["rows"] == [["t1", 1, 5], ["t2", 1, 5]] and rows["truncated"] is False
    assert sql(ana, "SELECT trace_id, raw FROM scores").json()["rows"] == [["t1", 2.5]]
    credit = sql(ana, "SELECT trace_id, evaluator, credit FROM action_scores").json()["rows"]
    assert credit == [["t1", "v1", 0.2]]
    models = sql(ana, "SELECT name, status, trace_ids FROM reward_models").json()["rows"]
    assert models == [["m", "queued", '["t1"]']]
    joined = sql(ana, "SELECT t.id, count(a.action_id) AS n FROM traces t LEFT JOIN "
                      "action_scores a ON a.trace_id = t.id GROUP BY t.id ORDER BY t.id")
    assert joined.json()["rows"] == [["t1", 1], ["t2", 0]]


def test_rows_stop_at_the_limit(api: Api, ana: httpx.Client) -> None:
    import_traces(ana, *[f"x{i}" for i in range(SETTINGS.sql_max_rows + 2)])
    result = sql(ana, "SELECT id FROM traces").json()
    assert result["row_count"] == SETTINGS.sql_max_rows and result["truncated"] is True


@pytest.mark.parametrize("query", [
    "SELECT nonsense FROM traces", "SELEC 1", "SELECT * FROM traces WHERE",
])
def test_invalid_sql_is_422(ana: httpx.Client, query: str) -> None:
    response = sql(ana, query)
    assert response.status_code == 422 and response.json()["field"] == "sql"


def test_a_query_past_the_timeout_is_422_with_the_timeouts_clear_error(
        api: Api, ana: httpx.Client, short_sql_timeout: Api) -> None:
    """On a server whose statement timeout is 1 s, a query that would never end answers with the
    timeout's error; the module's server (a timeout load never reaches) then answers as usual."""
    # Streamed (generate_series in FROM would first write its rows to a temporary file).
    endless = ("SELECT count(*) FROM (SELECT generate_series(1, 10000000000)) AS numbers"
               if api.store.engine.dialect.name == "postgresql" else
               "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
               "SELECT count(*) FROM c")
    with short_sql_timeout.client(ana.headers["Authorization"].split()[1]) as hasty:
        response = sql(hasty, endless)
    assert response.status_code == 422, response.text
    assert response.json() == {
        "detail": "record request, field 'sql': the query ran past the 1 s statement timeout; "
                  "narrow it (a WHERE clause, fewer rows or joins) or ask the operator for a "
                  "longer STASH_SQL_TIMEOUT_S",
        "record": "request", "field": "sql", "code": "timeout"}
    assert sql(ana, "SELECT count(*) FROM traces").json()["rows"] == [[2]]


def test_an_endpoint_the_deployment_has_not_set_up_is_503(api: Api, ana: httpx.Client,
                                                          monkeypatch) -> None:
    def unavailable(self, *args, **kwargs):
        raise SqlUnavailable("create the role stash_sql_reader")

    monkeypatch.setattr(ReadonlySql, "run", unavailable)
    response = sql(ana, "SELECT id FROM traces")
    assert response.status_code == 503 and "stash_sql_reader" in response.json()["detail"]


def test_an_in_memory_sqlite_database_has_no_sql_endpoint() -> None:
    store = Store("sqlite://")
    engine = ReadonlySql(store)
    assert engine.prepare() is None
    with pytest.raises(SqlUnavailable, match="database file"):
        engine.run("ana", "SELECT 1", max_rows=1, timeout_s=1)
