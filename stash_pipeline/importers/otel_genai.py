"""OpenTelemetry GenAI semantic conventions in OTLP JSON: one trace per conversation.

Spans carry ``gen_ai.input.messages`` / ``gen_ai.output.messages`` / ``gen_ai.system_instructions``
(JSON, messages of ``role`` and ``parts``: ``text``, ``tool_call`` {id, name, arguments},
``tool_call_response`` {id, response}); the same attributes on a span's
``gen_ai.client.inference.operation.details`` event are read too. ``gen_ai.conversation.id`` groups
spans into one trace; a span without one joins the conversation of its OTLP trace when that trace
has exactly one, else its OTLP trace is the group. Each model call repeats the history before it,
so a conversation is assembled by appending each span's input and output after the longest overlap
with what is already there, in start-time order, and a span that encloses another message span of
its conversation (an agent span around its model calls) is left out: its messages repeat theirs.

The file is read twice, streaming: first to learn where each conversation's last span is, then to
build each conversation as soon as its last span has been read. Memory holds the conversations
still open, not the file.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.traces import ROLES, Message, ToolCall, Trace
from stash_pipeline.core.validation import MAX_JSON_DEPTH
from stash_pipeline.importers.common import ImportOptions, finish, locating, openai_tools
from stash_pipeline.importers.fields import (
    as_text,
    expect_list,
    expect_object,
    join_text,
    parse_arguments,
)
from stash_pipeline.importers.jsonio import loads_text
from stash_pipeline.importers.limits import ImportLimits
from stash_pipeline.importers.otlp import OtlpSpan, iter_spans, span_attributes, unix_nanos

FORMAT = "otel"
CONVERSATION_ID = "gen_ai.conversation.id"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
AGENT_NAME = "gen_ai.agent.name"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
MODEL_NAMES = ("gen_ai.response.model", "gen_ai.request.model")
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
CONTENT_KEYS = (INPUT_MESSAGES, OUTPUT_MESSAGES, SYSTEM_INSTRUCTIONS)
SPAN_KEYS = (CONVERSATION_ID, *CONTENT_KEYS, AGENT_NAME, TOOL_DEFINITIONS, *MODEL_NAMES)


@dataclass(frozen=True)
class GenAISpan:
    ordinal: int
    number: int
    trace_id: str
    span_id: str
    parent_id: str
    start: int
    end: int
    input: tuple[Message, ...]
    output: tuple[Message, ...]
    system: str
    agent: str | None
    model: str | None
    tools: tuple[dict[str, Any], ...]

    def encloses(self, other: GenAISpan) -> bool:
        if other.parent_id and other.parent_id == self.span_id:
            return True
        return (self.trace_id == other.trace_id and self.start <= other.start
                and other.end <= self.end and (self.start, self.end) != (other.start, other.end))


def read(path: Path, options: ImportOptions) -> Iterator[ImportedTrace]:
    file = str(path)
    plan = _plan(path, options.limits)
    open_groups: dict[str, list[GenAISpan]] = {}
    emitted = 0
    for ordinal, span in enumerate(iter_spans(path, options.limits)):
        attributes = _relevant_attributes(span)
        if attributes is None:
            continue
        key = plan.group(attributes.get(CONVERSATION_ID), span.data.get("traceId"))
        with locating(file, span.label):
            open_groups.setdefault(key, []).append(parse_span(span, ordinal, attributes))
        if plan.last[key] == ordinal:
            imported = build_trace(key, open_groups.pop(key), options, file)
            if imported is not None:
                emitted += 1
                yield imported
    if emitted == 0:
        raise InputError(f"no GenAI spans with {INPUT_MESSAGES} or {OUTPUT_MESSAGES}", file=file)


@dataclass
class _Plan:
    """Where each group's last span is, learned in a first streaming pass."""

    trace_conversations: dict[str, set[str]]
    last: dict[str, int]

    def group(self, conversation: Any, trace_id: Any) -> str:
        if conversation is not None:
            return f"conversation:{conversation}"
        conversations = self.trace_conversations.get(str(trace_id), set())
        if len(conversations) == 1:
            return f"conversation:{next(iter(conversations))}"
        return f"trace:{trace_id}"


def _plan(path: Path, limits: ImportLimits) -> _Plan:
    plan = _Plan({}, {})
    pending: list[tuple[int, Any, Any]] = []
    for ordinal, span in enumerate(iter_spans(path, limits)):
        attributes = _relevant_attributes(span)
        if attributes is None:
            continue
        conversation, trace_id = attributes.get(CONVERSATION_ID), span.data.get("traceId")
        if conversation is not None:
            plan.trace_conversations.setdefault(str(trace_id), set()).add(str(conversation))
            plan.last[f"conversation:{conversation}"] = ordinal
        else:
            pending.append((ordinal, conversation, trace_id))
    for ordinal, conversation, trace_id in pending:
        key = plan.group(conversation, trace_id)
        plan.last[key] = max(plan.last.get(key, -1), ordinal)
    return plan


def _relevant_attributes(span: OtlpSpan) -> dict[str, Any] | None:
    """The span's GenAI attributes, or None when it has no conversation id and no messages."""
    attributes = span_attributes(span.data, SPAN_KEYS, DETAILS_EVENT)
    if CONVERSATION_ID in attributes or any(key in attributes for key in CONTENT_KEYS):
        return attributes
    return None


def parse_span(span: OtlpSpan, ordinal: int, attributes: dict[str, Any]) -> GenAISpan:
    data = span.data
    system = _json_attribute(attributes, SYSTEM_INSTRUCTIONS)
    return GenAISpan(
        ordinal=ordinal,
        number=span.number,
        trace_id=str(data.get("traceId") or ""),
        span_id=str(data.get("spanId") or ""),
        parent_id=str(data.get("parentSpanId") or ""),
        start=unix_nanos(data.get("startTimeUnixNano")),
        end=unix_nanos(data.get("endTimeUnixNano")),
        input=convert_messages(_json_attribute(attributes, INPUT_MESSAGES), INPUT_MESSAGES),
        output=convert_messages(_json_attribute(attributes, OUTPUT_MESSAGES), OUTPUT_MESSAGES),
        system=_parts_text(system, SYSTEM_INSTRUCTIONS) if system is not None else "",
        agent=_string(attributes.get(AGENT_NAME)),
        model=next((_string(attributes[k]) for k in MODEL_NAMES if k in attributes), None),
        tools=openai_tools(_json_attribute(attributes, TOOL_DEFINITIONS), TOOL_DEFINITIONS),
    )


def build_trace(key: str, spans: list[GenAISpan], options: ImportOptions,
                file: str) -> ImportedTrace | None:
    # Ties broken by span id, not file position: the same spans in any order make one trace.
    spans.sort(key=lambda s: (s.start, s.end, s.span_id, s.ordinal))
    with_messages = [s for s in spans if s.input or s.output]
    if not with_messages:
        return None  # tool or agent spans of a conversation whose model calls are elsewhere
    leaves = [s for s in with_messages
              if not any(s.encloses(other) for other in with_messages if other is not s)]
    history: list[Message] = []
    for span in leaves:
        merge_history(history, span.input + span.output)
    system = next((s.system for s in spans if s.system), "")
    if system and not (history and history[0].role == "system"):
        history.insert(0, Message("system", system))
    kind, _, raw_id = key.partition(":")
    trace = Trace(
        id=raw_id if kind == "conversation" else _otlp_trace_uuid(raw_id),
        messages=_named_tool_results(history),
        owner=options.owner,
        agent=next((s.agent for s in spans if s.agent), None)
        or next((s.model for s in spans if s.model), None),
        metadata={},
        tools=next((s.tools for s in spans if s.tools), ()),
        contribute=options.contribute,
    )
    label = f"conversation {raw_id}" if kind == "conversation" else f"OTLP trace {raw_id}"
    return finish(trace, (), file=file, record=label, number=spans[0].number,
                  limits=options.limits, outcome_field=options.outcome_field)


def merge_history(history: list[Message], sequence: tuple[Message, ...]) -> None:
    """Append ``sequence`` after its longest prefix that ``history`` already ends with."""
    n = len(history)
    if tuple(history) == sequence[:n]:
        history.extend(sequence[n:])
        return
    for overlap in range(min(n, len(sequence)), -1, -1):
        if overlap == 0 or tuple(history[n - overlap:]) == sequence[:overlap]:
            history.extend(sequence[overlap:])
            return


def convert_messages(value: Any, field: str) -> tuple[Message, ...]:
    if value is None:
        return ()
    messages: list[Message] = []
    for i, raw in enumerate(expect_list(value, field)):
        messages.extend(convert_message(expect_object(raw, f"{field}[{i}]"), f"{field}[{i}]"))
    return tuple(messages)


def convert_message(message: dict[str, Any], where: str) -> list[Message]:
    """One semconv message; each ``tool_call_response`` part becomes a tool message of its own."""
    role = message.get("role")
    if role not in ROLES:
        raise InputError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}",
                         field=f"{where}.role")
    out: list[Message] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    for k, raw in enumerate(expect_list(message.get("parts") or [], f"{where}.parts")):
        part = expect_object(raw, f"{where}.parts[{k}]")
        kind = part.get("type")
        if kind == "text":
            texts.append(_text(part, f"{where}.parts[{k}].content"))
        elif kind == "tool_call":
            if role != "assistant":
                raise InputError("only assistant messages make tool calls",
                                 field=f"{where}.parts[{k}]")
            calls.append(_tool_call(part, f"{where}.parts[{k}]"))
        elif kind == "tool_call_response":
            if texts:
                out.append(Message(role, join_text(texts)))
                texts = []
            call_id = part.get("id")
            response = as_text(part.get("response"), f"{where}.parts[{k}].response")
            out.append(Message("tool", response,
                               tool_call_id=None if call_id is None else str(call_id)))
        # reasoning, blob, file and uri parts have no place in the trace model
    if texts or calls or not out:
        out.append(Message(role, join_text(texts), tuple(calls)))
    return out


def _tool_call(part: dict[str, Any], where: str) -> ToolCall:
    name = part.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("a tool_call part needs a name", field=f"{where}.name")
    arguments = parse_arguments(part.get("arguments"), f"{where}.arguments")
    call_id = part.get("id")
    if call_id is None:
        # The same call is repeated in later spans' inputs: its id must come from its content.
        digest = hashlib.sha256(json.dumps([name, arguments], sort_keys=True).encode()).hexdigest()
        call_id = f"call_{digest[:16]}"
    return ToolCall(str(call_id), name, arguments)


def _named_tool_results(history: list[Message]) -> tuple[Message, ...]:
    """Tool results name their tool (the semconv response part only gives the call id)."""
    names: dict[str, str] = {}
    out = []
    for message in history:
        names.update((call.id, call.name) for call in message.tool_calls)
        if message.role == "tool" and message.name is None and message.tool_call_id in names:
            message = replace(message, name=names[message.tool_call_id])
        out.append(message)
    return tuple(out)


def _json_attribute(attributes: dict[str, Any], key: str) -> Any:
    """Semconv recommends JSON strings on spans; structured (array) values are accepted too."""
    value = attributes.get(key)
    if not isinstance(value, str):
        return value
    try:
        return loads_text(value, f"attributes.{key}", MAX_JSON_DEPTH)
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON: {error.msg} at character {error.pos}",
                         field=f"attributes.{key}") from None


def _parts_text(value: Any, field: str) -> str:
    """System instructions: a list of parts (text kept), or a plain string."""
    if isinstance(value, str):
        return value
    texts = []
    for k, part in enumerate(expect_list(value, field)):
        part = expect_object(part, f"{field}[{k}]")
        if part.get("type") == "text":
            texts.append(_text(part, f"{field}[{k}].content"))
    return join_text(texts)


def _text(part: dict[str, Any], field: str) -> str:
    content = part.get("content")
    if not isinstance(content, str):
        raise InputError("a text part needs a string 'content'", field=field)
    return content


def _string(value: Any) -> str | None:
    return None if value is None else str(value)


def _otlp_trace_uuid(trace_id: str) -> str:
    """An OTLP trace id is 16 bytes in hex: exactly a UUID."""
    try:
        return str(uuid.UUID(hex=trace_id))
    except ValueError:
        return trace_id
