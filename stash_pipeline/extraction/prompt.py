"""The one request per trace: its actions by local id, its comments and its later user messages."""

from __future__ import annotations

import json
from typing import Any

from stash_pipeline.core.extraction_inputs import ASSESSMENT_SOURCE_ID, ExtractionInput
from stash_pipeline.core.traces import local_part
from stash_pipeline.extraction.schema import RECORD_PREFERENCES_TOOL, TOOL_NAME

# Long tool results would crowd out the rest; quotes stay verbatim because we only cut, never edit.
MAX_MESSAGE_CHARS = 4000

SYSTEM_PROMPT = """\
You turn feedback on an AI agent's trace into preference pairs for a reward model.

For each actionable piece of feedback, name the assistant action it is about (its id, e.g. m3 or
m3.call0), write the alternative action the agent should have taken (a reply text, or a tool call
with a name and a JSON object of arguments), say which is preferred ("alternative" when the
original was wrong, "original" when the feedback praises it against a plausible worse action),
copy an evidence quote verbatim from the source, and give a short rationale.

Sources:
- comment: cite the comment id as source_id; quote the comment.
- correction: a later user message that corrects an earlier action; cite its id (e.g. m7) as
  source_id; quote the user message. Only actions before the message can be corrected.
- assessment (only when enabled): judge the assistant actions yourself, including tool calls;
  cite "assessment" as source_id and quote the trace text (e.g. a tool result) that shows why.

Only assistant actions can be cited; user, system and tool messages are observations. When
feedback is ambiguous, not actionable, or does not say what should have been done, do not guess:
add it to "skipped" with a reason. Answer only by calling the record_preferences tool."""


def render_input(item: ExtractionInput) -> str:
    trace = item.trace
    lines = [f"Trace {trace.id}" + "".join(
        f", {label} {value}" for label, value in (("agent", trace.agent), ("domain", trace.domain))
        if value)]
    lines += ["", "Transcript (ids in brackets; only assistant actions can be cited):"]
    for index, message in enumerate(trace.messages):
        label = message.role if message.role != "tool" else f"tool result ({message.name or '?'})"
        if message.role != "assistant" or message.content.strip():
            lines.append(f"[m{index}] {label}: {_clip(message.content)}")
        elif message.tool_calls:
            lines.append(f"[m{index}] assistant (tool calls only)")
        for k, call in enumerate(message.tool_calls):
            arguments = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
            lines.append(f"  [m{index}.call{k}] tool call {call.name} {_clip(arguments)}")
    lines += ["", "Assistant actions: " + ", ".join(a.local_id for a in item.actions)]
    if item.comments:
        lines += ["", "Comments (source kind comment):"]
        for comment in item.comments:
            target = local_part(comment.action_id, comment.trace_id) if comment.action_id \
                else "whole trace"
            lines.append(f"[{comment.id}] on {target}: {comment.text}")
    if item.corrections:
        lines += ["", "Later user messages (possible corrections; source kind correction):"]
        lines += [f"[{m.local_id}] {m.text}" for m in item.corrections]
    lines.append("")
    lines.append(
        f'Automatic assessment is enabled: assess every assistant action (source_id '
        f'"{ASSESSMENT_SOURCE_ID}").' if item.assess else
        "Automatic assessment is disabled: use only the comments and user messages above.")
    return "\n".join(lines)


def build_request(item: ExtractionInput, model: str, max_tokens: int) -> dict[str, Any]:
    """Keyword arguments for ``client.messages.create``: a forced call of the record tool."""
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": SYSTEM_PROMPT,
        "messages": [{"role": "user", "content": render_input(item)}],
        "tools": [RECORD_PREFERENCES_TOOL],
        "tool_choice": {"type": "tool", "name": TOOL_NAME},
    }


def _clip(text: str) -> str:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return text[:MAX_MESSAGE_CHARS] + f" [... {len(text) - MAX_MESSAGE_CHARS} more characters]"
