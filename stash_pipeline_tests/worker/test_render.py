"""The renderer: prefix stability on real traces, audiences, open ends, the saved template."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stash_pipeline.core.pairs import PairSide
from stash_pipeline.core.traces import Message, ToolCall, Trace, action_messages
from stash_pipeline.worker.modeling import load_tokenizer, tokenize
from stash_pipeline.worker.render import (
    CHAT_TEMPLATE,
    action_end_offsets,
    cut_at_action,
    render_side,
    render_trace,
)


@pytest.fixture(scope="module")
def tokenizer(tiny_base_model):
    return load_tokenizer(str(tiny_base_model))


def small_trace() -> Trace:
    return Trace(
        id="t1",
        messages=(
            Message("system", "Follow the refund policy."),
            Message("user", "Refund order 7."),
            Message("assistant", "Checking the order.", tool_calls=(
                ToolCall("c1", "get_order", {"order_id": 7}),
                ToolCall("c2", "get_policy", {"kind": "refund"}),
            )),
            Message("tool", '{"status": "delivered"}', tool_call_id="c1"),
            Message("tool", '{"days": 30}', tool_call_id="c2"),
            Message("assistant", "Refunded."),
        ),
        tools=({"type": "function", "function": {"name": "get_order", "parameters": {}}},),
        metadata={"evaluation_context": "Orders older than 30 days are not refundable."},
    )


@pytest.mark.parametrize("audience", ["personal", "shared"])
def test_every_action_rendering_is_a_token_prefix_of_the_real_trace(tokenizer, tau2_sample,
                                                                    audience):
    for trace in tau2_sample:
        full, offsets = action_end_offsets(tokenizer, trace, audience)
        assert len(offsets) == len(trace.actions()) >= 3
        full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        for action in trace.actions():
            prefix = render_trace(tokenizer, cut_at_action(trace, action.id), audience,
                                  open_end=True)
            assert full[: offsets[action.id]] == prefix
            # One forward pass reads the action's score at its last token: the prefix's tokens must
            # be exactly the first tokens of the whole rendering.
            prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
            assert full_ids[: len(prefix_ids)] == prefix_ids, action.id


def test_stock_qwen3_style_template_would_fail_the_prefix_check(tokenizer):
    # A template that renders only the final assistant turn differently (as Qwen3's stock one does)
    # must be caught, or one-pass scores would silently differ from per-action scores.
    broken = CHAT_TEMPLATE.replace("{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'",
                                   "{{- '<|im_start|>assistant\\n' + "
                                   "('<think>\\n\\n</think>\\n\\n' if loop.last else '')")
    assert broken != CHAT_TEMPLATE
    tokenizer = load_tokenizer(tokenizer.name_or_path)
    tokenizer.chat_template = broken
    with pytest.raises(AssertionError, match="not a prefix"):
        action_end_offsets(tokenizer, small_trace(), "personal")


def test_personal_rendering_omits_system_and_evaluation_context(tokenizer):
    trace = small_trace()
    personal = render_trace(tokenizer, trace, "personal")
    shared = render_trace(tokenizer, trace, "shared")
    assert "Follow the refund policy." not in personal
    assert "Orders older than 30 days" not in personal
    assert "Follow the refund policy." in shared
    assert "# Evaluation context\n\nOrders older than 30 days are not refundable." in shared
    # Tools are in the system turn for both audiences.
    for text in (personal, shared):
        assert text.startswith("<|im_start|>system\n")
        assert '"name": "get_order"' in text.split("<|im_end|>")[0]
    # After the system turn, the renderings agree.
    assert personal.split("<|im_end|>\n", 1)[1] == shared.split("<|im_end|>\n", 1)[1]


def test_shared_rendering_without_tools_or_system_still_carries_evaluation_context(tokenizer):
    trace = Trace(id="t2", messages=(Message("user", "hi"), Message("assistant", "hello")),
                  metadata={"evaluation_context": {"task": "greet"}})
    shared = render_trace(tokenizer, trace, "shared")
    assert shared.startswith('<|im_start|>system\n# Evaluation context\n\n'
                             '{"task": "greet"}<|im_end|>\n')
    assert render_trace(tokenizer, trace, "personal").startswith("<|im_start|>user\nhi")


def test_open_end_stops_at_the_action_and_closed_end_closes_the_turn(tokenizer):
    trace = small_trace()
    text_action = cut_at_action(trace, "t1/m2")
    call_action = cut_at_action(trace, "t1/m2.call1")
    assert render_trace(tokenizer, text_action, "personal", open_end=True).endswith(
        "Checking the order.")
    assert render_trace(tokenizer, call_action, "personal", open_end=True).endswith(
        '<tool_call>\n{"name": "get_policy", "arguments": {"kind": "refund"}}\n</tool_call>')
    assert render_trace(tokenizer, trace, "personal").endswith("Refunded.<|im_end|>\n")
    side = PairSide(call_action, "t1/m2.call1")
    assert render_side(tokenizer, side, "personal").endswith("</tool_call>")
    assert render_side(tokenizer, PairSide(trace), "personal").endswith("<|im_end|>\n")


def test_open_end_needs_a_final_assistant_message(tokenizer):
    trace = small_trace()
    with pytest.raises(ValueError, match="t1"):
        render_trace(tokenizer, trace.with_messages(trace.messages[:2]), "personal", open_end=True)


def test_every_assistant_turn_is_rendered_the_same_way(tokenizer):
    trace = small_trace()
    full = render_trace(tokenizer, trace, "personal")
    assert full.count("<|im_start|>assistant\n<think>\n\n</think>\n\n") == 2


def test_unknown_audience_is_refused(tokenizer):
    with pytest.raises(ValueError, match="audience"):
        render_trace(tokenizer, small_trace(), "public")  # type: ignore[arg-type]


def test_saved_tokenizer_keeps_template_and_left_truncation(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    reloaded = load_tokenizer(str(tmp_path))
    assert reloaded.truncation_side == "left"
    assert reloaded.chat_template == CHAT_TEMPLATE
    assert reloaded.pad_token == "<|endoftext|>"


def test_left_truncation_keeps_the_end(tiny_base_model, tau2_sample):
    tokenizer = load_tokenizer(str(tiny_base_model), max_length=64)
    text = render_trace(tokenizer, tau2_sample[0], "personal")
    full_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(full_ids) > 64
    (ids,) = tokenize(tokenizer, [text])
    assert ids == full_ids[-64:]


def test_action_messages_of_a_generated_alternative_render_open(tokenizer):
    trace = small_trace()
    action = trace.action("t1/m2.call0")
    messages = action_messages(trace, action)
    alternative = replace(messages[-1], tool_calls=(ToolCall("x", "refund", {"order_id": 7}),))
    side = PairSide(trace.with_messages(messages[:-1] + (alternative,)), "t1/m2.call0")
    assert render_side(tokenizer, side, "personal").endswith(
        'Checking the order.<tool_call>\n'
        '{"name": "refund", "arguments": {"order_id": 7}}\n</tool_call>')
