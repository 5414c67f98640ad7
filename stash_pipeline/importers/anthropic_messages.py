"""Anthropic Messages: ``{id?, agent?, domain?, metadata?, tools?, system?, messages, feedback?}``.

``system`` becomes the first message; ``tool_use`` blocks become tool calls; each ``tool_result``
block of a user message becomes a tool message (``is_error`` kept), and the user's own text in that
message stays a user message, in block order. Thinking, image and document blocks have no place in
the trace model and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import Feedback
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.traces import Message, ToolCall, Trace
from stash_pipeline.importers.common import ImportOptions, read_trace_objects, wrapper_trace
from stash_pipeline.importers.feedback_list import parse_feedback
from stash_pipeline.importers.fields import (
    as_text,
    expect_list,
    expect_object,
    join_text,
    parse_arguments,
)

FORMAT = "anthropic"
ANTHROPIC_ROLES = ("user", "assistant")
TOOL_USE_BLOCKS = ("tool_use", "server_tool_use")


def read(path: Path, options: ImportOptions) -> Iterator[ImportedTrace]:
    return read_trace_objects(path, options, convert_trace_object)


def convert_trace_object(record: dict[str, Any],
                         options: ImportOptions) -> tuple[Trace, tuple[Feedback, ...]]:
    messages: list[Message] = []
    system = record.get("system")
    if system is not None:
        messages.append(Message("system", block_text(system, "system")))
    converted, indexes = convert_messages(record["messages"], offset=len(messages))
    trace = wrapper_trace(record, tuple(messages + converted), anthropic_tools(record.get("tools")),
                          source_format=FORMAT, options=options)
    return trace, parse_feedback(record.get("feedback"), trace, message_indexes=indexes)


def convert_messages(value: Any, *, offset: int = 0,
                     field: str = "messages") -> tuple[list[Message], dict[int, int]]:
    """The trace messages, and each assistant source message's index in them."""
    out: list[Message] = []
    indexes: dict[int, int] = {}
    calls: dict[str, ToolCall] = {}
    for i, raw in enumerate(expect_list(value, field)):
        where = f"{field}[{i}]"
        message = expect_object(raw, where)
        role = message.get("role")
        if role not in ANTHROPIC_ROLES:
            raise InputError(f"unknown role {role!r}; Anthropic messages are "
                             f"{' or '.join(ANTHROPIC_ROLES)}", field=f"{where}.role")
        blocks = _blocks(message.get("content"), f"{where}.content")
        if role == "assistant":
            indexes[i] = offset + len(out)
            assistant = _assistant_message(blocks, f"{where}.content")
            calls.update((call.id, call) for call in assistant.tool_calls)
            out.append(assistant)
        else:
            out.extend(_user_messages(blocks, f"{where}.content", calls))
    return out, indexes


def _assistant_message(blocks: list[dict[str, Any]], field: str) -> Message:
    texts, calls = [], []
    for k, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            texts.append(_text(block, f"{field}[{k}]"))
        elif kind in TOOL_USE_BLOCKS:
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not call_id:
                raise InputError("a tool_use block needs an id", field=f"{field}[{k}].id")
            if not isinstance(name, str) or not name:
                raise InputError("a tool_use block needs a name", field=f"{field}[{k}].name")
            calls.append(ToolCall(call_id, name, parse_arguments(block.get("input"),
                                                                 f"{field}[{k}].input")))
        elif kind == "tool_result":
            raise InputError("tool_result blocks belong in user messages", field=f"{field}[{k}]")
    return Message("assistant", join_text(texts), tuple(calls))


def _user_messages(blocks: list[dict[str, Any]], field: str,
                   calls: dict[str, ToolCall]) -> list[Message]:
    out: list[Message] = []
    texts: list[str] = []
    for k, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            texts.append(_text(block, f"{field}[{k}]"))
        elif kind == "tool_result":
            if texts:
                out.append(Message("user", join_text(texts)))
                texts = []
            call_id = block.get("tool_use_id")
            if call_id not in calls:
                raise InputError(f"tool_use_id {call_id!r} matches no earlier tool_use block",
                                 field=f"{field}[{k}].tool_use_id")
            is_error = block.get("is_error", False)
            if not isinstance(is_error, bool):
                raise InputError("expected true or false", field=f"{field}[{k}].is_error")
            out.append(Message("tool", block_text(block.get("content"), f"{field}[{k}].content"),
                               tool_call_id=call_id, name=calls[call_id].name, error=is_error))
        elif kind in TOOL_USE_BLOCKS:
            raise InputError("only assistant messages make tool calls", field=f"{field}[{k}]")
    if texts or not out:
        out.append(Message("user", join_text(texts)))
    return out


def block_text(value: Any, field: str) -> str:
    """A string, or the text of a list of content blocks (non-text blocks skipped)."""
    if value is None or isinstance(value, str):
        return value or ""
    texts = []
    for k, block in enumerate(expect_list(value, field)):
        block = expect_object(block, f"{field}[{k}]")
        if block.get("type") == "text":
            texts.append(_text(block, f"{field}[{k}]"))
    return join_text(texts)


def anthropic_tools(value: Any, field: str = "tools") -> tuple[dict[str, Any], ...]:
    """``{name, description?, input_schema?}`` tools, in the trace model's OpenAI form."""
    if value is None:
        return ()
    tools = []
    for i, tool in enumerate(expect_list(value, field)):
        tool = expect_object(tool, f"{field}[{i}]")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise InputError("a tool needs a name", field=f"{field}[{i}].name")
        function: dict[str, Any] = {"name": name}
        if tool.get("description") is not None:
            function["description"] = as_text(tool["description"], f"{field}[{i}].description")
        if tool.get("input_schema") is not None:
            function["parameters"] = expect_object(tool["input_schema"],
                                                   f"{field}[{i}].input_schema")
        tools.append({"type": "function", "function": function})
    return tuple(tools)


def _blocks(content: Any, field: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [expect_object(block, f"{field}[{k}]")
            for k, block in enumerate(expect_list(content, field))]


def _text(block: dict[str, Any], field: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise InputError("a text block needs a string 'text'", field=f"{field}.text")
    return text
