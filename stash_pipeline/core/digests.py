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
from stash_pipeline.core.traces import Message, Trace, action_messages


def digest(payload: Any) -> str:
    """SHA-256 (hex) of the payload's JSON, keys in the order given: the renderer writes tool
    arguments in that order, so a reordering changes what the model reads."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


def trace_digest(trace: Trace) -> str:
    """The digest of a trace's stored content (not its owner, opt-in or version)."""
    return digest({"agent": trace.agent, "domain": trace.domain, "metadata": trace.metadata,
                   "tools": list(trace.tools),
                   "messages": [message_to_dict(m) for m in trace.messages]})


def _rendered_part(message: Message) -> dict[str, Any]:
    """What a renderer reads of a message (no tool-call ids, result names or error flags)."""
    return {"role": message.role, "content": message.content,
            "tool_calls": [[c.name, c.arguments] for c in message.tool_calls]}


def action_digests(trace: Trace) -> dict[str, str]:
    """{action id: digest of the action with everything before it that its rendering reads}."""
    head = {"tools": list(trace.tools), "evaluation_context": trace.evaluation_context}
    return {action.id: digest({**head, "messages": [
        _rendered_part(m) for m in action_messages(trace, action)]})
        for action in trace.actions()}
