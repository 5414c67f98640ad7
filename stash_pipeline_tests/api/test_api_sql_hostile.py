"""Hostile SQL: error oracles learn nothing about another account's rows, every query stops at the
statement timeout (pattern functions too), and slow queries do not slow the other routes."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from stash_pipeline.api import create_app
from stash_pipeline.objects import LocalObjectStore, UrlSigner
from stash_pipeline.store import Store, schema
from stash_pipeline.store.readonly_sql import ReadonlySql, SqlBusy, SqlRefused
from stash_pipeline_tests.support.api_helpers import SETTINGS, Api, loopback_socket, serve
from stash_pipeline_tests.support.isolation import (  # noqa: F401 - fixtures  # noqa: F401 - fixtures
    SQL,
    TIMEOUT_RETRIES,
    answer,
    mallory,
    secrets,
    victim,
)

OVERFLOW = "abs(-9223372036854775807 - 1 + 0 * length(evaluator))"
# Each query raises an error, or answers differently, only when a row it names is visible.
ORACLES = {
    "both": [
        # The issue's oracle: "integer overflow" only when the CASE sees the victim's score.
        "SELECT 1 FROM action_scores WHERE action_id = '{action}' AND "
        f"CASE WHEN raw > 3 THEN {OVERFLOW} ELSE 0 END = 0",
        f"SELECT 1 FROM scores WHERE trace_id = '{{trace}}' AND {OVERFLOW} = 0",
        "SELECT 1 FROM traces WHERE id = '{trace}' AND "
        "abs(-9223372036854775807 - 1 + 0 * length(id)) = 0",
        "SELECT 1 FROM reward_models WHERE id = '{model}' AND "
        "abs(-9223372036854775807 - 1 + 0 * length(name)) = 0",
        "SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
        "1 / (CASE WHEN raw > 3 THEN 0 ELSE 1 END) = 1",
        "SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
        "1 % (CASE WHEN raw > 3 THEN 0 ELSE 1 END) = 0",
        # Ordering tricks: the order, or an error raised while sorting, would follow hidden rows.
        f"SELECT trace_id FROM scores ORDER BY CASE WHEN trace_id = '{{trace}}' "
        f"THEN {OVERFLOW} ELSE 0 END",
        "SELECT id FROM traces ORDER BY (SELECT count(*) FROM scores "
        "WHERE trace_id = '{trace}'), id",
        "SELECT (SELECT raw FROM scores WHERE trace_id = '{trace}') AS leaked",
        "SELECT count(*) FROM action_scores WHERE trace_id = '{trace}'",
    ],
    "sqlite": [
        "SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
        "json_extract(CASE WHEN raw > 3 THEN 'not json' ELSE '{{}}' END, '$.a') IS NULL",
        "SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
        "length(printf('%.*c', CASE WHEN raw > 3 THEN 2000000000 ELSE 1 END, 'x')) > 0",
        "SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
        "length(randomblob(CASE WHEN raw > 3 THEN 2000000000 ELSE 1 END)) > 0",
        "SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
        "CAST(CASE WHEN raw > 3 THEN 'x' ELSE '1' END AS INTEGER) = 1",
        "SELECT 1 FROM traces WHERE id = '{trace}' AND json(metadata || 'x') IS NULL",
    ],
    "postgresql": [
        "SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
        "(CASE WHEN raw > 3 THEN 'not json' ELSE '{{}}' END)::json IS NULL",
        "SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
        "CAST(CASE WHEN raw > 3 THEN 'x' ELSE '1' END AS integer) = 1",
        "SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
        "length(format('%s', CASE WHEN raw > 3 THEN 1 / 0 ELSE 1 END)) > 0",
        "SELECT 1 FROM traces WHERE id = '{trace}' AND (metadata || 'x')::json IS NULL",
        "SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
        "CAST(CASE WHEN raw > 3 THEN 99999999999 ELSE 1 END AS integer) = 1",
    ],
}


def oracles(dialect: str) -> list[str]:
    return ORACLES["both"] + ORACLES[dialect]


def test_error_oracles_learn_nothing_about_another_account(api: Api, victim: dict,
                                                           mallory: httpx.Client,
                                                           secrets: dict) -> None:
    """Mallory's answer to a query naming the victim's rows equals the answer to the same query
    naming rows that exist nowhere; the victim's own answer shows the query does tell when the
    rows are visible, so the comparison can fail."""
    absent = {"trace": "no-such-trace", "action": "no-such-trace/m2", "model": "no-such-model"}
    telling = 0
    for query in oracles(api.store.engine.dialect.name):
        aimed, blind = query.format(**secrets), query.format(**absent)
        assert answer(mallory, aimed) == answer(mallory, blind), aimed
        assert "secret" not in answer(mallory, aimed)[1]
        telling += answer(victim["client"], aimed) != answer(victim["client"], blind)
    # Most tell their own owner apart (not all: SQLite's 1/0 is NULL, its CAST never fails).
    assert telling >= len(oracles(api.store.engine.dialect.name)) / 2, telling


def test_the_issues_overflow_oracle_answers_alike_for_every_score(api: Api,
                                                                  mallory: httpx.Client,
                                                                  secrets: dict) -> None:
    """Bisection on the victim's raw score (9.0): every threshold answers the same."""
    answers = {answer(mallory, ORACLES["both"][0].replace("raw > 3", f"raw > {t}")
                      .format(**secrets)) for t in (-100, 0, 5, 8.9, 9.1, 100)}
    assert len(answers) == 1 and next(iter(answers))[0] == 200, answers


def slow_pattern_queries(dialect: str) -> list[str]:
    if dialect == "postgresql":
        # Sized to outlast the timeout (1 s) twice over, yet end soon after: PostgreSQL cancels a
        # query only between calls, so the backend runs the call to its end, burning a core
        # (LIKE 2.9 s and ILIKE 2.7 s alone on the 2-core machine docs/testing.md times).
        return ["SELECT format('%115000s', '') LIKE ('%' || format('%20000s', '1'))",
                "SELECT format('%115000s', '') ILIKE ('%' || format('%20000s', '1'))"]
    return ["SELECT printf('%0200000d', 0) LIKE ('%' || printf('%020000d', 1))",
            "SELECT printf('%0200000d', 0) GLOB ('*' || printf('%020000d', 1))",
            "SELECT instr(printf('%010000000d', 0), printf('%0200000d', 1))"]


@contextlib.contextmanager
def slot_holding_query(store: Store) -> Iterator[str]:
    """A query that outlasts every timeout used here and that stops at it. On PostgreSQL it waits
    for a lock this context holds on the table it reads (as while a migration alters the table),
    which the statement timeout cancels: no backend burns a core meanwhile. SQLite runs the query
    on the child process's own copy of the caller's rows, which no lock holds up: its query is
    instr (about 20 s alone), which ends with that process at the timeout."""
    if store.engine.dialect.name != "postgresql":
        yield slow_pattern_queries("sqlite")[-1]
        return
    with store.engine.connect() as c, c.begin():
        c.execute(sa.text(f"LOCK TABLE {schema.traces.fullname} IN ACCESS EXCLUSIVE MODE"))
        yield "SELECT count(*) FROM traces"


def test_pattern_functions_stop_at_the_statement_timeout(api: Api,
                                                         mallory: httpx.Client) -> None:
    """Each would run for minutes in one function call; the timeout (1 s here) ends it."""
    for query in slow_pattern_queries(api.store.engine.dialect.name):
        started = time.monotonic()
        response = mallory.post(SQL, json={"sql": query})
        elapsed = time.monotonic() - started
        assert response.status_code == 422 and response.json()["code"] == "timeout", query
        assert elapsed < SETTINGS.sql_timeout_s + 10, (query, elapsed)
        settled(api)
    assert mallory.post(SQL, json={"sql": "SELECT count(*) FROM traces"}).json()["rows"] == [[1]]


@pytest.fixture
def patient_api(api: Api, tmp_path) -> Iterator[tuple[Api, object]]:
    """A second server on the same store whose statement timeout (3 s) outlasts the test's
    request (at most 1 s) with time to spare for starting four queries: each slow query on SQLite
    burns a core until then, so it stays short."""
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    objects = LocalObjectStore(tmp_path / "objects2", api_url=url, signer=UrlSigner(b"k" * 32))
    app = create_app(api.store, objects,
                     dataclasses.replace(SETTINGS, sql_timeout_s=3.0, sql_concurrency=4))
    for _ in serve(app, sock):
        yield Api(url, api.store, objects), app


def test_other_routes_answer_quickly_while_four_slow_queries_run(
        patient_api) -> None:
    served, app = patient_api
    _, client = served.account("slow")
    answers: list[int] = []

    def query(slow: str) -> None:
        with served.client(client.headers["Authorization"].split()[1]) as own:
            answers.append(own.post(SQL, json={"sql": slow}, timeout=120).status_code)

    try:
        with slot_holding_query(served.store) as slow:
            threads = [threading.Thread(target=query, args=(slow,)) for _ in range(4)]
            for thread in threads:
                thread.start()
            try:
                deadline = time.monotonic() + 60
                while getattr(getattr(app.state, "sql_threads", None), "borrowed_tokens", 0) < 4:
                    assert time.monotonic() < deadline, "the four queries did not start"
                    time.sleep(0.05)
                started = time.monotonic()
                assert client.get("/api/v1/account").status_code == 200
                assert time.monotonic() - started < 1.0
                assert app.state.sql_threads.borrowed_tokens == 4, "the slow queries ended too soon"
            finally:
                for thread in threads:
                    thread.join(timeout=120)
    finally:
        settled(Api(served.url, served.store, served.objects), app)
    assert answers == [422] * 4


def settled(api: Api, app=None, engine=None) -> None:
    """Wait until no query holds a slot (a PostgreSQL backend ends after its caller's answer)."""
    engines = [app.state.sql] if app is not None else []
    engines += [engine] if engine is not None else []
    deadline = time.monotonic() + 120
    while any(engine.running for engine in engines) or _reader_backends(api):
        assert time.monotonic() < deadline, "a query backend outlived its timeout by minutes"
        time.sleep(0.1)


def _reader_backends(api: Api) -> int:
    if api.store.engine.dialect.name != "postgresql":
        return 0
    with api.store.engine.connect() as c:
        return c.scalar(sa.text("SELECT count(*) FROM pg_stat_activity WHERE usename = "
                                "'stash_sql_reader' AND datname = current_database() "
                                "AND state = 'active'"))


def test_a_query_reading_some_columns_answers_as_one_reading_all(
        victim: dict, secrets: dict) -> None:
    """SQLite copies only the columns a query reads: each query answers as its twin that reads
    every column (``SELECT *`` in a CTE) does."""
    client = victim["client"]
    twins = [
        ("SELECT count(*) FROM traces", "WITH a AS (SELECT * FROM traces) SELECT count(*) FROM a"),
        ("SELECT id, length(messages), message_count FROM traces",
         "WITH a AS (SELECT * FROM traces) SELECT id, length(messages), message_count FROM a"),
        ("SELECT t.id, s.raw FROM traces t JOIN scores s ON s.trace_id = t.id",
         "WITH t AS (SELECT * FROM traces), s AS (SELECT * FROM scores) "
         "SELECT t.id, s.raw FROM t JOIN s ON s.trace_id = t.id"),
        ("SELECT count(*) FROM action_scores WHERE raw > 1",
         "WITH a AS (SELECT * FROM action_scores) SELECT count(*) FROM a WHERE raw > 1"),
        ("SELECT name, status FROM reward_models",
         "WITH a AS (SELECT * FROM reward_models) SELECT name, status FROM a"),
    ]
    for some, every in twins:
        first, second = (client.post(SQL, json={"sql": q}).json() for q in (some, every))
        assert first["rows"] == second["rows"] and first["rows"], (some, first, second)
    everything = client.post(SQL, json={"sql": "SELECT * FROM traces"}).json()
    assert all(value is not None for value in everything["rows"][0][:3])


def test_a_query_waiting_past_the_timeout_for_a_slot_is_busy(api: Api) -> None:
    engine = ReadonlySql(api.store, concurrency=1)
    assert engine.prepare() is None
    outcome: list[BaseException] = []

    def hold(slow: str) -> None:
        try:
            engine.run("nobody", slow, max_rows=1, timeout_s=1.5)
        except SqlRefused as error:
            outcome.append(error)

    try:
        with slot_holding_query(api.store) as slow:
            holder = threading.Thread(target=hold, args=(slow,))
            holder.start()
            try:
                deadline = time.monotonic() + 30
                while engine.running == 0:
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
                with pytest.raises(SqlBusy, match="slots stayed busy"):
                    engine.run("nobody", "SELECT 1", max_rows=1, timeout_s=0.5)
            finally:
                holder.join(timeout=120)
    finally:
        settled(api, engine=engine)
        engine.dispose()
    assert outcome and outcome[0].code == "timeout"
    assert engine.run("nobody", "SELECT 1", max_rows=1, timeout_s=5).rows == [(1,)]


def test_busy_is_503_with_retry_after(api: Api, mallory: httpx.Client,
                                      monkeypatch) -> None:
    def busy(self, *args, **kwargs):
        raise SqlBusy("all 4 SQL query slots stayed busy for 1 s; try again in a few seconds")

    monkeypatch.setattr(ReadonlySql, "run", busy)
    response = mallory.post(SQL, json={"sql": "SELECT 1"})
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert "try again" in response.json()["detail"]
