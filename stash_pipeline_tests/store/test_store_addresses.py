"""Action addresses cannot be ambiguous: `<trace id>/<action>` resolves to one trace, and
ownership is checked on the trace the action belongs to.

The issue: account A owned trace `t` and account B trace `t/x`; feedback targets were split at the
first `/`, so `feedback rate t/x/m2.call0 -1 --owner A` succeeded on B's action, B's own rating
was refused, and `pairs preview --all-traces` then failed for everyone.
"""

from __future__ import annotations

import json

import pytest

from stash_pipeline.cli import main
from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.feedback import Rating
from stash_pipeline.store import Store, schema
from stash_pipeline.store.imports import action_row, trace_row
from stash_pipeline_tests.support.store_samples import make_record, make_trace


def test_a_trace_id_with_a_slash_is_refused_at_import(store: Store, tmp_path,
                                                      monkeypatch, capsys) -> None:
    store.import_traces([make_record(make_trace("t", owner="ana"))])
    with pytest.raises(InputError) as caught:
        store.import_traces([make_record(make_trace("t/x", owner="bo"), "f.jsonl:3")])
    error = caught.value
    assert (error.file, error.record, error.field) == ("f.jsonl", "3", "id")
    assert "cannot contain '/'" in error.reason
    assert store.trace_ids() == ["t"]
    # From a file, the error names the file and the line.
    path = tmp_path / "slash.jsonl"
    path.write_text(json.dumps({"id": "t/x", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) + "\n")
    monkeypatch.setenv("DATABASE_URL", store.url)
    assert main(["import", str(path), "--owner", "bo"]) == 2
    err = capsys.readouterr().err
    assert f"file {path}, record line 1, field 'id'" in err and "cannot contain '/'" in err


def store_bypassing_validation(store: Store, trace) -> None:
    """A trace with a '/' in its id, as a store from before the rule may hold one."""
    with store.transaction() as connection:
        connection.execute(schema.accounts.insert().values(id=trace.owner))
        connection.execute(schema.traces.insert().values(
            **trace_row(trace, trace.actions(), version=1, contribute=False)))
        connection.execute(schema.actions.insert(),
                           [action_row(trace, a) for a in trace.actions()])


def test_an_action_resolves_to_its_own_trace_and_owner(store: Store, monkeypatch,
                                                       capsys) -> None:
    store.import_traces([make_record(make_trace("t", owner="ana"))])
    store_bypassing_validation(store, make_trace("t/x", owner="bo"))
    monkeypatch.setenv("DATABASE_URL", store.url)

    # ana owns `t`, not `t/x`: the address resolves to t/x, which is not hers.
    assert main(["feedback", "rate", "t/x/m2.call0", "-1", "--owner", "ana"]) == 2
    assert "does not exist" in capsys.readouterr().err
    # Naming her own trace with bo's action is refused too: the action is t/x's.
    with pytest.raises(NotFoundError):
        store.add_feedback([Rating("r", "t", -1.0, action_id="t/x/m2.call0")], owner="ana")
    with pytest.raises(NotFoundError):
        store.add_feedback([Rating("r", "t", -1.0, action_id="t/x/m2.call0")])
    assert store.feedback_for(["t", "t/x"]) == []

    # bo's own rating of his action is stored, on his trace.
    assert main(["feedback", "rate", "t/x/m2.call0", "1", "--owner", "bo", "--json"]) == 0
    capsys.readouterr()
    [rating] = store.feedback_for(["t/x"])
    assert (rating.trace_id, rating.action_id) == ("t/x", "t/x/m2.call0")
    assert store.feedback_for(["t"]) == []

    assert main(["pairs", "preview", "--all-traces", "--owner", "bo", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["traces"] == 1 and report["error"] is not None  # one rating: no pair, no crash
