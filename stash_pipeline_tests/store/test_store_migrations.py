from __future__ import annotations

import json
import shutil
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from stash_pipeline.store import Store, schema
from stash_pipeline.store.engine import MIGRATIONS, alembic_config, current_revision


def head_revision(store: Store) -> str:
    with store.transaction() as connection:
        return ScriptDirectory.from_config(alembic_config(connection)).get_current_head()


def test_migrate_is_idempotent_and_reaches_head(store: Store) -> None:
    store.migrate()
    store.migrate()
    assert current_revision(store.engine) == head_revision(store)


def test_migrations_create_exactly_the_schema_the_code_uses(store: Store) -> None:
    with store.transaction() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, schema.metadata) == []


def test_migrations_ship_inside_the_package() -> None:
    assert (MIGRATIONS / "env.py").is_file()
    assert (MIGRATIONS / "script.py.mako").is_file()
    assert sorted(p.name for p in (MIGRATIONS / "versions").glob("*.py"))


def test_a_fresh_sqlite_file_migrates(tmp_path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'new.db'}")
    with pytest.raises(Exception):
        store.trace_ids()  # no schema before migrate
    store.migrate()
    assert store.trace_ids() == []


@pytest.mark.postgres
def test_large_json_is_lz4_compressed_on_postgresql(postgres_store: Store) -> None:
    with postgres_store.transaction() as connection:
        has_lz4 = connection.scalar(sa.text(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
            "WHERE name = 'default_toast_compression'"))
        methods = dict(connection.execute(sa.text(
            "SELECT attname, attcompression FROM pg_attribute "
            "WHERE attrelid = 'traces'::regclass AND attname IN ('messages', 'tools')")).all())
    assert methods == ({"messages": "l", "tools": ""} if has_lz4 else {"messages": "", "tools": ""})


def test_each_migration_folder_is_read_once_a_process(tmp_path, monkeypatch) -> None:
    """share_revision_maps (on in every test process, as in the package's): a second
    ScriptDirectory of a folder reads none of its scripts, another folder reads its own."""
    from alembic.config import Config
    from alembic.script import Script

    from stash_pipeline.store.migration_scripts import share_revision_maps

    share_revision_maps()
    read: list[str] = []
    from_path = Script._from_path.__func__
    monkeypatch.setattr(Script, "_from_path", classmethod(
        lambda cls, scriptdir, path: read.append(str(path)) or from_path(cls, scriptdir, path)))
    scripts = len(list((MIGRATIONS / "versions").glob("*.py")))

    def head_of(folder) -> str:
        config = Config()
        config.set_main_option("script_location", str(folder))
        return ScriptDirectory.from_config(config).get_current_head()

    first, second = (shutil.copytree(MIGRATIONS, tmp_path / name) for name in ("a", "b"))
    heads = [head_of(first), head_of(first)]
    assert len(read) == scripts and heads[0] == heads[1] is not None
    assert head_of(second) == heads[0] and len(read) == 2 * scripts


def test_stored_preference_positions_are_dropped_so_a_reimport_is_unchanged(
        fresh_url: str, tmp_path) -> None:
    """The preference importer stored ``metadata.preference.record = "line N"`` (covered by the
    content digest) before 0007; 0007 removes it and recomputes the digests, so importing the same
    records again, at any line, finds them unchanged."""
    from stash_pipeline.core.digests import stored_trace_digest
    from stash_pipeline.importers import read_path
    from stash_pipeline.store.engine import migrate

    hh = {"chosen": "\n\nHuman: Capital of France?\n\nAssistant: Paris.",
          "rejected": "\n\nHuman: Capital of France?\n\nAssistant: No idea."}
    records = [hh, {**hh, "chosen": hh["chosen"].replace("Paris", "Paris, of course")}]
    path = tmp_path / "hh.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    store = Store(fresh_url)
    try:
        migrate(store.engine, "0006_scores_that_stay_true")
        store_as_of_0006(store.engine, read_path(path), tmp_path)
        t = schema.traces
        with store.engine.begin() as connection:  # as the importer stored them before 0007
            for row in connection.execute(sa.select(t.c.id, t.c.agent, t.c.domain, t.c.metadata,
                                                    t.c.tools, t.c.messages)).all():
                metadata = {**row.metadata, "preference": {**row.metadata["preference"],
                                                           "record": "line 1"}}
                connection.execute(t.update().where(t.c.id == row.id).values(
                    metadata=metadata, content_digest=stored_trace_digest(
                        row.agent, row.domain, metadata, row.tools, row.messages)))
        store.migrate()
        with store.reading() as connection:
            rows = connection.execute(sa.select(t.c.metadata)).all()
        assert len(rows) == 4 and all("record" not in r.metadata["preference"] for r in rows)
        path.write_text("".join(json.dumps(r) + "\n" for r in records[::-1]))
        summary = store.import_traces(read_path(path))
        assert (summary.unchanged, summary.updated) == (4, 0)
        assert {s.version for s in store.list_traces()} == {1}
    finally:
        store.dispose()


def store_as_of_0006(engine: sa.Engine, traces, tmp_path) -> None:
    """Store ``traces`` into ``engine``'s schema at 0006 as today's importer stores them, in the
    columns and tables that schema has (today's code writes columns later migrations added)."""
    today = Store(f"sqlite:///{tmp_path / 'today.db'}")
    try:
        today.migrate()
        today.import_traces(traces)
        old = sa.MetaData()
        old.reflect(engine)
        with today.reading() as source, engine.begin() as target:
            for table in schema.metadata.sorted_tables:
                if table.name not in old.tables:
                    continue
                kept = [c for c in table.c if c.name in old.tables[table.name].c]
                # Today's column types (JSON compression among them), only the old columns.
                then = sa.Table(table.name, sa.MetaData(), *[c._copy() for c in kept])
                rows = [{c.name: row._mapping[c.name] for c in kept}
                        for row in source.execute(sa.select(*kept)).all()]
                if rows:
                    target.execute(then.insert(), rows)
    finally:
        today.dispose()


def _rows_as_of_0011(store: Store) -> datetime:
    """Score again requests (ana's 1 and 3, bo's 2) and saved filters (ana's 1, bo's 2) as
    stored before 0012, with integer ids; the time of the first."""
    first = datetime(2026, 1, 1, tzinfo=timezone.utc)
    requests = sa.table("scoring_requests", *map(sa.column, (
        "owner", "evaluator", "traces", "actions", "created_at")), sa.column("id"))
    filters = sa.table("saved_filters", *map(sa.column, ("owner", "name", "params")),
                       sa.column("id"))
    with store.engine.begin() as connection:
        for owner in ("ana", "bo"):
            connection.execute(sa.text("INSERT INTO accounts (id) VALUES (:id)"), {"id": owner})
        for n, owner in enumerate(("ana", "bo", "ana")):
            connection.execute(requests.insert().values(
                owner=owner, evaluator="r1", traces=sa.literal({f"t{n}": 1}, sa.JSON),
                actions=False, created_at=first + timedelta(seconds=n)))
        for owner in ("ana", "bo"):
            connection.execute(filters.insert().values(owner=owner, name="failures",
                                                       params=sa.literal({"q": "x"}, sa.JSON)))
        assert connection.execute(sa.select(requests.c.id).order_by(requests.c.id)
                                  ).scalars().all() == [1, 2, 3]
    return first


def test_records_made_before_uuid_ids_keep_their_integer_ids(fresh_url: str) -> None:
    """0012: every Score again request and saved filter gets a random UUID; one made before keeps
    its integer id, which still finds it (the API's and the viewer's ids as given, services'
    parsing), still keys and tags its scoring run as the sensor did, and a sensor cursor kept
    from before still reads the requests after it."""
    from stash_pipeline.core.errors import NotFoundError
    from stash_pipeline.pipelines.trace_scoring import SCORING_REQUEST_TAG, request_run_key
    from stash_pipeline.services import scoring_requests, traces
    from stash_pipeline.store.engine import migrate

    store = Store(fresh_url)
    try:
        migrate(store.engine, "0011_sensor_indexes")
        _rows_as_of_0011(store)
        store.migrate()
        before = store.scoring_requests()
        assert [(r.legacy_id, r.owner) for r in before] == [(1, "ana"), (2, "bo"), (3, "ana")]
        assert all(uuid.UUID(r.id).version == 4 for r in before)
        assert len({r.id for r in before}) == 3 and before[0].traces == {"t0": 1}
        for given in ("1", 1, before[0].id, before[0].id.upper()):
            assert scoring_requests.get(store, "ana", given) == before[0]
        with pytest.raises(NotFoundError):
            scoring_requests.get(store, "ana", "2")  # bo's
        assert [request_run_key(r.run_ref) for r in before] == [
            "scoring-request:1", "scoring-request:2", "scoring-request:3"]  # the runs' keys then
        assert scoring_requests.run_tags(before[2]) == {SCORING_REQUEST_TAG: "3"}
        made = store.request_scoring(owner="ana", evaluator="r1", traces={"t9": 1},
                                     actions=False)
        assert made.legacy_id is None and made.run_ref == made.id and uuid.UUID(made.id)
        assert store.scoring_requests(after=1) == [*before[1:], made]  # a cursor from before
        assert store.scoring_requests(after=3) == [made]
        assert store.scoring_requests(after=(before[1].created_at, before[1].id)) == [before[2],
                                                                                     made]

        [kept] = store.saved_filters("ana")
        assert uuid.UUID(kept.id).version == 4 and kept.params == {"q": "x"}
        assert store.saved_filter("ana", filter_id=1) == kept
        with pytest.raises(NotFoundError):
            traces.remove_filter(store, "ana", "2")  # bo's
        again = store.save_filter("ana", "failures", {"q": "y"})
        assert again.id == kept.id  # saving a name again replaces its search, keeps its id
        traces.remove_filter(store, "ana", "1")
        assert store.saved_filters("ana") == []
        fresh = store.save_filter("ana", "new", {})
        assert uuid.UUID(fresh.id).version == 4
        assert [f.id for f in store.saved_filters("bo")] != [fresh.id]
    finally:
        store.dispose()


def test_uuid_ids_downgrade_to_integers_and_back(fresh_url: str) -> None:
    """0012's downgrade: a record's integer id again (its legacy id, or the next ones for those
    made since), and integer ids given again by the database."""
    from alembic import command

    from stash_pipeline.store.engine import migrate

    store = Store(fresh_url)
    try:
        migrate(store.engine, "0011_sensor_indexes")
        _rows_as_of_0011(store)
        store.migrate()
        store.request_scoring(owner="bo", evaluator="r1", traces={}, actions=False)
        store.save_filter("bo", "new", {})
        with store.engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0011_sensor_indexes")
        with store.engine.begin() as connection:
            for table in ("scoring_requests", "saved_filters"):
                assert connection.execute(sa.text(f"SELECT id FROM {table} ORDER BY id")
                                          ).scalars().all() == ([1, 2, 3, 4] if table ==
                                                                "scoring_requests" else [1, 2, 3])
            connection.execute(sa.text("INSERT INTO saved_filters (owner, name, params) "
                                       "VALUES ('ana', 'later', '{}')"))
            assert connection.scalar(sa.text("SELECT max(id) FROM saved_filters")) == 4
        store.migrate()
        assert [r.legacy_id for r in store.scoring_requests()] == [1, 2, 3, 4]
    finally:
        store.dispose()
