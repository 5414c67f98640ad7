"""Which format a file is in, from its content: the first record's shape, read streaming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.importers.jsonio import iter_records, sniff_layout, top_level_keys
from stash_pipeline.importers.limits import ImportLimits
from stash_pipeline.importers.preference import looks_like_preference

# Keys that settle a whole-file JSON object's format without reading the rest of it.
_DOCUMENT_KEYS = {"resourceSpans": "otel", "simulations": "tau2"}
_OPENAI_ONLY_ROLES = {"system", "developer", "tool"}
_ANTHROPIC_ONLY_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking",
                          "server_tool_use"}


def detect_format(path: Path, limits: ImportLimits | None = None) -> str:
    limits = limits or ImportLimits()
    if sniff_layout(path, limits) == "object":
        keys = top_level_keys(path, set(_DOCUMENT_KEYS), limits)
        for key, name in _DOCUMENT_KEYS.items():
            if key in keys:
                return name
    first = next(iter(iter_records(path, limits)))
    name = classify_record(first.data)
    if name is None:
        raise InputError(
            "cannot tell the format from this record: expected a trace object with 'messages', "
            "an OTLP export with 'resourceSpans', a tau2-bench result with 'simulations', or a "
            "preference record with 'chosen' and 'rejected'; "
            "name the format explicitly", file=str(path), record=first.label,
        )
    return name


def classify_record(record: Any) -> str | None:
    if not isinstance(record, dict):
        return None
    for key, name in _DOCUMENT_KEYS.items():
        if key in record:
            return name
    if "step_labels" in record or "final_label" in record:
        return "agentprocessbench"
    if looks_like_preference(record):
        return "preference"
    if "messages" not in record:
        return None
    return "anthropic" if _looks_anthropic(record) else "openai"


def _looks_anthropic(record: dict[str, Any]) -> bool:
    """Plain user/assistant text reads the same in both formats; OpenAI is then the default."""
    messages = record.get("messages")
    if not isinstance(messages, list):
        return False
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("tool_calls") or message.get("role") in _OPENAI_ONLY_ROLES:
            return False
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") in _ANTHROPIC_ONLY_BLOCKS
            for block in content
        ):
            return True
    return "system" in record
