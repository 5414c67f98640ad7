"""The trace model every importer maps to: traces, messages, tool calls and actions (DESIGN §3)."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
DEFAULT_OWNER = "local"
# An action's address is "<trace id>/<local action id>"; trace ids never contain it (see
# core.validation.check_trace_id), so an address splits one way only.
ACTION_ADDRESS_SEPARATOR = "/"
LOCAL_ACTION_ID = re.compile(r"m([0-9]+)(?:\.call([0-9]+))?")  # ASCII digits only
# Namespace for ids derived from content, so the same source always maps to the same id.
STASH_NAMESPACE = uuid.UUID("5f0c6b8e-2d2c-4a8e-9a43-53a5c1e0b7d1")


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # on tool results: the call answered
    name: str | None = None  # on tool results: the tool's name, when known
    error: bool = False  # on tool results: the tool reported an error


@dataclass(frozen=True)
class Action:
    """What gets an action score: an assistant message's text, or one of its tool calls."""

    id: str  # "<trace id>/m<message index>" or "<trace id>/m<message index>.call<k>"
    trace_id: str
    message_index: int
    call_index: int | None  # None for the message's text

    @property
    def local_id(self) -> str:
        return local_action_id(self.message_index, self.call_index)

    @property
    def is_tool_call(self) -> bool:
        return self.call_index is not None


@dataclass(frozen=True)
class Trace:
    id: str
    messages: tuple[Message, ...]
    owner: str = DEFAULT_OWNER
    agent: str | None = None
    domain: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    tools: tuple[dict[str, Any], ...] = ()  # tool schemas, OpenAI function format
    contribute: bool = False  # opt-in to the shared evaluator's training data
    version: int = 1

    @property
    def task_id(self) -> str | None:
        value = self.metadata.get("task_id")
        return None if value is None else str(value)

    @property
    def evaluation_context(self) -> Any:
        return self.metadata.get("evaluation_context")

    def actions(self) -> list[Action]:
        return trace_actions(self)

    def action(self, action_id: str) -> Action:
        """The action with this full or local id; KeyError names the trace when there is none."""
        local = local_part(action_id, self.id)
        for action in self.actions():
            if action.local_id == local:
                return action
        raise KeyError(f"trace {self.id} has no action {action_id!r}")

    def tool_call(self, action: Action) -> ToolCall | None:
        if action.call_index is None:
            return None
        return self.messages[action.message_index].tool_calls[action.call_index]

    def with_messages(self, messages: tuple[Message, ...]) -> Trace:
        return replace(self, messages=messages)


def local_action_id(message_index: int, call_index: int | None = None) -> str:
    """``m<i>`` for a message's text, ``m<i>.call<k>`` for its k-th tool call."""
    return f"m{message_index}" + ("" if call_index is None else f".call{call_index}")


def action_id(trace_id: str, message_index: int, call_index: int | None = None) -> str:
    return f"{trace_id}{ACTION_ADDRESS_SEPARATOR}{local_action_id(message_index, call_index)}"


def local_part(action_id: str, trace_id: str) -> str:
    """The local id of a full action id of ``trace_id`` (a local id is returned as is).

    The trace id is known beside the action id, so it is cut off whole, never split on ``/``.
    """
    prefix = trace_id + ACTION_ADDRESS_SEPARATOR
    return action_id[len(prefix):] if action_id.startswith(prefix) else action_id


def parse_action_address(address: str) -> tuple[str, str | None]:
    """``<trace id>`` or ``<trace id>/<local action id>`` -> (trace id, full action id or None).

    Split at the last ``/``: a local action id never holds one, so even a trace id stored before
    ids with ``/`` were refused resolves to its own trace. Raises ValueError when the part after
    the ``/`` is not a local action id (``m4``, ``m4.call0``).
    """
    trace_id, separator, local = address.rpartition(ACTION_ADDRESS_SEPARATOR)
    if not separator:
        trace_id, local = local, ""
    if not trace_id:
        raise ValueError(f"{address!r} names no trace")
    if not separator:
        return trace_id, None
    if not LOCAL_ACTION_ID.fullmatch(local):
        raise ValueError(f"{local!r} is not an action: actions are m<message index> or "
                         "m<message index>.call<k> (see `traces show`), and trace ids never "
                         f"contain {ACTION_ADDRESS_SEPARATOR!r}")
    return trace_id, f"{trace_id}{ACTION_ADDRESS_SEPARATOR}{local}"


def trace_actions(trace: Trace) -> list[Action]:
    """Each assistant message's non-empty text, then each of its tool calls, in order."""
    actions: list[Action] = []
    for index, message in enumerate(trace.messages):
        if message.role != "assistant":
            continue
        if message.content.strip():
            actions.append(Action(action_id(trace.id, index), trace.id, index, None))
        for k in range(len(message.tool_calls)):
            actions.append(Action(action_id(trace.id, index, k), trace.id, index, k))
    return actions


def action_messages(trace: Trace, action: Action) -> tuple[Message, ...]:
    """The action's context plus the action itself, never anything after it.

    The last message is the action's assistant message cut right after the action: its text only,
    or its text and tool calls up to and including this one. Everything before is the context.
    """
    message = trace.messages[action.message_index]
    if action.call_index is None:
        last = replace(message, tool_calls=())
    else:
        last = replace(message, tool_calls=message.tool_calls[: action.call_index + 1])
    return trace.messages[: action.message_index] + (last,)


def action_context(trace: Trace, action: Action) -> tuple[Message, ...]:
    """Everything before the action (for the second call of a message: its text and first call)."""
    message = trace.messages[action.message_index]
    before = trace.messages[: action.message_index]
    if action.call_index is None:
        return before
    if action.call_index == 0 and not message.content.strip():
        return before
    partial = replace(message, tool_calls=message.tool_calls[: action.call_index])
    return before + (partial,)


def content_trace_id(source: str, payload: Any) -> str:
    """A UUID derived from a record's content, for sources that give a trace no id."""
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
    return str(uuid.uuid5(STASH_NAMESPACE, f"{source}:{digest}"))


def summarize(traces: list[Trace]) -> dict[str, int]:
    return {
        "traces": len(traces),
        "messages": sum(len(t.messages) for t in traces),
        "actions": sum(len(trace_actions(t)) for t in traces),
        "tool_calls": sum(len(m.tool_calls) for t in traces for m in t.messages),
    }
