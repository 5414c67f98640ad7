"""Content digests: whether a reimport changed a trace, and which of its actions it changed.

A trace's digest covers everything an import stores as its content (agent, domain, metadata, tool
schemas, messages); an identical reimport has the same digest and changes nothing. An action's
digest covers what its rendering reads for either audience: the tool schemas, the evaluation
context, and every message up to the action (role, text, tool names and arguments), cut right
after the action. Feedback given on an action whose digest has changed since no longer describes
that action's content: it is orphaned, like feedback on an action a reimport removed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from stash_pipeline.core.serialize import message_to_dict
from stash_pipeline.core.traces import Action, Message, Trace, action_messages

# json.dumps with these arguments, without building an encoder on every call (an import digests
# every trace and action).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)


def _json(payload: Any) -> bytes:
    """The payload's compact JSON, keys in the order given, as the bytes a digest hashes."""
    return _ENCODER.encode(payload).encode("utf-8", "backslashreplace")


def digest(payload: Any) -> str:
    """SHA-256 (hex) of the payload's JSON, keys in the order given: the renderer writes tool
    arguments in that order, so a reordering changes what the model reads."""
    return hashlib.sha256(_json(payload)).hexdigest()


def trace_digest(trace: Trace, messages: list[dict[str, Any]] | None = None) -> str:
    """The digest of a trace's stored content (not its owner, opt-in or version); ``messages``:
    its messages in ``message_to_dict``'s form, when the caller has them already."""
    if messages is None:
        messages = [message_to_dict(m) for m in trace.messages]
    return stored_trace_digest(trace.agent, trace.domain, trace.metadata, trace.tools, messages)


def stored_trace_digest(agent: str | None, domain: str | None, metadata: dict[str, Any],
                        tools: Any, messages: list[dict[str, Any]]) -> str:
    """``trace_digest`` from a trace's stored columns (a migration that rewrites them)."""
    return digest({"agent": agent, "domain": domain, "metadata": metadata, "tools": list(tools),
                   "messages": messages})


def _rendered_part(message: Message) -> dict[str, Any]:
    """What a renderer reads of a message (no tool-call ids, result names or error flags)."""
    return {"role": message.role, "content": message.content,
            "tool_calls": [[c.name, c.arguments] for c in message.tool_calls]}


def action_digests(trace: Trace, actions: list[Action] | None = None) -> dict[str, str]:
    """{action id: digest of the action with everything before it that its rendering reads}:
    ``digest({"tools": ..., "evaluation_context": ..., "messages": [rendered parts up to the
    action, the last one cut right after it]})``.

    The actions of a trace share their contexts, so the JSON of that payload is hashed
    incrementally and each message serialised once: compact JSON of a dict is its items' JSON
    joined with "," and ":", so the bytes hashed, and the digests, are those of ``digest``
    (tested against it). A trace of n actions costs O(n) JSON, not O(n^2). ``actions``: the
    trace's ``actions()``, when the caller has them already.
    """
    head = _json({"tools": list(trace.tools), "evaluation_context": trace.evaluation_context})
    context = hashlib.sha256(head[:-1] + b',"messages":[')  # the object left open
    parts: dict[int, bytes] = {}  # message index: its rendered part's JSON

    def part(index: int) -> bytes:
        if index not in parts:
            parts[index] = _json(_rendered_part(trace.messages[index]))
        return parts[index]

    hashed = 0  # messages already in ``context``
    digests = {}
    for action in trace.actions() if actions is None else actions:
        while hashed < action.message_index:
            context.update((b"," if hashed else b"") + part(hashed))
            hashed += 1
        calls = len(trace.messages[action.message_index].tool_calls)
        if (0 if action.call_index is None else action.call_index + 1) == calls:
            cut = part(action.message_index)  # the action keeps all of its message
        else:
            cut = _json(_rendered_part(action_messages(trace, action)[-1]))
        one = context.copy()
        one.update((b"," if action.message_index else b"") + cut + b"]}")
        digests[action.id] = one.hexdigest()
    return digests
