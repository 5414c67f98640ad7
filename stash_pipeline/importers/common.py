"""What every importer shares: options, the trace-object wrapper, and the final validation step."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import Feedback, Rating, Review, VerifiedOutcome, feedback_id
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.traces import DEFAULT_OWNER, Message, Trace, content_trace_id
from stash_pipeline.core.validation import validate_feedback, validate_review, validate_trace
from stash_pipeline.importers.fields import (
    expect_list,
    expect_object,
    json_type,
    number,
    optional_object,
    optional_str,
)
from stash_pipeline.importers.jsonio import RawRecord, iter_records
from stash_pipeline.importers.limits import ImportLimits

# Where a verified outcome is read from a trace's metadata by default (docs/importing.md).
DEFAULT_OUTCOME_FIELD = "outcome"


@dataclass(frozen=True)
class ImportOptions:
    owner: str = DEFAULT_OWNER
    contribute: bool = False
    limits: ImportLimits = ImportLimits()
    # Preference data sets: who made and who reviewed the imported comparisons, and whether a
    # record that cannot be a comparison is skipped (reported to ``on_skipped``) or refused.
    author: str | None = None
    reviewer: str | None = None
    skip_invalid: bool = False
    on_skipped: Callable[[InputError], None] | None = None
    # A dotted path in each trace's metadata whose value is a verified outcome; None: none read.
    outcome_field: str | None = DEFAULT_OUTCOME_FIELD


@contextmanager
def locating(file: str, record: str) -> Iterator[None]:
    """Fill in the file and record of any InputError raised inside."""
    try:
        yield
    except InputError as error:
        raise error.located(file=file, record=record) from None


def finish(trace: Trace, feedback: tuple[Feedback | Review, ...], *, file: str, record: str,
           number: int, limits: ImportLimits, outcome_field: str | None = None) -> ImportedTrace:
    """Validate the trace and its feedback under the limits; errors name the file and record.

    With ``outcome_field``, a verified outcome in the trace's metadata at that dotted path joins
    the feedback (``metadata_outcome``).
    """
    with locating(file, record):
        if outcome_field:
            feedback = feedback + metadata_outcome(trace, outcome_field)
        validate_trace(trace, max_depth=limits.max_depth, max_text_chars=limits.max_string_chars)
        for index, item in enumerate(feedback):
            try:
                if isinstance(item, Review):
                    validate_review(item)
                else:
                    validate_feedback(item, max_text_chars=limits.max_string_chars)
            except InputError as error:
                raise InputError(error.reason, field=f"feedback[{index}].{error.field}") from None
    reviews = tuple(item for item in feedback if isinstance(item, Review))
    others = tuple(item for item in feedback if not isinstance(item, Review))
    # Validated here, under the import's limits: the store does not check it again.
    return ImportedTrace(trace, others, source=f"{file}:{number}", reviews=reviews,
                         cleared=(trace, others, reviews))


def metadata_outcome(trace: Trace, path: str) -> tuple[VerifiedOutcome, ...]:
    """The verified outcome at a dotted path of the trace's metadata (``outcome``, ``eval.reward``;
    a leading ``metadata.`` is optional): a number (1.0 succeeded) or true/false. None or absent:
    no outcome. Anything else is an InputError naming the field."""
    path = path.removeprefix("metadata.")
    value: Any = trace.metadata
    for key in path.split("."):
        if not isinstance(value, dict) or value.get(key) is None:
            return ()
        value = value[key]
    field = f"metadata.{path}"
    if isinstance(value, bool):
        reward = 1.0 if value else 0.0
    elif isinstance(value, (int, float)):
        reward = number(value, field)
    else:
        raise InputError(f"a verified outcome is a number (1 succeeded, 0 failed) or true/false, "
                         f"got {json_type(value)}", field=field)
    return (VerifiedOutcome(feedback_id("outcome", trace.id, field), trace.id, reward,
                            source=field),)


TraceObjectConverter = Callable[[dict[str, Any], ImportOptions], tuple[Trace, tuple[Feedback, ...]]]


def read_trace_objects(path: Path, options: ImportOptions,
                       convert: TraceObjectConverter) -> Iterator[ImportedTrace]:
    """Each record of a JSON, JSON-array or JSONL file of trace objects, converted and validated."""
    file = str(path)
    for record in iter_records(path, options.limits):
        with locating(file, record.label):
            trace, feedback = convert(trace_object(record), options)
        yield finish(trace, feedback, file=file, record=record.label, number=record.number,
                     limits=options.limits, outcome_field=options.outcome_field)


def trace_object(record: RawRecord) -> dict[str, Any]:
    data = expect_object(record.data, "record")
    if data.get("messages") is None:
        hint = " (this looks like a single message: wrap a conversation as {\"messages\": [...]})" \
            if "role" in data else ""
        raise InputError(f"a trace object needs 'messages'{hint}", field="messages")
    return data


def wrapper_trace(record: dict[str, Any], messages: tuple[Message, ...],
                  tools: tuple[dict[str, Any], ...], *, source_format: str,
                  options: ImportOptions) -> Trace:
    """The trace object both chat formats share: ``{id?, agent?, domain?, metadata?, tools?, ...}``.

    Without an id the trace id is derived from the record's content (its feedback aside, so adding
    feedback later still maps to the same trace): reimporting the same record updates one trace.
    """
    trace_id = optional_str(record, "id", "id")
    if not trace_id:
        content = {k: v for k, v in record.items() if k != "feedback"}
        trace_id = content_trace_id(source_format, content)
    agent = optional_str(record, "agent", "agent") or optional_str(record, "model", "model")
    return Trace(
        id=trace_id,
        messages=messages,
        owner=options.owner,
        agent=agent,
        domain=optional_str(record, "domain", "domain"),
        metadata=optional_object(record, "metadata", "metadata"),
        tools=tools,
        contribute=options.contribute,
    )


def openai_tools(value: Any, field: str) -> tuple[dict[str, Any], ...]:
    """Tool schemas in the OpenAI form ``{"type": "function", "function": {name, ...}}``.

    A bare ``{name, description?, parameters?}`` is wrapped into that form.
    """
    if value is None:
        return ()
    tools = []
    for i, tool in enumerate(expect_list(value, field)):
        tool = expect_object(tool, f"{field}[{i}]")
        if "function" in tool:
            function = expect_object(tool["function"], f"{field}[{i}].function")
            if not isinstance(function.get("name"), str) or not function["name"]:
                raise InputError("a tool needs a name", field=f"{field}[{i}].function.name")
            tools.append({**tool, "type": tool.get("type", "function")})
        else:
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise InputError("a tool needs a name", field=f"{field}[{i}].name")
            function = {k: v for k, v in tool.items() if k != "type"}
            tools.append({"type": "function", "function": function})
    return tuple(tools)


def message_action_ids(trace: Trace, message_index: int, field: str) -> list[str]:
    """The full ids of the actions of one assistant message (its text, then its tool calls)."""
    if not 0 <= message_index < len(trace.messages):
        raise InputError(f"message index {message_index} is out of range: the trace has "
                         f"{len(trace.messages)} messages", field=field)
    actions = [a.id for a in trace.actions() if a.message_index == message_index]
    if not actions:
        role = trace.messages[message_index].role
        raise InputError(f"message {message_index} ({role}) has no action to rate: only assistant "
                         "text and tool calls are actions", field=field)
    return actions


def step_ratings(trace: Trace, message_index: int, value: float, *, field: str,
                 origin: str) -> list[Rating]:
    """A step rating on a whole assistant message: one rating on each of its actions."""
    return [
        Rating(feedback_id("rating", trace.id, origin, action), trace.id, value, action_id=action)
        for action in message_action_ids(trace, message_index, field)
    ]
