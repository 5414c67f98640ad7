"""The OpenTelemetry GenAI importer on hand-written OTLP JSON exports."""

from __future__ import annotations

import json
import uuid

from stash_pipeline.importers import detect_format
from stash_pipeline_tests.support.importer_helpers import (
    import_error,
    read_all,
    write_json,
    write_jsonl,
)
from stash_pipeline_tests.support.otel_samples import (
    ANSWER,
    CALL,
    QUESTION,
    RESULT,
    SYSTEM,
    TRACE,
    attribute,
    export,
    span,
)


def weather_spans():
    agent = span("a0", 100, 900, agent="weather-agent", operation="invoke_agent",
                 inputs=[QUESTION], outputs=[ANSWER])
    chat1 = span("c1", 200, 300, parent="a0", inputs=[QUESTION], outputs=[CALL], system=SYSTEM)
    tool = span("t1", 310, 320, parent="a0", operation="execute_tool")
    chat2 = span("c2", 400, 800, parent="a0", inputs=[QUESTION, CALL, RESULT], outputs=[ANSWER],
                 system=SYSTEM)
    return [chat2, agent, tool, chat1]  # file order is not time order


def test_a_conversation_is_assembled_once_from_repeated_histories(tmp_path):
    path = write_json(tmp_path, "otel.json", export(*weather_spans()))
    assert detect_format(path) == "otel"
    [record] = read_all(path)
    trace = record.trace
    assert trace.id == "conv-1"
    assert trace.agent == "weather-agent"
    assert [(m.role, m.content) for m in trace.messages] == [
        ("system", "You are a weather agent."), ("user", "Weather in Paris?"), ("assistant", ""),
        ("tool", "18C"), ("assistant", "18C in Paris.")]
    [call] = trace.messages[2].tool_calls
    assert (call.id, call.name, call.arguments) == ("c1", "get_weather", {"city": "Paris"})
    assert (trace.messages[3].tool_call_id, trace.messages[3].name) == ("c1", "get_weather")
    assert [a.local_id for a in trace.actions()] == ["m2.call0", "m4"]


def test_conversations_across_lines_are_grouped_and_interleaving_is_kept_apart(tmp_path):
    a1 = span("a1", 100, 200, conversation="A", inputs=[QUESTION], outputs=[CALL])
    b1 = span("b1", 150, 250, trace="b" * 32, conversation="B", inputs=[QUESTION],
              outputs=[ANSWER])
    a2 = span("a2", 300, 400, conversation="A", inputs=[QUESTION, CALL, RESULT], outputs=[ANSWER])
    path = write_jsonl(tmp_path, "otel.jsonl", [export(a1), export(b1), export(a2)])
    records = read_all(path)
    assert [r.trace.id for r in records] == ["B", "A"]  # each built when its last span is read
    assert [len(r.trace.messages) for r in records] == [2, 4]
    assert records[1].source == f"{path}:1"


def test_without_conversation_ids_spans_group_by_otlp_trace(tmp_path):
    chat1 = span("c1", 200, 300, conversation=None, inputs=[QUESTION], outputs=[CALL])
    chat2 = span("c2", 400, 500, conversation=None, inputs=[QUESTION, CALL, RESULT],
                 outputs=[ANSWER])
    path = write_json(tmp_path, "otel.json", export(chat1, chat2))
    [record] = read_all(path)
    assert record.trace.id == str(uuid.UUID(hex=TRACE))
    assert len(record.trace.messages) == 4
    # A span without an id joins the one conversation of its OTLP trace.
    named = write_json(tmp_path, "named.json", export(
        span("c1", 200, 300, conversation="conv-9", inputs=[QUESTION], outputs=[CALL]),
        span("c2", 400, 500, conversation=None, inputs=[QUESTION, CALL, RESULT], outputs=[ANSWER])))
    [joined] = read_all(named)
    assert joined.trace.id == "conv-9" and len(joined.trace.messages) == 4


def test_spans_that_send_only_new_messages_are_appended(tmp_path):
    follow_up = {"role": "user", "parts": [{"type": "text", "content": "And tomorrow?"}]}
    later = {"role": "assistant", "parts": [{"type": "text", "content": "Rain."}]}
    path = write_json(tmp_path, "otel.json", export(
        span("c1", 100, 200, inputs=[QUESTION], outputs=[ANSWER]),
        span("c2", 300, 400, inputs=[follow_up], outputs=[later])))
    [record] = read_all(path)
    assert [m.content for m in record.trace.messages] == [
        "Weather in Paris?", "18C in Paris.", "And tomorrow?", "Rain."]


def test_structured_values_and_the_details_event(tmp_path):
    structured = {"key": "gen_ai.input.messages", "value": {"arrayValue": {"values": [
        {"kvlistValue": {"values": [
            {"key": "role", "value": {"stringValue": "user"}},
            {"key": "parts", "value": {"arrayValue": {"values": [{"kvlistValue": {"values": [
                {"key": "type", "value": {"stringValue": "text"}},
                {"key": "content", "value": {"stringValue": "hello"}}]}}]}}}]}}]}}}
    event_span = span("e1", 100, 200, conversation="ev")
    event_span["attributes"].append(structured)
    event_span["events"] = [{"name": "gen_ai.client.inference.operation.details",
                             "timeUnixNano": "150",
                             "attributes": [attribute("gen_ai.output.messages", [ANSWER])]}]
    [record] = read_all(write_json(tmp_path, "otel.json", export(event_span)))
    assert [(m.role, m.content) for m in record.trace.messages] == [
        ("user", "hello"), ("assistant", "18C in Paris.")]
    assert record.trace.agent == "gpt-test"  # no agent name: the model names the agent


def test_bad_spans_name_the_span_and_attribute(tmp_path):
    bad_role = span("c1", 1, 2, inputs=[{"role": "robot", "parts": []}])
    path = write_jsonl(tmp_path, "otel.jsonl", [export(bad_role)])
    error = import_error(path)
    assert (error.file, error.record, error.field) == (
        str(path), "line 1 resourceSpans[0].scopeSpans[0].spans[0]",
        "gen_ai.input.messages[0].role")

    bad_args = span("c1", 1, 2, outputs=[{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "x", "name": "f", "arguments": "[1, 2]"}]}])
    pretty = tmp_path / "args.json"  # a multi-line export: its spans are streamed one by one
    pretty.write_text(json.dumps(export(span("ok", 0, 1, conversation="other"), bad_args),
                                 indent=2))
    error = import_error(pretty)
    assert (error.record, error.field) == ("span 1", "gen_ai.output.messages[0].parts[0].arguments")

    orphan = span("c1", 1, 2, conversation="lost", inputs=[QUESTION, RESULT])
    error = import_error(write_json(tmp_path, "orphan.json", export(orphan)))
    assert (error.record, error.field) == ("conversation lost", "messages[1].tool_call_id")

    not_json = span("c1", 1, 2)
    not_json["attributes"].append({"key": "gen_ai.input.messages", "value": {"stringValue": "[{"}})
    error = import_error(write_json(tmp_path, "notjson.json", export(not_json)))
    assert error.field == "attributes.gen_ai.input.messages"

    error = import_error(write_json(tmp_path, "none.json",
                                    export(span("x", 1, 2, conversation=None))))
    assert "no GenAI spans" in error.reason
