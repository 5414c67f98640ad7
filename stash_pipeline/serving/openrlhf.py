"""OpenRLHF's remote reward model protocol: ``POST /get_reward`` with ``{"query": [...]}`` (and,
from newer OpenRLHF, ``"prompts"`` and ``"labels"``), answered ``{"rewards": [...]}`` (plus
``"scores"``, which OpenRLHF's dynamic filtering reads, and ``"extra_logs"``). The route is
``routes/get_reward.py``; here queries are read back into conversations.

A query is the policy's prompt and response as one decoded text. It is read back into messages,
then scored as that conversation would be stored (its whole-trace raw reward):
- ChatML text (``<|im_start|>role ... <|im_end|>``, Qwen's and this project's templates): each
  turn a message; an assistant turn's ``<think>`` block is dropped and its ``<tool_call>`` blocks
  become tool calls; a user turn of ``<tool_response>`` blocks becomes tool results;
- a JSON conversation (any import format, or a list of messages);
- plain text that begins with its prompt (``prompts[i]``): a user turn (the prompt) and an
  assistant turn (the rest).
Padding and end-of-text tokens around a query are ignored. Queries whose conversations share
everything but their last assistant message are scored as candidates of one context, read once
(``core.reward_requests.requests_for``).
"""

from __future__ import annotations

import json
import re

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.traces import Message, ToolCall, Trace, content_trace_id
from stash_pipeline.services.rewards import read_conversation
from stash_pipeline.serving.bodies import GetRewardCall

# Tokens that pad, begin or end a decoded sequence, never part of a message.
PADDING = ("<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<s>", "</s>", "<bos>",
           "<eos>", "<pad>", "<|pad|>")
_TURN = re.compile(r"<\|im_start\|>(system|user|assistant|tool)\n(.*?)(?:<\|im_end\|>\n?|\Z)",
                   re.S)
_THINK = re.compile(r"^\s*<think>.*?</think>\s*", re.S)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_TOOL_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.S)
_TOOL_RESPONSES = re.compile(r"(?:\s*<tool_response>.*?</tool_response>)+\s*", re.S)


def queries(call: GetRewardCall) -> tuple[list[str], list[str | None]]:
    """(queries, their prompts or None) of a ``/get_reward`` body; InputError names the field.
    Any number of queries: the server reads them in waves (``answers.answer_all``)."""
    prompts = call.prompts if call.prompts is not None else [None] * len(call.query)
    if len(prompts) != len(call.query):
        raise InputError(f"expected one prompt per query: {len(prompts)} prompts for "
                         f"{len(call.query)} queries", field="prompts")
    return list(call.query), [p if isinstance(p, str) else None for p in prompts]


def query_trace(query: str, prompt: str | None, field: str) -> Trace:
    """The conversation a query holds (module docstring)."""
    text = _unpadded(query)
    if "<|im_start|>" in text:
        messages = chatml_messages(text, field)
    elif text[:1] in ("{", "["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(f"not ChatML text, and not JSON: {error}", field=field) from None
        return read_conversation(value, field=field)[0]
    elif prompt is not None and text.startswith(_unpadded(prompt)) and len(text) > len(
            _unpadded(prompt)):
        cut = len(_unpadded(prompt))
        messages = (Message("user", text[:cut]), Message("assistant", text[cut:]))
    else:
        raise InputError("cannot read a conversation from this query: send ChatML text, a JSON "
                         "conversation, or text that begins with its prompt", field=field)
    if not messages:
        raise InputError("the query holds no message", field=field)
    return Trace(content_trace_id("openrlhf", query), messages)


def chatml_messages(text: str, field: str) -> tuple[Message, ...]:
    messages: list[Message] = []
    for role, content in _TURN.findall(text):
        if role == "assistant":
            messages.append(_assistant(content, field))
        elif role == "user" and _TOOL_RESPONSES.fullmatch(content):
            messages.extend(Message("tool", result) for result in _TOOL_RESPONSE.findall(content))
        else:
            messages.append(Message(role, content))
    return tuple(messages)


def _assistant(content: str, field: str) -> Message:
    content = _THINK.sub("", content, count=1)
    calls = []
    for k, raw in enumerate(_TOOL_CALL.findall(content)):
        try:
            call = json.loads(raw)
            name, arguments = call["name"], call.get("arguments", {})
            if isinstance(arguments, str):
                arguments = json.loads(arguments)
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise InputError(f"a <tool_call> block is not {{\"name\", \"arguments\"}} JSON: "
                             f"{error}", field=field) from None
        if not isinstance(name, str) or not name or not isinstance(arguments, dict):
            raise InputError("a <tool_call> needs a name and an object of arguments",
                             field=field)
        calls.append(ToolCall(f"call{k}", name, arguments))
    return Message("assistant", _TOOL_CALL.sub("", content).strip(), tuple(calls))


def _unpadded(text: str) -> str:
    previous = None
    while previous != text:
        previous = text
        text = text.strip()
        for token in PADDING:
            text = text.removeprefix(token).removesuffix(token)
    return text
