"""A second account tries every route and every SQL trick on the first one's rows: it gets
nothing."""

from __future__ import annotations

import httpx
import pytest
import sqlalchemy as sa

from stash_pipeline.store.readonly_sql import SqlRefused, postgres
from stash_pipeline_tests.support.api_helpers import Api
from stash_pipeline_tests.support.isolation import RM, mallory, victim  # noqa: F401 - fixtures
from stash_pipeline_tests.support.waiting import PATIENT_S, bound


def test_every_route_answers_404_for_another_accounts_ids(api: Api, victim: dict,
                                                        mallory: httpx.Client) -> None:
    trace, model = "secret-trace", victim["model"]
    attempts = [
        ("GET", f"/api/v1/traces/{trace}", None),
        ("PATCH", f"/api/v1/traces/{trace}", {"contribute": True}),
        ("POST", f"/api/v1/traces/{trace}/ratings", {"value": 1}),
        ("POST", f"/api/v1/traces/{trace}/comments", {"text": "x"}),
        ("GET", f"{RM}/{model}", None),
        ("GET", f"{RM}/{model}/weights", None),
        ("GET", f"{RM}/{model}/trust", None),
        ("POST", f"{RM}/{model}/score", None),
        ("GET", f"/api/v1/traces?model_id={model}", None),
        ("GET", f"/api/v1/review/next?model_id={model}", None),
        ("GET", f"/api/v1/review/queue?model_id={model}", None),
        ("POST", "/api/v1/review/items", {"items": [{"kind": "trace", "id": trace}],
                                          "status": "reviewed"}),
        ("POST", "/api/v1/review/assign", {"items": [{"kind": "trace", "id": trace}],
                                           "assignee": "mallory"}),
        ("POST", "/api/v1/traces/bulk/contribute", {"trace_ids": [trace], "contribute": True}),
        ("POST", "/api/v1/traces/bulk/comment", {"trace_ids": [trace], "text": "x"}),
        ("POST", "/api/v1/traces/bulk/score", {"trace_ids": [trace]}),
        ("POST", "/api/v1/traces/bulk/export", {"trace_ids": [trace]}),
        ("DELETE", f"/api/v1/saved-filters/{victim['saved']}", None),
    ]
    for method, path, body in attempts:
        response = mallory.request(method, path, json=body)
        assert response.status_code == 404, (method, path, response.text)
        assert "secret" not in response.text.replace(trace, "").replace(model, "")
    assert [t["id"] for t in mallory.get("/api/v1/traces").json()["traces"]] == ["mallory-trace"]
    assert mallory.get(RM).json() == {"reward_models": []}
    denied = mallory.post(RM, json={"name": "m", "trace_ids": [trace]})
    assert denied.status_code == 422 and denied.json()["field"] == "trace_ids[0]"
    # Every match of mallory's is mallory's: the victim's trace is never among them.
    everything = mallory.post("/api/v1/traces/bulk/contribute",
                              json={"match": {}, "contribute": True})
    assert everything.json() == {"traces": 1, "contribute": True}
    exported = mallory.post("/api/v1/traces/bulk/export", json={"match": {"q": "hello"}})
    assert "secret" not in exported.text
    assert mallory.get("/api/v1/saved-filters").json() == {"saved_filters": []}
    assert [i["id"] for i in mallory.get("/api/v1/review/queue").json()["items"]] == [
        "mallory-trace"]
    unchanged = victim["client"].get(f"/api/v1/traces/{trace}").json()
    assert unchanged["contribute"] is False
    assert [item["type"] for item in unchanged["feedback"]] == ["VerifiedOutcome"]  # its own
    assert victim["client"].get("/api/v1/review/queue").json()["items"][0]["assignee"] is None
    assert api.store.get_reward_model(model).score_generation == 0


SQL_TRICKS = [
    "SELECT id FROM traces WHERE id = 'secret-trace'",
    "SELECT id FROM traces UNION SELECT id FROM accounts",
    "SELECT id FROM traces UNION SELECT trace_id FROM comments",
    "SELECT id, name FROM reward_models UNION SELECT id, name FROM main.reward_models",
    "SELECT id FROM public.traces",
    "SELECT id FROM main.traces",
    "SELECT id FROM stash_sql.traces",
    "SELECT * FROM stash_sql.callers",
    "SELECT relname FROM pg_catalog.pg_class",
    "SELECT query FROM pg_stat_activity",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM sqlite_master",
    "SELECT * FROM sqlite_temp_master",
    "WITH traces AS (SELECT id FROM main.traces) SELECT * FROM traces",
    "WITH traces AS (SELECT id FROM public.traces) SELECT * FROM traces",
    "SELECT set_config('role', 'none', true), query_to_xml('select id from traces', true, "
    "true, '')",
    "SELECT query_to_xml('select id from public.traces', true, true, '')",
    "SELECT current_setting('data_directory')",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT pg_sleep(30)",
    "DELETE FROM traces",
    "UPDATE traces SET contribute = true",
    "INSERT INTO scores (trace_id) VALUES ('x')",
    "DROP TABLE traces",
    "SELECT 1; DELETE FROM traces",
    "SELECT id FROM traces; SELECT 1",
    "SELECT * INTO stolen FROM traces",
    "SELECT * FROM traces FOR UPDATE",
    "WITH gone AS (DELETE FROM traces RETURNING id) SELECT * FROM gone",
    "ATTACH DATABASE '/tmp/x.db' AS x",
    "PRAGMA table_info(traces)",
    "COPY traces TO STDOUT",
    "SET ROLE postgres",
    "EXPLAIN SELECT * FROM public.traces",
    "SELECT * FROM traces t, LATERAL (SELECT * FROM accounts) a",
    "SELECT * FROM traces WHERE id IN (SELECT id FROM main.traces)",
    "SELECT (SELECT group_concat(id) FROM main.traces)",
    "SELECT * FROM pragma_table_info('traces')",
    "SELECT load_extension('x')",
]


def test_sql_tricks_get_nothing(api: Api, victim: dict, mallory: httpx.Client) -> None:
    """Every trick in turn on one world: after each, nothing changed for the victim and the
    endpoint still works, so a trick that did harm is named before the next one runs."""
    for query in SQL_TRICKS:
        response = mallory.post("/api/v1/sql", json={"sql": query})
        assert response.status_code in (200, 422), (query, response.text)
        if response.status_code == 200:
            assert "secret" not in response.text, (query, response.text)
            assert victim["owner"] not in response.text, query
        own = victim["client"].post("/api/v1/sql", json={"sql": "SELECT id FROM traces"}).json()
        assert own["rows"] == [["secret-trace"]], query
        assert api.store.get_trace("secret-trace").contribute is False, query


def test_the_victims_own_query_sees_only_its_rows(victim: dict, mallory: httpx.Client) -> None:
    for client, expected in ((victim["client"], "secret-trace"), (mallory, "mallory-trace")):
        rows = client.post("/api/v1/sql", json={"sql": "SELECT id FROM traces"}).json()["rows"]
        assert rows == [[expected]]
    models = mallory.post("/api/v1/sql", json={"sql": "SELECT * FROM reward_models"}).json()
    scores = mallory.post("/api/v1/sql", json={"sql": "SELECT * FROM scores"}).json()
    trust = mallory.post("/api/v1/sql", json={"sql": "SELECT * FROM trust_figures"}).json()
    assert models["rows"] == [] and scores["rows"] == [] and trust["rows"] == []
    own = victim["client"].post("/api/v1/sql", json={"sql": "SELECT DISTINCT evaluator FROM "
                                                            "trust_figures"}).json()
    assert own["rows"] == [[victim["model"]]]  # its outcome AUC per slice: one trace, no failure


@pytest.mark.postgres
def test_the_database_alone_stops_an_escape_from_the_reader_role(api: Api, victim: dict,
                                                                 monkeypatch) -> None:
    """Without the parser's allow-list the query reaches PostgreSQL as is: `SET ROLE` would be
    undone by set_config, but the session user itself is the reader, so it reads nothing."""
    if api.store.engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's reader role")
    monkeypatch.setattr(postgres, "check_select", lambda sql: None)
    reader = sa.create_engine(postgres.reader_url(api.store.url))
    try:
        escapes = [
            "SELECT set_config('role', 'none', true), "
            "query_to_xml('select id from public.traces', true, true, '')",
            "SELECT set_config('role', 'postgres', true)",
            "SELECT set_config('session_authorization', 'postgres', true)",
            "SELECT id FROM public.traces",
        ]
        for query in escapes:
            with pytest.raises(SqlRefused, match="permission denied"):
                postgres.run(api.store.engine, reader, "mallory", query, max_rows=10,
                             timeout_s=bound(PATIENT_S))
        _, rows = postgres.run(api.store.engine, reader, "mallory",
                               "SELECT id FROM stash_sql.traces", max_rows=10,
                               timeout_s=bound(PATIENT_S))
        assert rows == []
    finally:
        reader.dispose()
