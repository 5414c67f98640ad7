"""OTLP JSON trace exports: spans streamed out of files, and their attributes decoded.

A file is one export request ``{resourceSpans: [{scopeSpans: [{spans: [...]}]}]}`` (spans are
streamed from it one at a time), or JSON Lines / a JSON array of such requests (the collector's
file exporter writes one request a line).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.importers.common import locating
from stash_pipeline.importers.fields import expect_list, expect_object
from stash_pipeline.importers.jsonio import iter_items, iter_records, sniff_layout
from stash_pipeline.importers.limits import ImportLimits

SPANS_PREFIX = "resourceSpans.item.scopeSpans.item.spans.item"


@dataclass(frozen=True)
class OtlpSpan:
    number: int  # the JSONL line or array index of its export request, or the span's ordinal
    label: str  # the record an error names
    data: dict[str, Any]


def iter_spans(path: Path, limits: ImportLimits) -> Iterator[OtlpSpan]:
    file = str(path)
    count = 0
    if sniff_layout(path, limits) == "object":
        for record in iter_items(path, SPANS_PREFIX, limits, label=lambda i: f"span {i}"):
            with locating(file, record.label):
                span = expect_object(record.data, "span")
            count += 1
            yield OtlpSpan(record.number, record.label, span)
    else:
        for record in iter_records(path, limits):
            with locating(file, record.label):
                spans = list(_request_spans(expect_object(record.data, "record")))
            for where, span in spans:
                count += 1
                yield OtlpSpan(record.number, f"{record.label} {where}", span)
    if count == 0:
        raise InputError("no spans: expected resourceSpans[].scopeSpans[].spans[]", file=file,
                         field="resourceSpans")


def _request_spans(request: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for r, resource in enumerate(expect_list(request.get("resourceSpans") or [], "resourceSpans")):
        where_r = f"resourceSpans[{r}]"
        resource = expect_object(resource, where_r)
        for s, scope in enumerate(expect_list(resource.get("scopeSpans") or [],
                                              f"{where_r}.scopeSpans")):
            where_s = f"{where_r}.scopeSpans[{s}]"
            scope = expect_object(scope, where_s)
            for k, span in enumerate(expect_list(scope.get("spans") or [], f"{where_s}.spans")):
                yield f"{where_s}.spans[{k}]", expect_object(span, f"{where_s}.spans[{k}]")


def attribute(attributes: Any, key: str) -> Any:
    """One attribute's decoded value from an OTLP ``[{key, value: AnyValue}]`` list, or None."""
    if not isinstance(attributes, list):
        return None
    for item in attributes:
        if isinstance(item, dict) and item.get("key") == key:
            return any_value(item.get("value"), f"attributes.{key}")
    return None


def span_attributes(span: dict[str, Any], keys: tuple[str, ...],
                    event_name: str | None = None) -> dict[str, Any]:
    """The wanted attributes of a span; those of its ``event_name`` events fill in missing ones."""
    found = {key: attribute(span.get("attributes"), key) for key in keys}
    if event_name is not None:
        for event in span.get("events") or []:
            if isinstance(event, dict) and event.get("name") == event_name:
                for key in keys:
                    if found[key] is None:
                        found[key] = attribute(event.get("attributes"), key)
    return {key: value for key, value in found.items() if value is not None}


def any_value(value: Any, field: str) -> Any:
    """An OTLP JSON AnyValue as plain Python (int64 values arrive as strings in OTLP JSON)."""
    if value is None:
        return None
    value = expect_object(value, field)
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            raise InputError("intValue is not an integer", field=field) from None
    if "doubleValue" in value:
        return value["doubleValue"]
    if "bytesValue" in value:
        return value["bytesValue"]
    if "arrayValue" in value:
        items = (value["arrayValue"] or {}).get("values") or []
        return [any_value(item, f"{field}[{i}]") for i, item in enumerate(items)]
    if "kvlistValue" in value:
        items = (value["kvlistValue"] or {}).get("values") or []
        return {item.get("key"): any_value(item.get("value"), f"{field}.{item.get('key')}")
                for item in items if isinstance(item, dict)}
    return None


def unix_nanos(value: Any) -> int:
    """A ``*TimeUnixNano`` field (a decimal string in OTLP JSON); 0 when absent or unreadable."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
