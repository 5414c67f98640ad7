"""Typed reads of source JSON that fail with an InputError naming the field, never a TypeError."""

from __future__ import annotations

import json
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.validation import MAX_JSON_DEPTH, check_number
from stash_pipeline.importers.jsonio import loads_text

# Text parts of one message (OpenAI content parts, Anthropic text blocks, OTel text parts) are
# joined with a newline: they are consecutive pieces of one turn.
TEXT_PART_SEPARATOR = "\n"


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def expect_object(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"expected a JSON object, got {json_type(value)}", field=field)
    return value


def refuse_unknown_keys(item: dict[str, Any], known: tuple[str, ...], what: str,
                       where: str | None = None) -> None:
    """An InputError naming the first key of ``item`` that is not in ``known`` (a misspelt
    ``action_id`` must not turn a step label into a trace label)."""
    for key in item:
        if key not in known:
            raise InputError(f"unknown field; {what} has {', '.join(known)}",
                             field=f"{where}.{key}" if where else key)


def expect_list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise InputError(f"expected a JSON array, got {json_type(value)}", field=field)
    return value


def required(record: dict[str, Any], key: str, field: str) -> Any:
    if key not in record or record[key] is None:
        raise InputError(f"missing required field {key!r}", field=field)
    return record[key]


def optional_str(record: dict[str, Any], key: str, field: str) -> str | None:
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"expected a string, got {json_type(value)}", field=field)
    return str(value)


def optional_object(record: dict[str, Any], key: str, field: str) -> dict[str, Any]:
    value = record.get(key)
    return {} if value is None else dict(expect_object(value, field))


def number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a number, got {json_type(value)}", field=field)
    check_number(value, field)  # 1e999 reads as infinity
    return float(value)


# Where a recorded agent's malformed arguments are kept verbatim (see parse_arguments).
UNPARSED_ARGUMENTS_KEY = "__unparsed_arguments__"


def parse_arguments(value: Any, field: str, *, keep_unparsed: bool = False) -> dict[str, Any]:
    """Tool-call arguments: a JSON object, or a string holding one (empty string: no arguments).

    Anything else is an InputError, unless ``keep_unparsed``: benchmark datasets record agents that
    emitted broken arguments on purpose (that is what their labels judge), so there the raw value is
    kept as ``{UNPARSED_ARGUMENTS_KEY: <raw string>}`` instead of rejecting the trace.
    """
    if value is None:
        return {}
    raw = value
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = loads_text(value, field, MAX_JSON_DEPTH)
        except json.JSONDecodeError as error:
            if keep_unparsed:
                return {UNPARSED_ARGUMENTS_KEY: raw}
            raise InputError(f"arguments are not valid JSON: {error.msg} at character {error.pos}",
                             field=field) from None
        except InputError:  # nested too deep, or NaN / Infinity
            if keep_unparsed:
                return {UNPARSED_ARGUMENTS_KEY: raw}
            raise
    if not isinstance(value, dict):
        if keep_unparsed:
            return {UNPARSED_ARGUMENTS_KEY: raw if isinstance(raw, str) else json.dumps(raw)}
        raise InputError(f"arguments must be a JSON object, got {json_type(value)}", field=field)
    return value


def join_text(parts: list[str]) -> str:
    return TEXT_PART_SEPARATOR.join(part for part in parts if part)


def as_text(value: Any, field: str) -> str:
    """Free-form content (a tool result, an OTel response): strings as is, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        raise InputError(f"cannot be written as text: {json_type(value)}", field=field) from None
