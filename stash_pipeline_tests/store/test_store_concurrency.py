"""Concurrent writers on both databases: nothing lost, nothing crashed.

Real threads (each with its own Store, so its own connections) or real processes, started together
behind a barrier. Before the fix: on SQLite, 8 concurrent reimports ended at version 3-4 instead of
9; on PostgreSQL, most crashed with UniqueViolation or DeadlockDetected; on a fresh store, most
first commands crashed in the migration or creating the owner's account.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.core.feedback import Rating, feedback_id
from stash_pipeline.store import Store
from stash_pipeline.store.engine import current_revision, head_revision
from stash_pipeline.store.locks import ConcurrentWriteError, lock_traces
from stash_pipeline_tests.support.forked_cli import Command, run_at_once
from stash_pipeline_tests.support.store_samples import (
    feedback_on,
    make_record,
    make_trace,
    own_store,
    preview_report,
    run_together,
)
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, bound

SAMPLES = Path(__file__).resolve().parents[2] / "stash_pipeline" / "samples"


def test_16_concurrent_reimports_of_the_same_traces_each_bump_the_version(store: Store) -> None:
    traces = [make_trace(f"t{i}", turns=1 + i % 3) for i in range(40)]
    records = [make_record(t, f"f.jsonl:{i}", feedback_on(t)) for i, t in enumerate(traces)]
    store.import_traces(records)

    def reimport(n: int) -> Callable[[], None]:
        # Each writer brings other content (an identical reimport would change nothing).
        changed = [make_record(replace(t, metadata={**t.metadata, "sync": n}), r.source,
                               r.feedback) for t, r in zip(traces, records)]

        def work() -> None:
            writer = own_store(store.url)
            try:
                summary = writer.import_traces(changed)
                assert (summary.imported, summary.updated) == (0, 40)
            finally:
                writer.dispose()
        return work

    assert run_together([reimport(n) for n in range(16)]) == []
    assert {s.version for s in store.list_traces()} == {17}
    # Feedback ids are stable: 16 reimports stored each item once; actions are whole.
    assert len(store.feedback_for([t.id for t in traces])) == 4 * 40
    for trace in traces[:3]:
        assert store.get_trace(trace.id).actions() == trace.actions()


def test_concurrent_first_imports_of_new_traces_and_a_new_owner(store: Store) -> None:
    """Nothing stored yet: every writer inserts the same new traces and the same new account."""
    traces = [make_trace(f"n{i}", owner="newcomer") for i in range(10)]

    def first_import() -> None:
        writer = own_store(store.url)
        try:
            writer.import_traces([make_record(t) for t in traces])
        finally:
            writer.dispose()

    assert run_together([first_import] * 8) == []
    # One writer inserted them; the seven others found identical content and changed nothing.
    assert {s.version for s in store.list_traces()} == {1}
    assert store.get_account("newcomer").reward_models_enabled


def test_feedback_written_during_reimports_is_kept_or_cleanly_refused(store: Store, monkeypatch,
                                                                      capsys) -> None:
    """Reimports swap a long and a short version of a trace while feedback names an action only
    the long one has: each feedback call is stored or refused as 'not found', and what was stored
    is either on an existing action or listed as orphaned; pairs build all along."""
    long, short = make_trace("t", turns=2), make_trace("t", turns=1)
    target = "t/m5.call0"
    assert target in {a.id for a in long.actions()} - {a.id for a in short.actions()}
    store.import_traces([make_record(long)])
    refused: list[Exception] = []
    changes: list[int] = []

    def reimport(trace) -> Callable[[], None]:
        def work() -> None:
            writer = own_store(store.url)
            try:
                for _ in range(3):
                    summary = writer.import_traces([make_record(trace)])
                    changes.append(summary.updated)  # 0 when it found the same content
            finally:
                writer.dispose()
        return work

    def rate(author: str) -> Callable[[], None]:
        def work() -> None:
            writer = own_store(store.url)
            try:
                for value in (1.0, -1.0, 0.5):
                    item = Rating(feedback_id("rating", "t", target, author), "t", value,
                                  action_id=target, author=author)
                    try:
                        writer.add_feedback([item], owner="local")
                    except NotFoundError as error:
                        refused.append(error)
            finally:
                writer.dispose()
        return work

    workers = [reimport(long if i % 2 else short) for i in range(6)]
    workers += [rate(f"r{i}") for i in range(6)]
    assert run_together(workers) == []
    assert all("does not exist" in str(error) for error in refused)
    assert store.get_trace("t").version == 1 + sum(changes)  # every change bumped once
    ratings = store.feedback_for(["t"])
    trace = store.get_trace("t")
    orphaned = {f.id for f in store.orphaned_feedback()}
    on_actions = {a.id for a in trace.actions()}
    assert all(r.action_id in on_actions or r.id in orphaned for r in ratings)
    assert len(ratings) + len(refused) >= 6  # every author tried three times; ids repeat
    report = preview_report(store, monkeypatch, capsys, "t")
    assert report["orphaned_feedback"] == (0 if target in on_actions else len(ratings))


def test_a_lost_bump_can_never_mark_new_content_scored(store: Store) -> None:
    """Reimports with different content race a scorer that marks what it read as scored: when
    the trace is not pending, the content the scorer read at that version is the content now."""
    store.import_traces([make_record(make_trace("t", text="v0"))])
    scored: dict[int, str] = {}

    def reimport(n: int) -> Callable[[], None]:
        def work() -> None:
            writer = own_store(store.url)
            try:
                for k in range(3):
                    writer.import_traces([make_record(make_trace("t", text=f"v{n}.{k}"))])
            finally:
                writer.dispose()
        return work

    def score() -> None:
        scorer = own_store(store.url)
        try:
            for _ in range(20):
                trace = scorer.get_trace("t")
                scored[trace.version] = trace.messages[1].content
                scorer.save_action_scores("shared-v1", {"t": trace.version}, [])
        finally:
            scorer.dispose()

    assert run_together([reimport(n) for n in range(6)] + [score]) == []
    trace = store.get_trace("t")
    assert trace.version == 1 + 6 * 3  # every bump counted: a version names one content
    if not store.traces_pending_scoring("shared-v1"):
        assert scored[trace.version] == trace.messages[1].content
    # Whatever the scorer marked last, the next reimport is pending again.
    store.import_traces([make_record(make_trace("t", text="last"))])
    assert store.traces_pending_scoring("shared-v1") == [("t", trace.version + 1)]


def test_8_first_commands_at_once_on_a_fresh_store(fresh_url: str, tmp_path) -> None:
    """Eight `stash-pipeline import` processes on a store nobody has migrated: one migrates under
    the lock, the others wait and find the schema at head; one creates the account."""
    env = {**os.environ, "DATABASE_URL": fresh_url, "STASH_HOME": str(tmp_path / "home")}
    command = Command(["import", str(SAMPLES), "--owner", "ana", "--json"], env, Path.cwd())
    results, _ = run_at_once([command] * 8, tmp_path / "commands")
    for result in results:
        assert result.code == 0, result.err
        assert json.loads(result.out.strip().splitlines()[-1])["traces"] > 0
    store = Store(fresh_url)
    try:
        assert current_revision(store.engine) == head_revision()
        assert {s.version for s in store.list_traces()} == {1}  # the same content eight times
        assert store.get_account("ana").id == "ana"
    finally:
        store.dispose()


def test_sqlite_waits_for_the_write_lock_and_never_crashes_an_import(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    store = Store(url)
    store.migrate()
    holding, release = threading.Event(), threading.Event()

    def hold_the_write_lock() -> None:
        with store.transaction() as connection:  # BEGIN IMMEDIATE: the write lock, held
            connection.exec_driver_sql("SELECT 1")
            holding.set()
            release.wait(timeout=bound(PROCESS_EXIT_S))

    holder = threading.Thread(target=hold_the_write_lock)
    holder.start()
    holding.wait(timeout=bound(PROCESS_EXIT_S))
    writer = Store(url)
    done = threading.Event()
    result: list[object] = []

    def import_while_locked() -> None:
        try:
            result.append(writer.import_traces([make_record(make_trace("t"))]))
        except Exception as error:  # noqa: BLE001
            result.append(error)
        done.set()

    importer = threading.Thread(target=import_while_locked)
    importer.start()
    assert not done.wait(timeout=0.5)  # it waits on the lock instead of failing
    release.set()
    holder.join()
    importer.join()
    assert result and result[0].imported == 1  # type: ignore[union-attr]
    writer.dispose()

    # Past the busy timeout it is a clear error, and nothing is stored.
    monkeypatch.setenv("STASH_SQLITE_BUSY_TIMEOUT_S", "0.2")
    impatient = Store(url)
    holding.clear()
    release.clear()
    holder = threading.Thread(target=hold_the_write_lock)
    holder.start()
    holding.wait(timeout=bound(PROCESS_EXIT_S))
    try:
        with pytest.raises(ConcurrentWriteError, match="STASH_SQLITE_BUSY_TIMEOUT_S"):
            impatient.import_traces([make_record(make_trace("u"))])
    finally:
        release.set()
        holder.join()
    assert store.trace_ids() == ["t"]
    impatient.dispose()
    store.dispose()


@pytest.mark.postgres
def test_a_postgresql_deadlock_is_a_clear_error_and_rolls_back(postgres_store: Store) -> None:
    """Two transactions taking trace locks in opposite orders, one call each: PostgreSQL breaks
    the cycle, and the loser gets a ConcurrentWriteError (run it again), not DeadlockDetected."""
    barrier = threading.Barrier(2)

    def locker(first: str, second: str) -> Callable[[], None]:
        def work() -> None:
            writer = own_store(postgres_store.url)
            try:
                with writer.transaction() as connection:
                    lock_traces(connection, [first])
                    barrier.wait()
                    lock_traces(connection, [second])
            finally:
                writer.dispose()
        return work

    errors = run_together([locker("a", "b"), locker("b", "a")])
    assert len(errors) == 1 and isinstance(errors[0], ConcurrentWriteError)
    assert "run the command again" in str(errors[0])


def test_reimports_keep_an_opt_in(store: Store) -> None:
    """The opt-in is or-ed in SQL with the stored flag: a concurrent reimport without
    --contribute never turns it off."""
    store.import_traces([make_record(make_trace("t", contribute=True))])
    store.import_traces([make_record(replace(make_trace("t"), contribute=False))])
    assert store.list_traces()[0].contribute is True


def test_an_import_rolled_back_for_a_deadlock_is_run_again(store: Store, monkeypatch,
                                                           capsys) -> None:
    """Two imports that lock overlapping traces in different chunk orders can still deadlock on
    PostgreSQL; the loser's whole transaction is rolled back, and the command reads and stores
    its files again."""
    from stash_pipeline.cli import main

    monkeypatch.setenv("DATABASE_URL", store.url)
    real = Store.import_traces
    calls: list[int] = []

    def deadlock_once(self: Store, records, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            for _ in records:  # the first attempt read the files, then lost the deadlock
                pass
            raise ConcurrentWriteError("deadlock", deadlock=True)
        return real(self, records, **kwargs)

    monkeypatch.setattr(Store, "import_traces", deadlock_once)
    assert main(["import", str(SAMPLES), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(calls) == 2 and summary["imported"] == summary["traces"] > 0
    assert {s.version for s in store.list_traces()} == {1}
