"""The one renderer from the trace model to model text, for training and scoring alike.

Rendering goes through ``tokenizer.apply_chat_template`` with the template the base model reads
natively (``choose_template``), which is saved with every checkpoint as ``chat_template.jinja`` so
a downloaded model renders exactly as it was trained:
- the tokenizer's own chat template, when it is prefix-stable for the project's renderings and
  reads tool-call arguments sent as a JSON string as it reads them sent as an object (checked on a
  probe trace with text, tool calls, tool results and tools: ``native_template_works``);
- else, for a tokenizer with ChatML's tokens, the project's ChatML template
  (``templates/chat_template.jinja``), with Qwen3's empty think block only when the tokenizer has
  the think tokens (``CHATML_TEMPLATE`` without);
- else (the BERT family: no chat template, no ChatML tokens) plain role-labelled text
  (``templates/plain_template.jinja``), with no markup it would split into word pieces.

The project's templates write tool-call arguments in one canonical text (``json.dumps`` of the
object) whether they come as an object or as a JSON string of any spacing
(``templates/tool_arguments.jinja``, in both), and leave system messages and the evaluation
context out for a personal model; a checkpoint's saved template names its audience
(``template_for_audience``), so plain transformers and TRL render as the project does.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from stash_pipeline.core.pair_builders import AUDIENCES, Audience
from stash_pipeline.core.pairs import PairSide
from stash_pipeline.core.traces import Message, ToolCall, Trace, action_messages


def _read(name: str) -> str:
    return resources.files("stash_pipeline.worker").joinpath(f"templates/{name}").read_text()


# Where each template holds the one canonical writer of tool-call arguments: a saved template is
# self-contained (a chat template cannot include another file).
_ARGUMENTS_PLACE = "{#- the tool_arguments macro (templates/tool_arguments.jinja) is put here -#}"


# The macro ``tool_arguments(arguments)``: the canonical text of tool-call arguments.
TOOL_ARGUMENTS_MACRO: str = _read("tool_arguments.jinja").rstrip("\n")


def _template(name: str) -> str:
    text = _read(name)
    if _ARGUMENTS_PLACE not in text:
        raise ValueError(f"templates/{name} has no place for the tool_arguments macro")
    return text.replace(_ARGUMENTS_PLACE, TOOL_ARGUMENTS_MACRO, 1)


CHAT_TEMPLATE: str = _template("chat_template.jinja")
# The same ChatML without the think block, for ChatML tokenizers that lack <think> (SmolLM2).
_THINK = r"<think>\n\n</think>\n\n"
CHATML_TEMPLATE: str = CHAT_TEMPLATE.replace(
    "{#- stash-pipeline chat template v2:", "{#- stash-pipeline chat template v2 without think:", 1
).replace("'<|im_start|>assistant\\n" + _THINK + "'", "'<|im_start|>assistant\\n'")
PLAIN_TEMPLATE: str = _template("plain_template.jinja")
# The line of the project's templates (v2 on) that names the audience a plain
# ``apply_chat_template`` call renders for: a checkpoint's saved template names its own.
def _default_audience_line(audience: str) -> str:
    return "{%- set default_audience = '" + audience + "' %}"
# The first line of every version of the project's templates: a tokenizer loaded from a checkpoint
# keeps the template it was trained with.
TEMPLATE_MARKER = "{#- stash-pipeline chat template"
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
THINK_TOKENS = ("<think>", "</think>")
# Marks a tokenizer whose own (not the project's) template renders, set by ``choose_template``.
NATIVE_ATTRIBUTE = "reward_native_template"


def is_project_template(template: Any) -> bool:
    return isinstance(template, str) and template.startswith(TEMPLATE_MARKER)


def template_of(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if is_project_template(template) or (
            isinstance(template, str) and getattr(tokenizer, NATIVE_ATTRIBUTE, False)):
        return template
    return CHAT_TEMPLATE


def template_kind(template: str) -> str:
    """A template's name for logs and docs: native, chatml-think, chatml or plain (any version
    of the project's templates: a checkpoint keeps the one it was trained with)."""
    if not is_project_template(template):
        return "native"
    first = template.partition(":")[0]
    if first.endswith(" plain"):
        return "plain"
    return "chatml" if first.endswith(" without think") else "chatml-think"


def template_for_audience(template: str, audience: Audience) -> str:
    """``template`` rendering for ``audience`` when a caller names none (plain transformers, TRL):
    what a checkpoint saves. Other templates, and the project's before v2, are returned as they
    are."""
    if audience not in AUDIENCES:
        raise ValueError(f"audience must be one of {AUDIENCES}, not {audience!r}")
    for named in AUDIENCES:
        line = _default_audience_line(named)
        if is_project_template(template) and line in template:
            return template.replace(line, _default_audience_line(audience), 1)
    return template


def choose_template(tokenizer: Any) -> str:
    """Set and return the template this tokenizer's model reads (module docstring). Idempotent:
    a checkpoint's saved template is chosen again when it is loaded."""
    own = getattr(tokenizer, "chat_template", None)
    setattr(tokenizer, NATIVE_ATTRIBUTE, False)
    if is_project_template(own):
        return own
    if isinstance(own, str) and own.strip():
        tokenizer.chat_template = own
        setattr(tokenizer, NATIVE_ATTRIBUTE, True)
        if native_template_works(tokenizer):
            return own
        setattr(tokenizer, NATIVE_ATTRIBUTE, False)
    vocab = tokenizer.get_vocab()
    if all(token in vocab for token in CHATML_TOKENS):
        chosen = CHAT_TEMPLATE if all(t in vocab for t in THINK_TOKENS) else CHATML_TEMPLATE
    else:
        chosen = PLAIN_TEMPLATE
    tokenizer.chat_template = chosen
    return chosen


def probe_trace() -> Trace:
    """What every rendering must carry: system, tools, text, two calls in one message, their
    results and a final reply (``native_template_works`` checks a template on it)."""
    return Trace("stash-template-probe", (
        Message("system", "Follow the refund policy."),
        Message("user", "Refund order 7, please."),
        Message("assistant", "Checking the order.", tool_calls=(
            ToolCall("c1", "get_order", {"order_id": 7}),
            ToolCall("c2", "get_policy", {"kind": "refund"}))),
        Message("tool", '{"status": "delivered"}', tool_call_id="c1", name="get_order"),
        Message("tool", '{"days": 30}', tool_call_id="c2", name="get_policy"),
        Message("assistant", "Refunded."),
        Message("user", "Thanks!"),
        Message("assistant", "You are welcome."),
    ), tools=({"type": "function", "function": {
        "name": "lookup_order_tool", "description": "Look an order up.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "integer"}}}}},),
        metadata={"evaluation_context": "Orders older than 30 days are not refundable."})


def native_template_works(tokenizer: Any) -> bool:
    """Whether the tokenizer's own template renders the probe trace completely (every message,
    call, argument, tool and the evaluation context) and prefix-stably (every action's rendering a
    prefix of the whole trace's, in text and in tokens), with no action ending on the pad token."""
    trace = probe_trace()
    try:
        for audience in AUDIENCES:
            full, offsets = action_end_offsets(tokenizer, trace, audience)
            ends = sorted(offsets.values())
            if len(set(ends)) != len(ends):
                return False  # two actions render the same: something is dropped
            full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
            for end in ends + [len(full)]:
                ids = tokenizer(full[:end], add_special_tokens=False)["input_ids"]
                if not ids or full_ids[: len(ids)] != ids or ids[-1] == tokenizer.pad_token_id:
                    return False
            needed = [m.content for m in trace.messages if m.role != "system"] + [
                "get_order", "get_policy", '"order_id": 7', "lookup_order_tool"]
            if audience == "shared":
                needed += ["Follow the refund policy.", trace.evaluation_context]
            if not all(text in full for text in needed):
                return False
        if not _arguments_read_alike(tokenizer, trace):
            return False
    except Exception:  # noqa: BLE001 - any template error means the template cannot be used
        return False
    return True


def _arguments_read_alike(tokenizer: Any, trace: Trace) -> bool:
    """Whether tool-call arguments sent as a JSON string of other spacing (OpenAI's form, as a
    caller of plain transformers sends them) render as the same arguments sent as an object do:
    else a downloaded checkpoint would read other text than the project renders."""
    messages = native_messages(trace, message_dicts(trace, "shared"), "shared")
    as_strings = [{**m, "tool_calls": [
        {**c, "function": {**c["function"], "arguments": json.dumps(
            c["function"]["arguments"], separators=(",", ":"))}} for c in m["tool_calls"]]}
        if m.get("tool_calls") else m for m in messages]
    template = tokenizer.chat_template
    return len({tokenizer.apply_chat_template(
        listed, tools=list(trace.tools), chat_template=template, tokenize=False)
        for listed in (messages, as_strings)}) == 1


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
            data["tool_calls"] = [{"name": c.name, "arguments": c.arguments}
                                  for c in message.tool_calls]
        out.append(data)
    return out


def evaluation_context_text(trace: Trace, audience: Audience) -> str | None:
    """Task and tool context known before the actions; only the shared evaluator reads it."""
    context = trace.evaluation_context
    if audience != "shared" or context in (None, "", {}, []):
        return None
    return context if isinstance(context, str) else json.dumps(context, ensure_ascii=False)


def render_trace(tokenizer: Any, trace: Trace, audience: Audience, *,
                 open_end: bool = False) -> str:
    """The trace as the model reads it.

    ``open_end`` leaves the final assistant message unclosed, so the text ends at the last token of
    its last tool call or text: where an action is scored.
    """
    messages = message_dicts(trace, audience)
    if open_end and (not messages or messages[-1]["role"] != "assistant"):
        raise ValueError(f"trace {trace.id}: open_end needs a final assistant message")
    template = template_of(tokenizer)
    if not is_project_template(template):
        return _render_native(tokenizer, template, trace, messages, audience, open_end)
    return tokenizer.apply_chat_template(
        messages,
        tools=list(trace.tools) or None,
        chat_template=template,
        tokenize=False,
        add_generation_prompt=False,
        evaluation_context=evaluation_context_text(trace, audience),
        open_end=open_end,
        audience=audience,
    )


def native_messages(trace: Trace, messages: list[dict[str, Any]], audience: Audience
                    ) -> list[dict[str, Any]]:
    """``message_dicts`` in the Hugging Face shape a stock template reads: tool calls as
    ``{"type": "function", "function": {...}}``, the evaluation context in the system turn."""
    out = [{**m, "tool_calls": [{"type": "function", "function": c} for c in m["tool_calls"]]}
           if m.get("tool_calls") else dict(m) for m in messages]
    context = evaluation_context_text(trace, audience)
    if context:
        section = "# Evaluation context\n\n" + context
        if out and out[0]["role"] == "system":
            out[0]["content"] = out[0]["content"] + "\n\n" + section
        else:
            out.insert(0, {"role": "system", "content": section})
    return out


_TURN_END_PROBE = "Zq7 reply."


def turn_end(tokenizer: Any, template: str) -> str:
    """What the template writes after a closed final assistant turn's last token (ChatML:
    ``<|im_end|>`` and a newline): an open end is the closed rendering without it."""
    cache = tokenizer.__dict__.setdefault("_stash_turn_end", {})
    if template not in cache:
        cache[template] = _turn_end(tokenizer, template)
    return cache[template]


def _turn_end(tokenizer: Any, template: str) -> str:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": _TURN_END_PROBE}],
        chat_template=template, tokenize=False, add_generation_prompt=False)
    if _TURN_END_PROBE not in text:
        raise ValueError("the chat template does not render an assistant turn's text")
    return text[text.rindex(_TURN_END_PROBE) + len(_TURN_END_PROBE):]


def _render_native(tokenizer: Any, template: str, trace: Trace, messages: list[dict[str, Any]],
                   audience: Audience, open_end: bool) -> str:
    text = tokenizer.apply_chat_template(
        native_messages(trace, messages, audience), tools=list(trace.tools) or None,
        chat_template=template, tokenize=False, add_generation_prompt=False)
    if not open_end:
        return text
    end = turn_end(tokenizer, template)
    if not text.endswith(end):
        raise ValueError(f"trace {trace.id}: the chat template does not end the final assistant "
                         f"turn with {end!r}")
    return text[: len(text) - len(end)] if end else text


def render_side(tokenizer: Any, side: PairSide, audience: Audience) -> str:
    """A pair side: an action side ends open at its action; a whole-trace side is closed."""
    return render_trace(tokenizer, side.trace, audience, open_end=side.action_id is not None)


def action_end_offsets(tokenizer: Any, trace: Trace,
                       audience: Audience) -> tuple[str, dict[str, int]]:
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

