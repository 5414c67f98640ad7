"""Helpers for the importer tests: the shared real data, and small files written per test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.importers import read_path

# The project sits beside shared/ (any clone folder works): ../shared/data from the project root.
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def shared_data(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    assert path.exists(), f"the shared test data is missing: {path}"
    return path


def write_json(directory: Path, name: str, payload: Any) -> Path:
    path = directory / name
    path.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    return path


def write_jsonl(directory: Path, name: str, records: list[Any]) -> Path:
    path = directory / name
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


def read_all(path: Path, **options: Any) -> list[ImportedTrace]:
    return list(read_path(path, **options))


def import_error(path: Path, **options: Any) -> InputError:
    with pytest.raises(InputError) as caught:
        read_all(path, **options)
    return caught.value


def refund_trace(**extra):
    return {
        "id": "a-1",
        "model": "claude-x",
        "system": [{"type": "text", "text": "Follow the refund policy."},
                   {"type": "text", "text": "Be polite."}],
        "tools": [{"name": "lookup_order", "description": "Find an order",
                   "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": "Refund order 42"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "need the order", "signature": "s"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "tu1", "name": "lookup_order", "input": {"id": "42"}},
                {"type": "tool_use", "id": "tu2", "name": "lookup_order", "input": {"id": "43"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "tu1", "content": "order 42: shipped"},
                {"type": "tool_result", "tool_use_id": "tu2", "is_error": True,
                 "content": [{"type": "text", "text": "not found"}]},
                {"type": "text", "text": "Only 42 matters."},
            ]},
            {"role": "assistant", "content": "Refund issued."},
        ],
        **extra,
    }
