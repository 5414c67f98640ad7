"""The one renderer from the trace model to model text, for training and scoring alike.

Rendering goes through ``tokenizer.apply_chat_template`` with the project's own template
(``templates/chat_template.jinja``), which is saved with every checkpoint as ``chat_template.jinja``
so a downloaded model renders exactly as it was trained.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from stash_pipeline.core.pair_builders import AUDIENCES, Audience
from stash_pipeline.core.pairs import PairSide
from stash_pipeline.core.traces import Trace, action_messages


CHAT_TEMPLATE: str = (
    resources.files("stash_pipeline.worker").joinpath("templates/chat_template.jinja").read_text()
)
# The first line of every version of the project's template: a tokenizer loaded from a checkpoint
# keeps the template it was trained with; any other template is replaced by CHAT_TEMPLATE.
TEMPLATE_MARKER = "{#- stash-pipeline chat template"


def is_project_template(template: Any) -> bool:
    return isinstance(template, str) and template.startswith(TEMPLATE_MARKER)


def template_of(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None)
    return template if is_project_template(template) else CHAT_TEMPLATE


def message_dicts(trace: Trace, audience: Audience) -> list[dict[str, Any]]:
    """The messages the model reads: personal models omit system steps (the seed)."""
    if audience not in AUDIENCES:
        raise ValueError(f"audience must be one of {AUDIENCES}, not {audience!r}")
    out: list[dict[str, Any]] = []
    for message in trace.messages:
        if message.role == "system" and audience == "personal":
            continue
        data: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            data["tool_calls"] = [{"name": c.name, "arguments": c.arguments} for c in message.tool_calls]
        out.append(data)
    return out


def evaluation_context_text(trace: Trace, audience: Audience) -> str | None:
    """Task and tool context known before the actions; only the shared evaluator reads it."""
    context = trace.evaluation_context
    if audience != "shared" or context in (None, "", {}, []):
        return None
    return context if isinstance(context, str) else json.dumps(context, ensure_ascii=False)


def render_trace(tokenizer: Any, trace: Trace, audience: Audience, *, open_end: bool = False) -> str:
    """The trace as the model reads it.

    ``open_end`` leaves the final assistant message unclosed, so the text ends at the last token of
    its last tool call or text: where an action is scored.
    """
    messages = message_dicts(trace, audience)
    if open_end and (not messages or messages[-1]["role"] != "assistant"):
        raise ValueError(f"trace {trace.id}: open_end needs a final assistant message")
    return tokenizer.apply_chat_template(
        messages,
        tools=list(trace.tools) or None,
        chat_template=template_of(tokenizer),
        tokenize=False,
        add_generation_prompt=False,
        evaluation_context=evaluation_context_text(trace, audience),
        open_end=open_end,
    )


def render_side(tokenizer: Any, side: PairSide, audience: Audience) -> str:
    """A pair side: an action side ends open at its action; a whole-trace side is closed."""
    return render_trace(tokenizer, side.trace, audience, open_end=side.action_id is not None)


def action_end_offsets(tokenizer: Any, trace: Trace, audience: Audience) -> tuple[str, dict[str, int]]:
    """The whole rendering and, per action id, where that action's own rendering ends inside it.

    An action's own rendering is its context plus the action (``action_messages``) rendered open;
    it must be a prefix of the whole rendering, which is what lets one forward pass score them all.
    """
    full = render_trace(tokenizer, trace, audience)
    offsets: dict[str, int] = {}
    for action in trace.actions():
        cut = trace.with_messages(action_messages(trace, action))
        prefix = render_trace(tokenizer, cut, audience, open_end=True)
        if not full.startswith(prefix):
            raise AssertionError(
                f"trace {trace.id}: rendering of action {action.id} is not a prefix of the trace's "
                "rendering (the chat template is not prefix-stable)"
            )
        offsets[action.id] = len(prefix)
    return full, offsets


def cut_at_action(trace: Trace, action_id: str) -> Trace:
    """The trace cut right after one action: what an action pair side holds."""
    return trace.with_messages(action_messages(trace, trace.action(action_id)))

