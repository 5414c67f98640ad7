"""The OpenAI chat importer and the trace-object feedback list, on hand-written files."""

from __future__ import annotations

import json

import pytest

from stash_pipeline.core.feedback import Comment, Rating, VerifiedOutcome
from stash_pipeline.core.traces import content_trace_id
from stash_pipeline.importers import detect_format
from stash_pipeline_tests.support.importer_helpers import (
    import_error,
    read_all,
    write_json,
    write_jsonl,
)

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def weather_trace(**extra):
    return {
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            {"role": "assistant", "content": "Checking both.", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                {"id": "c2", "type": "function",
                 "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "18C"},
            {"role": "tool", "tool_call_id": "c2", "content": "9C"},
            {"role": "assistant", "content": "Paris 18C, Oslo 9C."},
        ],
        "tools": [WEATHER_TOOL],
        **extra,
    }


def test_a_trace_object_maps_onto_the_model(tmp_path):
    path = write_json(tmp_path, "t.json", weather_trace(id="t-1", agent="bot", domain="weather",
                                                       metadata={"task_id": 7}))
    [record] = read_all(path)
    trace = record.trace
    assert (trace.id, trace.agent, trace.domain, trace.task_id) == ("t-1", "bot", "weather", "7")
    assert [m.role for m in trace.messages] == ["system", "user", "assistant", "tool", "tool",
                                                "assistant"]
    calls = trace.messages[2].tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("c1", "get_weather", {"city": "Paris"}), ("c2", "get_weather", {"city": "Oslo"})]
    assert [a.local_id for a in trace.actions()] == ["m2", "m2.call0", "m2.call1", "m5"]
    assert trace.tools == (WEATHER_TOOL,)
    assert record.source == f"{path}:1"  # one line: its line number


@pytest.mark.parametrize("layout", ["object", "array", "jsonl", "pretty"])
def test_every_file_layout_reads_the_same(tmp_path, layout):
    traces = [weather_trace(id="a"), weather_trace(id="b")]
    if layout == "object":
        paths = [write_json(tmp_path, "a.json", traces[0]),
                 write_json(tmp_path, "b.json", traces[1])]
    elif layout == "array":
        paths = [write_json(tmp_path, "all.json", traces)]
    elif layout == "jsonl":
        paths = [write_jsonl(tmp_path, "all.jsonl", traces)]
    else:
        path = tmp_path / "all.json"
        path.write_text(json.dumps(traces, indent=2))
        paths = [path]
    ids = [r.trace.id for p in paths for r in read_all(p)]
    assert ids == ["a", "b"]
    assert all(detect_format(p) == "openai" for p in paths)


def test_without_an_id_the_id_comes_from_the_content(tmp_path):
    path = write_jsonl(tmp_path, "t.jsonl", [weather_trace(), weather_trace(agent="other")])
    first, second = read_all(path)
    assert first.trace.id != second.trace.id
    assert first.trace.id == content_trace_id("openai", weather_trace())
    assert [r.trace.id for r in read_all(path)] == [first.trace.id, second.trace.id]
    # Feedback added later still maps onto the same trace.
    with_feedback = write_jsonl(tmp_path, "f.jsonl", [weather_trace(
        feedback=[{"type": "rating", "value": 1}])])
    assert read_all(with_feedback)[0].trace.id == first.trace.id


def test_content_parts_developer_role_and_flat_calls(tmp_path):
    path = write_json(tmp_path, "t.json", {"id": "p", "model": "gpt-x", "messages": [
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Look"},
                                     {"type": "image_url", "image_url": {"url": "x"}},
                                     {"type": "text", "text": "here"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "k", "name": "search", "arguments": ""}]},
        {"role": "tool", "tool_call_id": "k", "content": "none", "error": True},
    ]})
    [record] = read_all(path)
    trace = record.trace
    assert trace.agent == "gpt-x"
    assert trace.messages[0].role == "system" and trace.messages[0].content == "Be brief."
    assert trace.messages[1].content == "Look\nhere"
    assert trace.messages[2].tool_calls[0].arguments == {}
    assert trace.messages[3].error is True


def test_unicode_long_messages_and_empty_assistant_turns(tmp_path):
    long_text = "très long 長い " * 100_000
    path = write_jsonl(tmp_path, "t.jsonl", [{"id": "u", "messages": [
        {"role": "user", "content": "Ünïcödé ✓ 🚀 \u0007 mixed"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": long_text},
        {"role": "assistant", "content": "   "},
        {"role": "assistant", "content": "ok 🚀"},
    ]}])
    [record] = read_all(path)
    trace = record.trace
    assert trace.messages[0].content == "Ünïcödé ✓ 🚀 \u0007 mixed"
    assert trace.messages[2].content == long_text
    assert [a.local_id for a in trace.actions()] == ["m4"]  # empty turns are no actions


def test_generated_call_ids_are_stable(tmp_path):
    path = write_json(tmp_path, "t.json", {"id": "g", "messages": [
        {"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": "{}"}},
                                             {"function": {"name": "b", "arguments": "{}"}}]}]})
    [record] = read_all(path)
    assert [c.id for c in record.trace.messages[0].tool_calls] == ["m0.call0", "m0.call1"]


def test_feedback_list_targets(tmp_path):
    path = write_json(tmp_path, "t.json", weather_trace(id="f", feedback=[
        {"type": "comment", "text": "Good plan", "action_id": "m2"},
        {"type": "rating", "value": -1, "action_id": "m2.call1", "author": "ann"},
        {"type": "rating", "value": 1, "message_index": 2},
        {"type": "comment", "text": "Wrong city", "tool_call_id": "c2"},
        {"type": "comment", "text": "Nice overall"},
        {"type": "rating", "value": 0.5},
        {"type": "outcome", "reward": 1.0, "source": "checker"},
    ]))
    [record] = read_all(path)
    feedback = record.feedback
    comments = [f for f in feedback if isinstance(f, Comment)]
    ratings = [f for f in feedback if isinstance(f, Rating)]
    outcomes = [f for f in feedback if isinstance(f, VerifiedOutcome)]
    assert [(c.action_id, c.text) for c in comments] == [
        ("f/m2", "Good plan"), ("f/m2.call1", "Wrong city"), (None, "Nice overall")]
    assert [(r.action_id, r.value, r.author) for r in ratings] == [
        ("f/m2.call1", -1.0, "ann"),
        ("f/m2", 1.0, None), ("f/m2.call0", 1.0, None), ("f/m2.call1", 1.0, None),
        (None, 0.5, None)]
    assert [(o.reward, o.source, o.trace_id) for o in outcomes] == [(1.0, "checker", "f")]
    assert len({f.id for f in feedback}) == len(feedback)
    assert [f.id for f in read_all(path)[0].feedback] == [f.id for f in feedback]


@pytest.mark.parametrize(("item", "field", "reason"), [
    ({"type": "vote", "value": 1}, "feedback[0].type", "unknown feedback type"),
    ({"type": "rating", "value": "high"}, "feedback[0].value", "expected a number"),
    ({"type": "rating", "value": 1, "action_id": "m9"}, "feedback[0].action_id", "no action"),
    ({"type": "rating", "value": 1, "message_index": 1}, "feedback[0].message_index",
     "no action to rate"),
    ({"type": "comment", "text": "x", "tool_call_id": "zz"}, "feedback[0].tool_call_id",
     "no tool call"),
    ({"type": "comment", "text": " "}, "feedback[0].text", "non-empty text"),
    ({"type": "outcome", "reward": 1, "action_id": "m2"}, "feedback[0]", "takes no target"),
    ({"type": "rating", "value": 1, "action_id": "m2", "message_index": 2},
     "feedback[0].message_index", "at most one"),
    # A misspelt target must not make a step rating a trace rating.
    ({"type": "rating", "value": 1, "action": "m2"}, "feedback[0].action", "unknown field"),
    ({"type": "comment", "text": "x", "messageIndex": 2}, "feedback[0].messageIndex",
     "unknown field"),
    ({"type": "review", "comparison_id": "c", "reviewer": "r", "action_id": "m2"},
     "feedback[0].action_id", "unknown field"),
])
def test_bad_feedback_names_the_field(tmp_path, item, field, reason):
    path = write_jsonl(tmp_path, "t.jsonl",
                       [weather_trace(id="ok"), weather_trace(feedback=[item])])
    error = import_error(path)
    assert (error.file, error.record, error.field) == (str(path), "line 2", field)
    assert reason in error.reason
