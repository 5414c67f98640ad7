from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from stash_pipeline.core.errors import InputError, NotFoundError, OwnershipError
from stash_pipeline.core.serialize import trace_to_dict
from stash_pipeline.core.traces import Message, Trace, summarize
from stash_pipeline.store import ActionScore, Release, Store, TraceScore
from stash_pipeline_tests.support.store_samples import (
    comparison,
    feedback_on,
    make_record,
    make_trace,
)


def stored_form(trace: Trace, version: int = 1) -> dict:
    return {**trace_to_dict(trace), "version": version}


def test_import_then_read_back_identical_traces(store: Store) -> None:
    traces = [make_trace(f"t{i}", turns=i, text="ünïcødé " * i) for i in range(5)]
    summary = store.import_traces(make_record(t, f"f.jsonl:{i}") for i, t in enumerate(traces))

    counts = summarize(traces)
    assert summary.as_dict() == {
        "traces": 5, "imported": 5, "updated": 0, "unchanged": 0, "messages": counts["messages"],
        "actions": counts["actions"], "tool_calls": counts["tool_calls"],
        "comments": 0, "ratings": 0, "comparisons": 0, "outcomes": 0, "reviews": 0,
    }
    for trace in traces:
        assert trace_to_dict(store.get_trace(trace.id)) == stored_form(trace)
    # Key order inside tool arguments survives (the renderer sees it).
    call = store.get_trace("t1").messages[2].tool_calls[0]
    assert list(call.arguments) == ["zeta", "alpha"]
    assert [t.id for t in store.get_traces(["t3", "t0"])] == ["t3", "t0"]


def test_chunked_import_reports_progress_and_reads_all(store: Store) -> None:
    from stash_pipeline.store import imports

    traces = [make_trace(f"c{i}", turns=1) for i in range(7)]
    seen: list[int] = []
    with store.transaction() as connection:
        summary = imports.import_traces(connection, (make_record(t) for t in traces),
                                        on_progress=seen.append, chunk_size=3)
    assert seen == [3, 3, 1] and summary.imported == 7
    assert store.trace_ids() == sorted(t.id for t in traces)


def test_list_and_filter_traces(store: Store) -> None:
    store.import_traces([make_record(make_trace("a", owner="ana", contribute=True)),
                         make_record(make_trace("b", owner="bo"))])
    listing = {s.id: s for s in store.list_traces()}
    a = listing["a"]
    trace = make_trace("a", owner="ana")
    assert (a.owner, a.agent, a.domain, a.task_id, a.version, a.contribute) == \
        ("ana", "gpt-4.1", "airline", "7", 1, True)
    assert (a.messages, a.actions) == (len(trace.messages), len(trace.actions()))
    assert (a.latest_score, a.mean_action_credit, a.actions_scored) == (None, None, 0)
    assert [s.id for s in store.list_traces(owner="bo")] == ["b"]
    assert store.trace_ids(owner="ana") == ["a"]
    assert store.trace_ids(contribute=True) == ["a"]
    assert store.trace_ids(contribute=False) == ["b"]


def test_reimport_bumps_version_replaces_content_and_clears_scores(store: Store) -> None:
    first = make_trace("t", turns=3)
    store.import_traces([make_record(first, feedback=feedback_on(first))])
    action_ids = [a.id for a in first.actions()]
    store.save_action_scores("v1", {"t": 1}, [ActionScore(i, "t", 1, "v1", 0.5, 0.1)
                                               for i in action_ids])
    store.save_scores([TraceScore("t", 1, "rm-1", 2.0)])
    assert store.traces_pending_scoring("v1") == []
    assert store.list_traces(action_evaluator="v1")[0].actions_scored == len(action_ids)
    store.save_release(Release("v1", "s3://bucket/v1.tar.gz", {}, {}))
    listed = store.list_traces()[0]  # the latest release's credit by default
    assert (listed.actions_scored, listed.mean_action_credit, listed.latest_score) == \
        (len(action_ids), pytest.approx(0.1), 2.0)

    second = make_trace("t", turns=1, text="edited")
    summary = store.import_traces([make_record(second, feedback=feedback_on(second))])

    assert (summary.imported, summary.updated) == (0, 1)
    assert trace_to_dict(store.get_trace("t")) == stored_form(second, version=2)
    assert store.action_scores_for("t") == [] and store.scores_for("t") == []
    assert store.traces_pending_scoring("v1") == [("t", 2)]  # queued for the evaluator again
    row = store.list_traces()[0]
    assert (row.version, row.actions, row.actions_scored, row.latest_score) == \
        (2, len(second.actions()), 0, None)
    with store.transaction() as connection:
        from stash_pipeline.store import schema
        stored_actions = connection.scalars(schema.actions.select().with_only_columns(
            schema.actions.c.id).order_by(schema.actions.c.id)).all()
    assert stored_actions == sorted(a.id for a in second.actions())
    assert len(store.feedback_for(["t"])) == 4  # stable feedback ids: not duplicated


def test_reimport_keeps_an_opt_in(store: Store) -> None:
    store.import_traces([make_record(make_trace("t"))])
    store.set_contribute("t", True, owner="local")
    store.import_traces([make_record(make_trace("t"))])
    assert store.get_trace("t").contribute is True


def test_same_trace_twice_in_one_call_is_a_reimport(store: Store) -> None:
    summary = store.import_traces([make_record(make_trace("t", turns=1)),
                                   make_record(make_trace("t", turns=2))])
    assert (summary.imported, summary.updated) == (1, 1)
    assert store.get_trace("t") == replace(make_trace("t", turns=2), version=2)


def test_ownership_conflict_raises_and_writes_nothing(store: Store) -> None:
    store.import_traces([make_record(make_trace("mine", owner="ana"))])
    records = [make_record(make_trace("new", owner="bo"), "b.jsonl:1"),
               make_record(make_trace("mine", owner="bo", text="takeover"), "b.jsonl:2")]
    with pytest.raises(OwnershipError, match=r"mine.*b\.jsonl:2"):
        store.import_traces(records)
    assert store.trace_ids() == ["mine"]
    assert store.get_trace("mine") == make_trace("mine", owner="ana")


def test_error_from_the_record_iterator_mid_batch_leaves_nothing_written(store: Store) -> None:
    earlier = make_trace("old", turns=1)
    store.import_traces([make_record(earlier, feedback=feedback_on(earlier))])

    def records() -> Iterator:
        for i in range(1200):  # more than two chunks are written before the failure
            yield make_record(make_trace(f"n{i}", turns=1), f"big.jsonl:{i + 1}")
        yield make_record(make_trace("old", turns=4))  # a reimport, then the failure
        raise InputError("expected a JSON object", file="big.jsonl", record="1202",
                         field="messages")

    with pytest.raises(InputError, match="big.jsonl.*1202"):
        store.import_traces(records())
    assert store.trace_ids() == ["old"]
    assert store.get_trace("old") == earlier
    assert len(store.feedback_for(["old"])) == 4


def test_invalid_trace_is_rejected_naming_record_and_field(store: Store) -> None:
    bad = Trace("bad", (Message("user", "hi"), Message("tool", "?", tool_call_id="nope")))
    with pytest.raises(InputError) as caught:
        store.import_traces([make_record(make_trace("ok")), make_record(bad, "x.jsonl:7")])
    assert (caught.value.file, caught.value.record, caught.value.field) == \
        ("x.jsonl", "7", "messages[1].tool_call_id")
    assert store.trace_ids() == []


def test_feedback_imports_with_forward_references_and_counts(store: Store) -> None:
    a, b = make_trace("a"), make_trace("b")
    summary = store.import_traces([
        make_record(a, feedback=[*feedback_on(a), comparison(a, b)]),  # b comes later
        make_record(b, feedback=feedback_on(b)),
    ])
    assert (summary.comments, summary.ratings, summary.comparisons, summary.outcomes) == \
        (2, 4, 1, 2)
    assert set(store.feedback_for(["a", "b"])) == {*feedback_on(a), *feedback_on(b),
                                                   comparison(a, b)}
    assert comparison(a, b) in store.feedback_for(["b"])


def test_feedback_naming_an_unknown_trace_or_action_fails_the_import(store: Store) -> None:
    a = make_trace("a")
    with pytest.raises(InputError) as caught:
        store.import_traces([make_record(a, "f.json:3", feedback=[comparison(a, make_trace("z"))])])
    assert caught.value.field == "feedback[0].rejected_trace_id"
    comment = feedback_on(a)[0]
    wrong = replace(comment, action_id="a/m99")
    with pytest.raises(InputError, match="a/m99") as caught:
        store.import_traces([make_record(a, "f.json:4", feedback=[wrong])])
    assert (caught.value.record, caught.value.field) == ("4", "feedback[0].action_id")
    assert store.trace_ids() == []


def test_get_trace_unknown_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError, match="nope"):
        store.get_trace("nope")
    store.import_traces([make_record(make_trace("t"))])
    with pytest.raises(NotFoundError, match="missing"):
        store.get_traces(["t", "missing"])


def test_set_contribute_checks_the_owner(store: Store) -> None:
    store.import_traces([make_record(make_trace("t", owner="ana"))])
    store.set_contribute("t", True, owner="ana")
    assert store.trace_ids(contribute=True) == ["t"]
    with pytest.raises(NotFoundError):
        store.set_contribute("t", False, owner="bo")
    store.set_contribute("t", False, owner="ana")
    assert store.trace_ids(contribute=True) == []


def test_an_imported_file_is_validated_once_and_a_record_changed_since_again(
        store: Store, tmp_path, monkeypatch) -> None:
    """The importer validates each record under its limits; the store checks only what it did not
    clear: a record built elsewhere, or changed with ``replace`` after the importer's check."""
    import json

    from stash_pipeline.core import validation
    from stash_pipeline.importers import common, read_path
    from stash_pipeline.store import imports

    checked: list[str] = []

    def counting(trace: Trace, **limits) -> None:
        checked.append(trace.id)
        validation.validate_trace(trace, **limits)

    monkeypatch.setattr(common, "validate_trace", counting)
    monkeypatch.setattr(imports, "validate_trace", counting)
    file = tmp_path / "traces.jsonl"
    file.write_text("".join(json.dumps({"id": f"v{i}", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": f"hello {i}"}]}) + "\n"
        for i in range(3)))
    assert store.import_traces(read_path(file)).imported == 3
    assert checked == ["v0", "v1", "v2"]  # once each, by the importer

    [record] = list(read_path(file))[:1]
    emptied = replace(record, trace=replace(record.trace, messages=()))
    with pytest.raises(InputError, match="at least one message") as refused:
        store.import_traces([emptied])
    assert refused.value.field == "messages"
    assert checked[-1] == "v0"  # the store checked the changed record itself


def test_sqlite_bulk_inserts_store_what_sqlalchemy_would(tmp_path) -> None:
    """insert_rows on SQLite binds through the driver itself: every value (JSON, null JSON,
    booleans, Python-side timestamps) reads back as SQLAlchemy's own insert stores it."""
    import sqlalchemy as sa

    from stash_pipeline.store import schema
    from stash_pipeline.store.batching import insert_rows
    from stash_pipeline.store.imports import trace_row

    traces = [make_trace("a", text="ünï"), replace(make_trace("b", turns=0), metadata={},
                                                    agent=None, tools=())]
    rows = [trace_row(t, t.actions(), version=1, contribute=i == 0) for i, t in enumerate(traces)]
    read = []
    for name, insert in (("ours", lambda c: insert_rows(c, schema.traces, rows)),
                         ("sqlalchemy", lambda c: c.execute(schema.traces.insert(), rows))):
        store = Store(f"sqlite:///{tmp_path / name}.db")
        store.migrate()
        with store.transaction() as connection:
            connection.execute(schema.accounts.insert(), [{"id": "local"}])
            insert(connection)
        with store.reading() as connection:
            read.append([row._asdict() for row in connection.execute(
                sa.select(schema.traces).order_by(schema.traces.c.id))])
        store.dispose()
    ours, theirs = read
    stamps = ("created_at", "updated_at")
    assert [{k: v for k, v in r.items() if k not in stamps} for r in ours] == \
        [{k: v for k, v in r.items() if k not in stamps} for r in theirs]
    for row in ours:
        assert all(type(row[k]) is type(theirs[0][k]) for k in stamps)
    assert ours[0]["created_at"] <= ours[1]["created_at"]  # one timestamp a row, in order
