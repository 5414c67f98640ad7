"""Bad input: each case is an InputError naming the file, the record and the field."""

from __future__ import annotations

import json

import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.importers import read_path
from stash_pipeline_tests.support.importer_helpers import (
    import_error,
    read_all,
    write_json,
    write_jsonl,
)

GOOD = {"id": "good", "messages": [{"role": "user", "content": "hi"},
                                   {"role": "assistant", "content": "hello"}]}


def call_message(arguments):
    return {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]}


@pytest.mark.parametrize(("record", "field", "reason"), [
    ({"id": "x"}, "messages", "needs 'messages'"),
    ({"role": "user", "content": "hi"}, "messages", "looks like a single message"),
    ({"messages": "hi"}, "messages", "expected a JSON array"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "unknown role"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content",
     "expected a JSON array"),
    ({"messages": [call_message("{}"), {"role": "tool", "tool_call_id": "zz", "content": "x"}]},
     "messages[1].tool_call_id", "matches no earlier tool call"),
    ({"messages": [call_message("[1, 2]")]}, "messages[0].tool_calls[0].function.arguments",
     "must be a JSON object"),
    ({"messages": [call_message("\"text\"")]}, "messages[0].tool_calls[0].function.arguments",
     "must be a JSON object"),
    ({"messages": [call_message("{\"a\": ")]}, "messages[0].tool_calls[0].function.arguments",
     "not valid JSON"),
    ({"messages": [call_message(["a"])]}, "messages[0].tool_calls[0].function.arguments",
     "must be a JSON object"),
    ({"messages": [{"role": "user", "tool_calls": [{"id": "c", "name": "f"}]}]},
     "messages[0].tool_calls", "only assistant"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "arguments": {}}]}]},
     "messages[0].tool_calls[0].name", "needs a name"),
    ({"messages": []}, "messages", "at least one message"),
    ({"messages": [GOOD["messages"][0]], "metadata": [1]}, "metadata", "expected a JSON object"),
    ({"messages": [GOOD["messages"][0]], "tools": [{"description": "x"}]}, "tools[0].name",
     "needs a name"),
])
def test_bad_openai_records(tmp_path, record, field, reason):
    path = write_jsonl(tmp_path, "bad.jsonl", [GOOD, GOOD, record])
    error = import_error(path, format="openai")
    assert (error.file, error.record, error.field) == (str(path), "line 3", field)
    assert reason in error.reason
    assert str(path) in str(error) and "line 3" in str(error)


def test_malformed_json_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + '{"messages": [}\n')
    error = import_error(path)
    assert (error.file, error.record) == (str(path), "line 3")
    assert "malformed JSON" in error.reason

    array = tmp_path / "bad.json"
    array.write_text("[\n" + json.dumps(GOOD) + ",\n" + json.dumps(GOOD) + ",\n  {\"id\": oops}\n]")
    error = import_error(array)
    assert (error.file, error.record) == (str(array), "line 4")

    document = tmp_path / "doc.json"
    document.write_text('{\n  "messages": [\n    {"role": "user" "content": "x"}\n  ]\n}\n')
    assert import_error(document).record == "line 3"


@pytest.mark.parametrize("content", ["", "   \n\n\t", "\ufeff"])
def test_an_empty_file(tmp_path, content):
    path = tmp_path / "empty.json"
    path.write_text(content, encoding="utf-8")
    error = import_error(path)
    assert error.file == str(path)
    assert "empty" in error.reason
    assert "empty" in import_error(path, format="openai").reason


def test_files_without_records(tmp_path):
    assert "no records" in import_error(write_json(tmp_path, "a.json", [])).reason
    assert "simulations" in import_error(
        write_json(tmp_path, "t.json", {"info": {}, "simulations": []})).reason


def test_a_record_over_the_size_limit(tmp_path):
    big = {"messages": [{"role": "user", "content": "x" * 50_000}]}
    path = write_jsonl(tmp_path, "big.jsonl", [GOOD, big])
    error = import_error(path, max_record_bytes=10_000)
    assert (error.file, error.record) == (str(path), "line 2")
    assert "larger than the limit of 10000 bytes" in error.reason
    assert len(read_all(path, max_record_bytes=100_000)) == 2

    array = tmp_path / "big.json"
    array.write_text(json.dumps([GOOD, GOOD, big], indent=1))
    assert import_error(array, max_record_bytes=10_000).record == "index 2"

    document = tmp_path / "doc.json"
    document.write_text(json.dumps(big, indent=1))
    assert import_error(document, max_record_bytes=10_000).record == "document"

    simulations = tmp_path / "tau2.json"
    simulations.write_text(json.dumps({"info": {}, "simulations": [
        {"id": "s0", "messages": GOOD["messages"]}, {"id": "s1", "messages": big["messages"]}]}))
    assert import_error(simulations, max_record_bytes=10_000).record == "simulations[1]"


def test_unknown_formats_paths_and_shapes(tmp_path):
    with pytest.raises(InputError) as caught:
        read_path(tmp_path, format="csv")
    assert caught.value.field == "format"
    assert "no such file" in import_error(tmp_path / "missing.json").reason
    assert "no trace files" in import_error(tmp_path).reason
    unknown = write_jsonl(tmp_path, "u.jsonl", [{"rows": []}])
    error = import_error(unknown)
    assert (error.record, "cannot tell the format") == ("line 1", error.reason[:22])
    not_json = tmp_path / "n.jsonl"
    not_json.write_text("hello\n")
    assert import_error(not_json).record == "line 1"
    latin = tmp_path / "l.jsonl"
    latin.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"messages": "\xe9"}\n')
    error = import_error(latin)
    assert (error.record, "not UTF-8") == ("line 2", error.reason[:9])


def test_bad_tau2_simulations(tmp_path):
    def run(simulation):
        return {"info": {"environment_info": {"domain_name": "d", "policy": "p"}},
                "simulations": [{"id": "ok", "messages": GOOD["messages"]}, simulation]}

    cases = [
        ({"messages": []}, "id", "needs an id"),
        ({"id": "s"}, "messages", "missing required field"),
        ({"id": "s", "messages": [{"role": "assistant", "tool_calls": [
            {"id": "c", "name": "f", "arguments": [1]}]}]}, "messages[0].tool_calls[0].arguments",
         "must be a JSON object"),
        ({"id": "s", "messages": [{"role": "tool", "id": "nope", "content": "x"}]},
         "messages[1].tool_call_id", "matches no earlier tool call"),
        ({"id": "s", "messages": GOOD["messages"], "reward_info": {"reward": "yes"}},
         "reward_info.reward", "expected a number"),
    ]
    for simulation, field, reason in cases:
        path = write_json(tmp_path, "run.json", run(simulation))
        error = import_error(path, format="tau2")
        assert (error.file, error.record, error.field) == (str(path), "simulations[1]", field)
        assert reason in error.reason


def test_bad_agentprocessbench_labels(tmp_path):
    row = {"query_index": 1, "total_index": 1, "data_source": "d", "final_label": 1,
           "messages": GOOD["messages"]}
    cases = [
        ({**row, "step_labels": {"0": 1}}, "step_labels.0", "has no action"),
        ({**row, "step_labels": {"9": 1}}, "step_labels.9", "out of range"),
        ({**row, "step_labels": {"one": 1}}, "step_labels.one", "message index"),
        ({**row, "step_labels": {"1": "good"}}, "step_labels.1", "expected a number"),
        ({**row, "step_labels": {}, "tools": "not a literal ["}, "tools", "tool schemas"),
    ]
    for record, field, reason in cases:
        path = write_jsonl(tmp_path, "apb.jsonl", [record])
        error = import_error(path)
        assert (error.record, error.field) == ("line 1", field)
        assert reason in error.reason
