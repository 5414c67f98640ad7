"""Checks every imported trace passes before anything of its batch is stored."""

from __future__ import annotations

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.traces import ROLES, Trace


def validate_trace(trace: Trace) -> None:
    """Raise InputError naming the field (e.g. ``messages[3].tool_call_id``) of the first problem."""
    if not trace.messages:
        raise InputError("a trace needs at least one message", field="messages")
    seen_calls: set[str] = set()
    for i, message in enumerate(trace.messages):
        where = f"messages[{i}]"
        if message.role not in ROLES:
            raise InputError(
                f"unknown role {message.role!r}; expected one of {', '.join(ROLES)}",
                field=f"{where}.role",
            )
        if not isinstance(message.content, str):
            raise InputError("content must be text", field=f"{where}.content")
        for k, call in enumerate(message.tool_calls):
            if message.role != "assistant":
                raise InputError("only assistant messages make tool calls",
                                 field=f"{where}.tool_calls")
            if not call.name:
                raise InputError("a tool call needs a name", field=f"{where}.tool_calls[{k}].name")
            if not isinstance(call.arguments, dict):
                raise InputError(
                    f"arguments must be a JSON object, got {type(call.arguments).__name__}",
                    field=f"{where}.tool_calls[{k}].arguments",
                )
            seen_calls.add(call.id)
        if message.role == "tool" and message.tool_call_id is not None \
                and message.tool_call_id not in seen_calls:
            raise InputError(
                f"tool_call_id {message.tool_call_id!r} matches no earlier tool call",
                field=f"{where}.tool_call_id",
            )
