"""Unstorable text and numbers get the same InputError on SQLite and PostgreSQL, at import, from the
feedback API and from the CLI, and nothing is stored.

Before one validation existed, a NUL, a 257-character agent or NaN in metadata imported on SQLite
but crashed PostgreSQL, a NaN rating crashed SQLite but was stored on PostgreSQL, and a lone
surrogate crashed both with a traceback naming no record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

import pytest

from stash_pipeline.cli import main
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import (
    Comment,
    Rating,
    ReviewedComparison,
    VerifiedOutcome,
    feedback_id,
)
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.traces import Trace
from stash_pipeline.store import Store
from stash_pipeline_tests.support.store_samples import make_record, make_trace

LONG = "n" * 257
DEEP: object = 1
for _ in range(5000):  # far past Python's recursion limit: the check must not recurse
    DEEP = {"a": DEEP}


def with_call(trace: Trace, **call_fields) -> Trace:
    messages = list(trace.messages)
    call = replace(messages[2].tool_calls[0], **call_fields)
    messages[2] = replace(messages[2], tool_calls=(call, *messages[2].tool_calls[1:]))
    return replace(trace, messages=tuple(messages))


def with_content(trace: Trace, index: int, content: str) -> Trace:
    messages = list(trace.messages)
    messages[index] = replace(messages[index], content=content)
    return replace(trace, messages=tuple(messages))


def rating(value: float, **fields) -> Callable[[Trace], Rating]:
    return lambda t: Rating(feedback_id("rating", t.id), t.id, value, **fields)


T = make_trace("t")
# (case, the record to import, the field named, words of the reason)
IMPORT_CASES: list[tuple[str, ImportedTrace, str, str]] = [
    ("NUL in message text", make_record(with_content(T, 1, "a\x00b")), "messages[1].content",
     "NUL character"),
    ("NUL in the agent", make_record(replace(T, agent="gpt\x00")), "agent", "NUL character"),
    ("NUL in metadata", make_record(replace(T, metadata={"note": "a\x00"})), "metadata.note",
     "NUL character"),
    ("NUL in a metadata key", make_record(replace(T, metadata={"a\x00": 1})), "metadata.a\x00",
     "NUL character"),
    ("NUL in tool arguments", make_record(with_call(T, arguments={"q": "\x00"})),
     "messages[2].tool_calls[0].arguments.q", "NUL character"),
    ("lone surrogate in text", make_record(with_content(T, 1, "x\ud800")), "messages[1].content",
     "lone surrogate (\\ud800)"),
    ("lone surrogate in the domain", make_record(replace(T, domain="\udc00")), "domain",
     "lone surrogate"),
    ("lone surrogate in arguments", make_record(with_call(T, arguments={"q": ["\udfff"]})),
     "messages[2].tool_calls[0].arguments.q[0]", "lone surrogate"),
    ("agent over 256", make_record(replace(T, agent=LONG)), "agent", "over the limit of 256"),
    ("domain over 256", make_record(replace(T, domain=LONG)), "domain", "over the limit of 256"),
    ("task id over 256", make_record(replace(T, metadata={"task_id": LONG})), "metadata.task_id",
     "over the limit of 256"),
    ("tool name over 256", make_record(with_call(T, name=LONG)),
     "messages[2].tool_calls[0].name", "over the limit of 256"),
    ("NaN in metadata", make_record(replace(T, metadata={"score": float("nan")})),
     "metadata.score", "finite number"),
    ("infinity in arguments", make_record(with_call(T, arguments={"x": float("inf")})),
     "messages[2].tool_calls[0].arguments.x", "finite number"),
    ("metadata 5000 levels deep", make_record(replace(T, metadata={"deep": DEEP})),
     "metadata.deep" + ".a" * 99, "nested deeper than the limit of 100"),
    ("not JSON in metadata", make_record(replace(T, metadata={"s": {1, 2}})), "metadata.s",
     "not a JSON value"),
    ("a / in the trace id", make_record(make_trace("t/x")), "id", "cannot contain '/'"),
    ("trace id over 64", make_record(make_trace("t" * 65)), "id", "over the limit of 64"),
    ("owner over 64", make_record(make_trace("t", owner="o" * 65)), "owner",
     "over the limit of 64"),
    ("NaN rating", make_record(T, feedback=[rating(float("nan"))(T)]), "feedback[0].value",
     "finite number"),
    ("infinite outcome", make_record(T, feedback=[VerifiedOutcome("o", "t", float("-inf"))]),
     "feedback[0].reward", "finite number"),
    ("NUL in a comment", make_record(T, feedback=[Comment("c", "t", "bad\x00")]),
     "feedback[0].text", "NUL character"),
    ("author over 256", make_record(T, feedback=[rating(1.0, author=LONG)(T)]),
     "feedback[0].author", "over the limit of 256"),
    ("source over 256", make_record(T, feedback=[VerifiedOutcome("o", "t", 1.0, source=LONG)]),
     "feedback[0].source", "over the limit of 256"),
]

FEEDBACK_CASES: list[tuple[str, object, str, str]] = [
    ("NaN rating", rating(float("nan"))(T), "value", "finite number"),
    ("infinite rating", rating(float("inf"), action_id="t/m2")(T), "value", "finite number"),
    ("author over 256", rating(1.0, author=LONG)(T), "author", "over the limit of 256"),
    ("reviewer over 256", ReviewedComparison("c", "t", "t", reviewer=LONG), "reviewer",
     "over the limit of 256"),
    ("NUL in a rationale", ReviewedComparison("c", "t", "t", rationale="\x00"), "rationale",
     "NUL character"),
    ("lone surrogate in a comment", Comment("k", "t", "\ud83d"), "text", "lone surrogate"),
    ("source over 256", VerifiedOutcome("o", "t", 1.0, source=LONG), "source",
     "over the limit of 256"),
    ("unknown review status", ReviewedComparison("c", "t", "t", status="maybe"), "status",
     "unknown status"),
]


def import_outcome(store: Store, record: ImportedTrace) -> tuple[str, str | None, str | None]:
    try:
        store.import_traces([make_record(make_trace("ok")), record])
    except InputError as error:
        return type(error).__name__, error.field, error.reason
    return "stored", None, None


def feedback_outcome(store: Store, item) -> tuple[str, str | None, str | None]:
    try:
        store.add_feedback([item], owner="local")
    except InputError as error:
        return type(error).__name__, error.field, error.reason
    return "stored", None, None


@pytest.mark.parametrize(("case", "record", "field", "reason"), IMPORT_CASES,
                         ids=[c[0] for c in IMPORT_CASES])
def test_bad_input_at_import_is_one_clear_error(store: Store, case, record, field, reason):
    kind, got_field, got_reason = import_outcome(store, record)
    assert (kind, got_field) == ("InputError", field)
    assert reason in got_reason
    assert store.trace_ids() == []  # all or nothing: the good trace before it is not stored


@pytest.mark.parametrize(("case", "item", "field", "reason"), FEEDBACK_CASES,
                         ids=[c[0] for c in FEEDBACK_CASES])
def test_bad_feedback_is_one_clear_error(store: Store, case, item, field, reason):
    store.import_traces([make_record(T)])
    kind, got_field, got_reason = feedback_outcome(store, item)
    assert (kind, got_field) == ("InputError", field)
    assert reason in got_reason
    assert store.feedback_for(["t"]) == []


@pytest.mark.postgres
def test_both_databases_agree_on_every_case(tmp_path, postgres_store: Store) -> None:
    """Each case, run against both databases side by side, ends the same way on both."""
    sqlite = Store(f"sqlite:///{tmp_path / 'agree.db'}")
    sqlite.migrate()
    accepted = [
        make_record(replace(make_trace("edge"), agent="a" * 256, domain="\u00e9\U0001f600",
                            metadata={"task_id": "t" * 256, "bell": "\x07"})),
        make_record(make_trace("edge2"), feedback=[rating(1.0, author="b" * 256)(T)]),
    ]
    outcomes = {}
    for name, store in (("sqlite", sqlite), ("postgresql", postgres_store)):
        with postgres_store.transaction() as connection:  # a clean PostgreSQL store
            for table in ("ratings", "comments", "reviewed_comparisons", "verified_outcomes",
                          "actions", "traces"):
                connection.exec_driver_sql(f"DELETE FROM {table}")
        got = [import_outcome(store, record) for _, record, _, _ in IMPORT_CASES]
        store.import_traces([make_record(T)])
        got += [feedback_outcome(store, item) for _, item, _, _ in FEEDBACK_CASES]
        store.import_traces([make_record(make_trace("edge2"))])
        got += [import_outcome(store, record) for record in accepted]
        got.append([json.dumps(t.__dict__, default=str, sort_keys=True)
                    for t in store.get_traces(["edge"])])
        outcomes[name] = got
    sqlite.dispose()
    assert outcomes["sqlite"] == outcomes["postgresql"]
    assert outcomes["sqlite"][-3:-1] == [("stored", None, None)] * 2


@pytest.fixture
def cli(store: Store, monkeypatch, capsys):
    """Run a command against the parametrised store; return (exit code, stderr)."""
    monkeypatch.setenv("DATABASE_URL", store.url)
    store.import_traces([make_record(T), make_record(make_trace("u"))])

    def run(*argv: str) -> tuple[int, str]:
        code = main(list(argv))
        return code, capsys.readouterr().err
    return run


@pytest.mark.parametrize(("argv", "reason"), [
    (["feedback", "rate", "t/m2", "nan"], "finite number"),
    (["feedback", "rate", "t", "inf"], "finite number"),
    (["feedback", "rate", "t", "1", "--author", LONG], "over the limit of 256"),
    (["feedback", "comment", "t", "x\udcff"], "lone surrogate"),
    (["feedback", "comment", "t/m2", "fine", "--author", "\ud800"], "lone surrogate"),
    (["feedback", "compare", "t", "u", "--author", "ana", "--reviewer", LONG],
     "over the limit of 256"),
    (["feedback", "compare", "t", "t", "--author", "ana"], "two different sides"),
    (["feedback", "outcome", "t", "1", "--source", LONG], "over the limit of 256"),
    (["feedback", "outcome", "t", "1e999"], "finite number"),
    (["feedback", "rate", "t/x/m2", "1"], "error: trace t/x does not exist"),
    (["feedback", "rate", "t/message2", "1"], "'message2' is not an action"),
])
def test_bad_cli_feedback_is_refused_and_nothing_is_written(store: Store, cli, argv, reason):
    code, err = cli(*argv)
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err
    assert reason in err
    assert store.feedback_for(["t"]) == []


def test_a_bad_file_names_its_record_on_both_databases(store: Store, cli, tmp_path):
    path = tmp_path / "bad.jsonl"
    good = {"id": "g", "messages": [{"role": "user", "content": "hi"}]}
    path.write_text(json.dumps(good) + "\n" + json.dumps({
        "id": "b", "agent": "x" * 300, "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    code, err = cli("import", str(path))
    assert code == 2
    assert f"file {path}, record line 2, field 'agent'" in err and "limit of 256" in err
    path.write_text('{"id": "s", "messages": [{"role": "user", "content": "\\ud800"}]}\n')
    code, err = cli("import", str(path))
    assert code == 2 and "field 'messages[0].content'" in err and "surrogate" in err
    assert store.trace_ids() == ["t", "u"]  # what the cli fixture stored, and nothing more
