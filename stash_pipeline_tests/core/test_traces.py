import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.serialize import trace_from_dict, trace_to_dict
from stash_pipeline.core.traces import (
    Message,
    ToolCall,
    Trace,
    action_context,
    action_messages,
    content_trace_id,
    summarize,
)
from stash_pipeline.core.validation import validate_trace


def make_trace() -> Trace:
    return Trace(
        id="t1",
        messages=(
            Message("system", "be nice"),
            Message("user", "book a flight"),
            Message("assistant", "Looking it up.", tool_calls=(
                ToolCall("c1", "search", {"q": "flights"}),
                ToolCall("c2", "price", {"id": 3}),
            )),
            Message("tool", "found", tool_call_id="c1"),
            Message("tool", "$10", tool_call_id="c2"),
            Message("assistant", ""),  # empty turn: no text action
            Message("assistant", "Booked. ✈️"),
        ),
        metadata={"task_id": 7, "evaluation_context": "airline"},
    )


def test_actions_are_texts_and_tool_calls_of_assistant_messages_only():
    ids = [a.id for a in make_trace().actions()]
    assert ids == ["t1/m2", "t1/m2.call0", "t1/m2.call1", "t1/m6"]


def test_action_ids_are_stable_across_identical_traces():
    assert [a.id for a in make_trace().actions()] == [a.id for a in make_trace().actions()]


def test_context_of_second_call_holds_text_and_first_call_never_later_messages():
    trace = make_trace()
    second = trace.action("m2.call1")
    context = action_context(trace, second)
    assert [m.role for m in context] == ["system", "user", "assistant"]
    assert context[-1].content == "Looking it up."
    assert [c.id for c in context[-1].tool_calls] == ["c1"]
    cut = action_messages(trace, second)
    assert [c.id for c in cut[-1].tool_calls] == ["c1", "c2"]
    assert len(cut) == 3  # the tool results after the call are not visible


def test_context_of_text_action_is_everything_before_its_message():
    trace = make_trace()
    text = trace.action("t1/m2")
    assert action_context(trace, text) == trace.messages[:2]
    assert action_messages(trace, text)[-1].tool_calls == ()


def test_unknown_action_names_the_trace():
    with pytest.raises(KeyError, match="trace t1 has no action 'm9'"):
        make_trace().action("m9")


def test_summary_and_task_id():
    trace = make_trace()
    assert summarize([trace]) == {"traces": 1, "messages": 7, "actions": 4, "tool_calls": 2}
    assert trace.task_id == "7"
    assert trace.evaluation_context == "airline"


def test_json_form_round_trips():
    trace = make_trace()
    assert trace_from_dict(trace_to_dict(trace)) == trace


def test_content_ids_are_deterministic_and_distinct():
    assert content_trace_id("openai", {"a": 1}) == content_trace_id("openai", {"a": 1})
    assert content_trace_id("openai", {"a": 1}) != content_trace_id("openai", {"a": 2})


@pytest.mark.parametrize(
    ("messages", "field", "reason"),
    [
        ((), "messages", "at least one message"),
        ((Message("robot", "hi"),), "messages[0].role", "unknown role 'robot'"),
        ((Message("tool", "x", tool_call_id="nope"),), "messages[0].tool_call_id", "matches no"),
        ((Message("assistant", "", tool_calls=(ToolCall("c", "f", [1]),)),),  # type: ignore[arg-type]
         "messages[0].tool_calls[0].arguments", "JSON object"),
        ((Message("user", "", tool_calls=(ToolCall("c", "f", {}),)),), "messages[0].tool_calls",
         "only assistant"),
    ],
)
def test_validation_names_the_field(messages, field, reason):
    with pytest.raises(InputError, match=reason) as caught:
        validate_trace(Trace(id="t", messages=messages))
    assert caught.value.field == field


def test_located_error_names_file_record_and_field():
    error = InputError("bad", field="messages[2].role").located(file="a.jsonl", record="line 4")
    assert str(error) == "file a.jsonl, record line 4, field 'messages[2].role': bad"
