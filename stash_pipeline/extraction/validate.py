"""Checks every extracted preference against its trace and source (DESIGN §4) before it is used."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from stash_pipeline.core.extraction_inputs import ASSESSMENT_SOURCE_ID, ExtractionInput
from stash_pipeline.core.traces import LOCAL_ACTION_ID, Action, ToolCall, local_part
from stash_pipeline.extraction.errors import ExtractionError


@dataclass(frozen=True)
class Alternative:
    """A generated action: reply text, or one tool call."""

    text: str | None = None
    tool_call: ToolCall | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.tool_call is not None:
            return {"type": "tool_call", "tool_call": {"name": self.tool_call.name,
                                                       "arguments": self.tool_call.arguments}}
        return {"type": "text", "text": self.text}


@dataclass(frozen=True)
class Preference:
    action: Action
    source_kind: Literal["comment", "correction", "assessment"]
    source_id: str  # as the answer cited it: comment id, "m<i>" or "assessment"
    alternative: Alternative
    preferred: Literal["original", "alternative"]
    evidence_quote: str
    rationale: str


@dataclass(frozen=True)
class Skip:
    source_id: str
    reason: str


@dataclass(frozen=True)
class ExtractionAnswer:
    preferences: tuple[Preference, ...]
    skipped: tuple[Skip, ...]


def validate_answer(item: ExtractionInput, answer: Any) -> ExtractionAnswer:
    """The answer's preferences and skips; ExtractionError on anything invalid."""
    trace_id = item.trace.id
    if not isinstance(answer, dict):
        raise ExtractionError(f"malformed answer: expected an object, got {type(answer).__name__}",
                              trace_id=trace_id)
    for key in ("preferences", "skipped"):
        if not isinstance(answer.get(key), list):
            raise ExtractionError(f"malformed answer: {key!r} must be a list", trace_id=trace_id)
    preferences = tuple(_preference(item, i, raw) for i, raw in enumerate(answer["preferences"]))
    return ExtractionAnswer(preferences, tuple(
        _skip(item, i, raw) for i, raw in enumerate(answer["skipped"])))


def _skip(item: ExtractionInput, index: int, raw: Any) -> Skip:
    if not isinstance(raw, dict) or not _text(raw.get("source_id")) or not _text(raw.get("reason")):
        raise ExtractionError(f"malformed answer: skipped[{index}] needs source_id and reason text",
                              trace_id=item.trace.id)
    return Skip(raw["source_id"], raw["reason"])


def _preference(item: ExtractionInput, index: int, raw: Any) -> Preference:
    trace_id = item.trace.id
    where = f"preferences[{index}]"
    if not isinstance(raw, dict):
        raise ExtractionError(f"malformed answer: {where} is not an object", trace_id=trace_id)
    action = _action(item, raw.get("action_id"), where)

    def fail(reason: str) -> ExtractionError:
        return ExtractionError(f"{where}: {reason}", trace_id=trace_id, action_id=action.local_id)

    for key in ("source_id", "evidence_quote", "rationale"):
        if not _text(raw.get(key)):
            raise fail(f"{key} must be non-empty text")
    if raw.get("preferred") not in ("original", "alternative"):
        raise fail(f"preferred must be 'original' or 'alternative', got {raw.get('preferred')!r}")
    source_kind, source_text = _source(item, raw["source_id"], action, fail)
    quote = raw["evidence_quote"]
    if _normalize(quote) not in _normalize(source_text):
        raise fail(f"evidence quote {quote!r} is not verbatim in source {raw['source_id']!r}")
    alternative = _alternative(raw.get("alternative"), fail)
    if alternative == _original(item, action):
        raise fail("the alternative is identical to the original action")
    return Preference(action, source_kind, raw["source_id"], alternative, raw["preferred"],
                      quote, raw["rationale"])


def _action(item: ExtractionInput, action_id: Any, where: str) -> Action:
    trace = item.trace
    if not _text(action_id):
        raise ExtractionError(f"malformed answer: {where}.action_id must be text",
                              trace_id=trace.id)
    local = local_part(action_id, trace.id)
    for action in item.actions:
        if action.local_id == local:
            return action
    match = LOCAL_ACTION_ID.fullmatch(local)
    if match and int(match.group(1)) < len(trace.messages):
        role = trace.messages[int(match.group(1))].role
        reason = (f"{local} is a {role} message, not an assistant action" if role != "assistant"
                  else f"{local} is not an action of this assistant message")
    else:
        reason = f"unknown action id {local!r}"
    raise ExtractionError(f"{where}: {reason}", trace_id=trace.id, action_id=local)


def _source(item: ExtractionInput, source_id: str, action: Action, fail):
    """(source kind, source text) of a cited source id."""
    for comment in item.comments:
        if comment.id == source_id:
            return "comment", comment.text
    for message in item.corrections:
        if message.local_id == source_id:
            if int(message.local_id[1:]) <= action.message_index:
                raise fail(f"correction {source_id} comes before the action it would correct")
            return "correction", message.text
    if source_id == ASSESSMENT_SOURCE_ID and item.assess:
        return "assessment", _trace_text(item)
    raise fail(f"unknown source id {source_id!r}: not a comment, later user message or enabled "
               "assessment of this trace")


def _alternative(raw: Any, fail) -> Alternative:
    if not isinstance(raw, dict) or raw.get("type") not in ("text", "tool_call"):
        raise fail("malformed alternative: needs type 'text' or 'tool_call'")
    if raw["type"] == "text":
        if not _text(raw.get("text")):
            raise fail("malformed alternative: a text alternative needs non-empty text")
        return Alternative(text=raw["text"])
    call = raw.get("tool_call")
    if not isinstance(call, dict) or not _text(call.get("name")):
        raise fail("malformed alternative: a tool call needs a tool name")
    if not isinstance(call.get("arguments"), dict):
        raise fail("malformed alternative: tool call arguments must be a JSON object, got "
                   f"{type(call.get('arguments')).__name__}")
    return Alternative(tool_call=ToolCall("", call["name"], call["arguments"]))


def _original(item: ExtractionInput, action: Action) -> Alternative:
    call = item.trace.tool_call(action)
    if call is not None:
        return Alternative(tool_call=ToolCall("", call.name, call.arguments))
    return Alternative(text=item.trace.messages[action.message_index].content)


def _trace_text(item: ExtractionInput) -> str:
    """What an assessment may quote: every message's text and every tool call's arguments."""
    parts = []
    for message in item.trace.messages:
        parts.append(message.content)
        parts += [json.dumps(c.arguments, ensure_ascii=False, sort_keys=True)
                  for c in message.tool_calls]
    return "\n".join(parts)


def _normalize(text: str) -> str:
    # Verbatim up to whitespace runs: a quote may rewrap lines, never change words.
    return " ".join(text.split())


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())
