"""The Anthropic Messages importer on hand-written files."""

from __future__ import annotations

import pytest

from stash_pipeline.core.feedback import Rating
from stash_pipeline.importers import detect_format
from stash_pipeline_tests.support.importer_helpers import (
    import_error,
    read_all,
    refund_trace,
    write_json,
    write_jsonl,
)


def test_blocks_map_onto_the_model(tmp_path):
    path = write_json(tmp_path, "a.json", refund_trace())
    assert detect_format(path) == "anthropic"
    [record] = read_all(path)
    trace = record.trace
    assert trace.agent == "claude-x"
    assert [(m.role, m.content) for m in trace.messages] == [
        ("system", "Follow the refund policy.\nBe polite."),
        ("user", "Refund order 42"),
        ("assistant", "Let me look."),
        ("tool", "order 42: shipped"),
        ("tool", "not found"),
        ("user", "Only 42 matters."),
        ("assistant", "Refund issued."),
    ]
    assistant = trace.messages[2]
    assert [(c.id, c.name, c.arguments) for c in assistant.tool_calls] == [
        ("tu1", "lookup_order", {"id": "42"}), ("tu2", "lookup_order", {"id": "43"})]
    tool_results = [m for m in trace.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.name, m.error) for m in tool_results] == [
        ("tu1", "lookup_order", False), ("tu2", "lookup_order", True)]
    assert trace.tools == ({"type": "function", "function": {
        "name": "lookup_order", "description": "Find an order",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}},)
    assert [a.local_id for a in trace.actions()] == ["m2", "m2.call0", "m2.call1", "m6"]


def test_a_string_system_and_the_explicit_format(tmp_path):
    # Plain text turns read the same in both formats: without a hint it is OpenAI, the default.
    plain = {"messages": [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "yo"}]}
    path = write_jsonl(tmp_path, "p.jsonl", [plain])
    assert detect_format(path) == "openai"
    [record] = read_all(path, format="anthropic")
    assert [m.role for m in record.trace.messages] == ["user", "assistant"]
    with_system = write_jsonl(tmp_path, "s.jsonl", [{"system": "Be brief.", **plain}])
    assert detect_format(with_system) == "anthropic"
    assert read_all(with_system)[0].trace.messages[0].content == "Be brief."


def test_feedback_message_index_counts_source_messages(tmp_path):
    path = write_json(tmp_path, "a.json", refund_trace(feedback=[
        {"type": "rating", "value": 1, "message_index": 3},
        {"type": "rating", "value": -1, "tool_call_id": "tu2"},
    ]))
    [record] = read_all(path)
    ratings = [(f.action_id, f.value) for f in record.feedback if isinstance(f, Rating)]
    assert ratings == [("a-1/m6", 1.0), ("a-1/m2.call1", -1.0)]
    bad = write_json(tmp_path, "b.json", refund_trace(feedback=[
        {"type": "rating", "value": 1, "message_index": 2}]))
    error = import_error(bad)
    assert error.field == "feedback[0].message_index"
    assert "not an assistant message" in error.reason


@pytest.mark.parametrize(("messages", "field", "reason"), [
    ([{"role": "system", "content": "x"}], "messages[0].role", "unknown role"),
    ([{"role": "user",
       "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}],
     "messages[0].content[0].tool_use_id", "matches no earlier tool_use"),
    ([{"role": "assistant",
       "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}],
     "messages[0].content[0].input", "must be a JSON object"),
    ([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}],
     "messages[0].content[0].name", "needs a name"),
    ([{"role": "user", "content": [{"type": "text", "text": 5}]}],
     "messages[0].content[0].text", "needs a string"),
])
def test_bad_blocks_name_the_field(tmp_path, messages, field, reason):
    path = write_json(tmp_path, "a.json", [refund_trace(), {"system": "s", "messages": messages}])
    error = import_error(path, format="anthropic")
    assert (error.file, error.record, error.field) == (str(path), "index 1", field)
    assert reason in error.reason
