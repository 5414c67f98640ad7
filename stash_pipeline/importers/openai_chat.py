"""OpenAI chat format: ``{id?, agent?, domain?, metadata?, tools?, messages, feedback?}`` per trace.

Messages map one to one onto the trace model (so a source message index is a trace message index,
which AgentProcessBench's step labels rely on).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import Feedback
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.traces import ROLES, Message, ToolCall, Trace
from stash_pipeline.importers.common import (
    ImportOptions,
    openai_tools,
    read_trace_objects,
    wrapper_trace,
)
from stash_pipeline.importers.feedback_list import parse_feedback
from stash_pipeline.importers.fields import (
    expect_list,
    expect_object,
    join_text,
    optional_str,
    parse_arguments,
)

FORMAT = "openai"
# "developer" is the newer name of the system role in OpenAI's APIs.
ROLE_ALIASES = {"developer": "system"}
# Content-part types that carry text; images, audio and files have no place in the trace model.
TEXT_PART_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}


def read(path: Path, options: ImportOptions) -> Iterator[ImportedTrace]:
    return read_trace_objects(path, options, convert_trace_object)


def convert_trace_object(record: dict[str, Any],
                         options: ImportOptions) -> tuple[Trace, tuple[Feedback, ...]]:
    messages = convert_messages(record["messages"])
    tools = openai_tools(record.get("tools"), "tools")
    trace = wrapper_trace(record, messages, tools, source_format=FORMAT, options=options)
    return trace, parse_feedback(record.get("feedback"), trace)


def convert_messages(value: Any, field: str = "messages", *,
                     keep_unparsed_arguments: bool = False) -> tuple[Message, ...]:
    return tuple(
        convert_message(raw, f"{field}[{i}]", i, keep_unparsed_arguments=keep_unparsed_arguments)
        for i, raw in enumerate(expect_list(value, field))
    )


def convert_message(raw: Any, where: str, index: int, *,
                    keep_unparsed_arguments: bool = False) -> Message:
    message = expect_object(raw, where)
    role = message.get("role")
    role = ROLE_ALIASES.get(role, role)
    if role not in ROLES:
        raise InputError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}",
                         field=f"{where}.role")
    calls_raw = message.get("tool_calls") or []
    if calls_raw and role != "assistant":
        raise InputError("only assistant messages make tool calls", field=f"{where}.tool_calls")
    calls = tuple(
        convert_tool_call(call, f"{where}.tool_calls[{k}]", index, k,
                          keep_unparsed_arguments=keep_unparsed_arguments)
        for k, call in enumerate(expect_list(calls_raw, f"{where}.tool_calls"))
    )
    error = message.get("error", False)
    if not isinstance(error, bool):
        raise InputError("expected true or false", field=f"{where}.error")
    is_tool = role == "tool"
    return Message(
        role=role,
        content=content_text(message.get("content"), f"{where}.content"),
        tool_calls=calls,
        tool_call_id=optional_str(message, "tool_call_id", f"{where}.tool_call_id")
        if is_tool else None,
        name=optional_str(message, "name", f"{where}.name") if is_tool else None,
        error=error,
    )


def convert_tool_call(raw: Any, where: str, message_index: int, call_index: int, *,
                      keep_unparsed_arguments: bool = False) -> ToolCall:
    """Nested ``{id, type, function: {name, arguments}}`` or flat ``{id, name, arguments}``."""
    call = expect_object(raw, where)
    holder, base = call, where
    if call.get("function") is not None:
        holder, base = expect_object(call["function"], f"{where}.function"), f"{where}.function"
    name, name_field = holder.get("name"), f"{base}.name"
    arguments = parse_arguments(holder.get("arguments"), f"{base}.arguments",
                                keep_unparsed=keep_unparsed_arguments)
    if not isinstance(name, str) or not name:
        raise InputError("a tool call needs a name", field=name_field)
    # A call without an id gets one from its position, so it is still stable across reimports.
    call_id = optional_str(call, "id", f"{where}.id") or f"m{message_index}.call{call_index}"
    return ToolCall(call_id, name, arguments)


def content_text(value: Any, field: str) -> str:
    """A string, null, or a list of content parts (text parts kept, media skipped)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    texts = []
    for i, part in enumerate(expect_list(value, field)):
        if isinstance(part, str):
            texts.append(part)
            continue
        part = expect_object(part, f"{field}[{i}]")
        key = TEXT_PART_KEYS.get(part.get("type"))
        if key is None:
            continue
        text = part.get(key)
        if not isinstance(text, str):
            raise InputError("a text part needs a string", field=f"{field}[{i}].{key}")
        texts.append(text)
    return join_text(texts)
