"""Hostile SQL: error oracles learn nothing about another account's rows, every query stops at the
statement timeout (pattern functions too), and queries holding every slot keep neither the other
routes nor their own answers waiting on them."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from stash_pipeline.store import Store, schema
from stash_pipeline.store.readonly_sql import ReadonlySql, SqlBusy, sqlite as readonly_sqlite
from stash_pipeline_tests.support.api_helpers import SETTINGS, Api, import_traces, serve_again
from stash_pipeline_tests.support.isolation import SQL, answer, mallory, secrets, victim  # noqa: F401 - fixtures
from stash_pipeline_tests.support.waiting import PATIENT_S, REQUEST_S, bound, wait_until

OVERFLOW = "abs(-9223372036854775807 - 1 + 0 * length(evaluator))"
# Runs out of memory only when the row is visible, after 16 s of CPU writing 512 MiB (idle): the
# victim's own answer to it comes at the statement timeout, which load decides; mallory's, which
# sees no row, at once.
PRINTF_2GB = ("SELECT 1 FROM scores WHERE trace_id = '{trace}' AND "
              "length(printf('%.*c', CASE WHEN raw > 3 THEN 2000000000 ELSE 1 END, 'x')) > 0")
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
        PRINTF_2GB,
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
    rows are visible, so the comparison can fail (asked of every oracle but the one whose
    visible rows cost a statement timeout)."""
    absent = {"trace": "no-such-trace", "action": "no-such-trace/m2", "model": "no-such-model"}
    telling = 0
    asked = [q for q in oracles(api.store.engine.dialect.name) if q != PRINTF_2GB]
    for query in oracles(api.store.engine.dialect.name):
        aimed, blind = query.format(**secrets), query.format(**absent)
        assert answer(mallory, aimed) == answer(mallory, blind), aimed
        assert "secret" not in answer(mallory, aimed)[1]
        if query in asked:
            telling += answer(victim["client"], aimed) != answer(victim["client"], blind)
    # Most tell their own owner apart (not all: SQLite's 1/0 is NULL, its CAST never fails).
    assert telling >= len(asked) / 2, telling


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


# The SQLite query process, held before it starts until the test lets it go.
HELD_CHILD = """
import os, runpy, sys, time
while not os.path.exists({release!r}):
    time.sleep(0.01)
sys.argv = [{child!r}]
runpy.run_path({child!r}, run_name="__main__")
"""


@contextlib.contextmanager
def held_queries(store: Store, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A query that holds its slot until this context ends, burning no core meanwhile, then
    answers its rows (the statement timeout, one load never reaches, plays no part). On PostgreSQL
    it waits for a lock this context holds on the table it reads (as while a migration alters the
    table). On SQLite, which no lock holds up, its query process waits for this context before it
    starts."""
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect() as c, c.begin():
            c.execute(sa.text(f"LOCK TABLE {schema.traces.fullname} IN ACCESS EXCLUSIVE MODE"))
            yield "SELECT count(*) FROM traces"
        return
    release = folder / "release"
    child = folder / "held_child.py"
    child.write_text(HELD_CHILD.format(release=str(release), child=str(readonly_sqlite.CHILD)))
    monkeypatch.setattr(readonly_sqlite, "CHILD", child)
    try:
        yield "SELECT count(*) FROM traces"
    finally:
        release.touch()


def test_pattern_functions_stop_at_the_statement_timeout(api: Api, mallory: httpx.Client,
                                                         short_sql_timeout: Api) -> None:
    """Each would run for minutes in one function call; the timeout (1 s here) ends it."""
    with short_sql_timeout.client(mallory.headers["Authorization"].split()[1]) as hasty:
        for query in slow_pattern_queries(api.store.engine.dialect.name):
            response = hasty.post(SQL, json={"sql": query})
            assert response.status_code == 422 and response.json()["code"] == "timeout", query
            settled(api)
    assert mallory.post(SQL, json={"sql": "SELECT count(*) FROM traces"}).json()["rows"] == [[1]]


@pytest.fixture
def four_slots(api: Api, tmp_path: Path) -> Iterator[tuple[Api, object]]:
    """A second server on the same store with four query slots: the served Api and its app."""
    with serve_again(api.store, tmp_path, dataclasses.replace(SETTINGS, sql_concurrency=4)) as \
            served:
        yield served


def test_other_routes_answer_while_four_queries_hold_every_slot(
        four_slots, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries run in threads of their own: with all four slots held, another route answers
    (the slots still held when it has), and the four then answer their rows."""
    served, app = four_slots
    _, client = served.account("slow")
    import_traces(client, "t1")
    answers: list[httpx.Response] = []

    def query(held: str) -> None:
        with served.client(client.headers["Authorization"].split()[1]) as own:
            answers.append(own.post(SQL, json={"sql": held}))

    threads: list[threading.Thread] = []
    try:
        with held_queries(served.store, tmp_path, monkeypatch) as held:
            threads = [threading.Thread(target=query, args=(held,)) for _ in range(4)]
            for thread in threads:
                thread.start()
            wait_until(lambda: getattr(getattr(app.state, "sql_threads", None),
                                       "borrowed_tokens", 0) == 4,
                       timeout_s=REQUEST_S, what="the four queries to hold their slots")
            assert client.get("/api/v1/account").status_code == 200
            assert app.state.sql_threads.borrowed_tokens == 4, "a held query ended"
    finally:
        for thread in threads:
            thread.join(timeout=bound(REQUEST_S))
        settled(served, app)
    assert [(r.status_code, r.json().get("rows")) for r in answers] == [(200, [[1]])] * 4


def settled(api: Api, app=None, engine=None) -> None:
    """Wait until no query holds a slot (a PostgreSQL backend ends after its caller's answer)."""
    engines = [app.state.sql] if app is not None else []
    engines += [engine] if engine is not None else []
    wait_until(lambda: not any(engine.running for engine in engines) and not _reader_backends(api),
               timeout_s=REQUEST_S, what="every query backend to end")


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


def test_a_query_waiting_past_the_timeout_for_a_slot_is_busy(
        api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one slot is held (until the test lets it go): a query that may wait 0.5 s for it is
    busy, and the holder then answers."""
    engine = ReadonlySql(api.store, concurrency=1)
    assert engine.prepare() is None
    outcome: list[object] = []

    def hold(held: str) -> None:
        outcome.append(engine.run("nobody", held, max_rows=1, timeout_s=bound(PATIENT_S)).rows)

    holder = None
    try:
        with held_queries(api.store, tmp_path, monkeypatch) as held:
            holder = threading.Thread(target=hold, args=(held,))
            holder.start()
            wait_until(lambda: engine.running == 1, timeout_s=REQUEST_S,
                       what="the query to hold the slot")
            with pytest.raises(SqlBusy, match="slots stayed busy for 0.5 s"):
                engine.run("nobody", "SELECT 1", max_rows=1, timeout_s=0.5)
    finally:
        if holder is not None:
            holder.join(timeout=bound(REQUEST_S))
        settled(api, engine=engine)
        engine.dispose()
    assert outcome == [[(0,)]]
    assert engine.run("nobody", "SELECT 1", max_rows=1, timeout_s=bound(PATIENT_S)).rows == [(1,)]


def test_busy_is_503_with_retry_after_the_statement_timeout(
        mallory: httpx.Client, short_sql_timeout: Api, monkeypatch) -> None:
    def busy(self, *args, **kwargs):
        raise SqlBusy("all 4 SQL query slots stayed busy for 1 s; try again in a few seconds")

    monkeypatch.setattr(ReadonlySql, "run", busy)
    with short_sql_timeout.client(mallory.headers["Authorization"].split()[1]) as hasty:
        response = hasty.post(SQL, json={"sql": "SELECT 1"})
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert "try again" in response.json()["detail"]
