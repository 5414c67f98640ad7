"""The one JSON form of the trace model: stored in the database and handed to the worker."""

from __future__ import annotations

import json
from typing import Any

from stash_pipeline.core.traces import Message, ToolCall, Trace


def message_to_dict(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        data["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        data["name"] = message.name
    if message.error:
        data["error"] = True
    return data


def openai_message_dict(message: Message) -> dict[str, Any]:
    """The message in OpenAI's chat form, as exports write it: tool calls as ``{id, type:
    "function", function: {name, arguments}}`` with the arguments a JSON string, which the openai
    importer reads back to the same message (``error``, the project's one addition, only when
    set)."""
    data = message_to_dict(message)
    if message.tool_calls:
        data["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name,
                          "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
            for c in message.tool_calls
        ]
    return data


def message_from_dict(data: dict[str, Any]) -> Message:
    return Message(
        role=data["role"],
        content=data.get("content") or "",
        tool_calls=tuple(
            ToolCall(c["id"], c["name"], c["arguments"]) for c in data.get("tool_calls") or ()
        ),
        tool_call_id=data.get("tool_call_id"),
        name=data.get("name"),
        error=bool(data.get("error", False)),
    )


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    return {
        "id": trace.id,
        "owner": trace.owner,
        "agent": trace.agent,
        "domain": trace.domain,
        "metadata": trace.metadata,
        "tools": list(trace.tools),
        "contribute": trace.contribute,
        "version": trace.version,
        "messages": [message_to_dict(m) for m in trace.messages],
    }


def trace_from_dict(data: dict[str, Any]) -> Trace:
    return Trace(
        id=data["id"],
        messages=tuple(message_from_dict(m) for m in data["messages"]),
        owner=data.get("owner") or "local",
        agent=data.get("agent"),
        domain=data.get("domain"),
        metadata=dict(data.get("metadata") or {}),
        tools=tuple(data.get("tools") or ()),
        contribute=bool(data.get("contribute", False)),
        version=int(data.get("version", 1)),
    )
