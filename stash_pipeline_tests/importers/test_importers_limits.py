"""Import limits in every format: nesting depth, record size, string length, file size.

Each refusal is an InputError naming the file and the record; a file exactly at a limit imports.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.validation import MAX_JSON_DEPTH, MAX_TEXT_CHARS
from stash_pipeline.importers import ImportLimits
from stash_pipeline.importers.limits import JsonRefused, JsonScanner, NestingTooDeep
from stash_pipeline_tests.support.importer_helpers import (
    import_error,
    read_all,
    write_json,
    write_jsonl,
)

MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def nested(depth: int, shape: str):
    """A value ``depth`` levels deep: arrays in arrays, or objects in objects."""
    value: object = 1
    for _ in range(depth):
        value = [value] if shape == "array" else {"a": value}
    return value


def file_depth(path: Path) -> int:
    """The deepest nesting of the file's JSON text (every record, for JSON Lines)."""
    def depth(value) -> int:
        if isinstance(value, (list, dict)):
            children = value.values() if isinstance(value, dict) else value
            return 1 + max((depth(child) for child in children), default=0)
        return 0
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return max(depth(json.loads(line)) for line in text.splitlines() if line.strip())
    return depth(json.loads(text))


def otel_span(extra: dict) -> dict:
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "s1",
            "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": [{"key": "gen_ai.conversation.id", "value": {"stringValue": "c1"}},
                           {"key": "gen_ai.input.messages", "value": {"stringValue": messages}}],
            **extra}


def otel_export(extra: dict) -> dict:
    return {"resourceSpans": [{"scopeSpans": [{"spans": [otel_span(extra)]}]}]}


def apb_row(extra: dict) -> dict:
    return {"data_source": "hotpotqa", "total_index": 1, "messages": MESSAGES,
            "step_labels": {"1": 1}, "final_label": 1, **extra}


def tau2_run(extra: dict) -> dict:
    return {"info": {"environment_info": {"domain_name": "airline", "policy": "p"}},
            "simulations": [{"id": "s0", "messages": MESSAGES, **extra}]}


# (name, writer of a file holding ``payload`` in a place the importer reads past, the record an
# error names). The payload sits in an ignored or free-form field of the first record (feedback
# items have none: an unknown field there is refused, test_importers_openai.py).
FORMATS = {
    "openai jsonl": (lambda d, p: write_jsonl(d, "t.jsonl", [
        {"id": "a", "messages": MESSAGES, "metadata": {"deep": p}}]), "line 1"),
    "openai array": (lambda d, p: write_json(d, "t.json", [
        {"id": "a", "messages": MESSAGES, "metadata": {"deep": p}}]), "index 0"),
    "openai document": (lambda d, p: _pretty(d, "t.json", {
        "id": "a", "messages": MESSAGES, "extra": p}), "document"),
    "anthropic": (lambda d, p: write_jsonl(d, "t.jsonl", [
        {"id": "a", "system": "s", "messages": MESSAGES, "extra": p}]), "line 1"),
    # Documents are pretty-printed as real exports are (a one-line document is also a JSON Lines
    # file of one line, and its errors name line 1).
    "tau2": (lambda d, p: _pretty(d, "t.json", tau2_run({"deep": p})), "simulations[0]"),
    "otel export": (lambda d, p: _pretty(d, "t.json", otel_export({"deep": p})), "span 0"),
    "otel jsonl": (lambda d, p: write_jsonl(d, "t.jsonl", [otel_export({"deep": p})]), "line 1"),
    "agentprocessbench": (lambda d, p: write_jsonl(d, "t.jsonl", [apb_row({"deep": p})]),
                          "line 1"),
}


def _pretty(directory: Path, name: str, payload: dict) -> Path:
    path = directory / name
    path.write_text(json.dumps(payload, indent=1))
    return path


@pytest.mark.parametrize("shape", ["array", "object"])
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_nesting_at_the_limit_imports_and_one_level_more_is_refused(tmp_path, name, shape):
    write, record = FORMATS[name]
    path = write(tmp_path, nested(30, shape))
    depth = file_depth(path)
    assert len(read_all(path, limits=ImportLimits(max_depth=depth))) == 1
    error = import_error(path, limits=ImportLimits(max_depth=depth - 1))
    assert (error.file, error.record) == (str(path), record)
    assert f"nested deeper than the limit of {depth - 1} levels" in error.reason


def test_the_error_names_the_deep_record_not_an_earlier_one_read_with_it(tmp_path):
    good = {"id": "a", "messages": MESSAGES}
    deep = {"id": "b", "messages": MESSAGES, "metadata": {"x": nested(20, "array")}}
    limits = ImportLimits(max_depth=10)
    array = write_json(tmp_path, "t.json", [good, good, deep, good])
    assert import_error(array, limits=limits).record == "index 2"
    run = tau2_run({})
    run["simulations"] = [{"id": f"s{i}", "messages": MESSAGES} for i in range(3)]
    run["simulations"][1]["deep"] = nested(20, "object")
    assert import_error(write_json(tmp_path, "run.json", run), limits=limits,
                        format="tau2").record == "simulations[1]"
    lines = write_jsonl(tmp_path, "t.jsonl", [good, deep])
    assert import_error(lines, limits=limits).record == "line 2"


@pytest.mark.parametrize("shape", ["array", "object"])
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_100k_levels_are_refused_by_default_in_every_format(tmp_path, name, shape):
    write, record = FORMATS[name]
    # Written by hand: json.dumps itself cannot nest this deep.
    deep = ("[" * 100_000 + "]" * 100_000) if shape == "array" else \
        ('{"a":' * 100_000 + "1" + "}" * 100_000)
    path = write(tmp_path, "PLACEHOLDER")
    path.write_text(path.read_text().replace('"PLACEHOLDER"', deep, 1))
    error = import_error(path)
    assert (error.file, error.record) == (str(path), record)
    assert f"limit of {MAX_JSON_DEPTH} levels" in error.reason


def test_a_whole_file_of_brackets_and_deep_documents_before_their_records(tmp_path):
    brackets = tmp_path / "deep.json"
    brackets.write_text("[" * 40_000 + "]" * 40_000)
    assert import_error(brackets).record == "index 0"
    # Detection peeks at a document's keys: that peek is bounded too.
    peek = tmp_path / "peek.json"
    peek.write_text('{\n"x": ' + "[" * 50_000 + "]" * 50_000 + ',\n"simulations": []\n}')
    error = import_error(peek)
    assert (error.file, error.record) == (str(peek), "document")
    # tau2's run info is read before the simulations.
    info = tmp_path / "info.json"
    info.write_text('{"info": ' + "[" * 50_000 + "]" * 50_000 + ', "simulations": []}')
    assert import_error(info, format="tau2").record == "info"


def test_json_held_in_strings_is_under_the_same_limit(tmp_path):
    def record(arguments: str) -> dict:
        return {"messages": [MESSAGES[0], {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]}]}
    path = write_jsonl(tmp_path, "t.jsonl", [
        record(json.dumps(nested(MAX_JSON_DEPTH + 1, "object")))])
    error = import_error(path)
    assert (error.record, error.field) == ("line 1",
                                           "messages[1].tool_calls[0].function.arguments")
    assert "nested deeper than the limit" in error.reason
    # Within the limit it imports; a lower import limit applies to what the trace keeps.
    path = write_jsonl(tmp_path, "t.jsonl", [record(json.dumps({"x": nested(9, "array")}))])
    assert len(read_all(path)) == 1
    error = import_error(path, limits=ImportLimits(max_depth=8))
    assert error.record == "line 1"
    assert error.field.startswith("messages[1].tool_calls[0].arguments.x[0]")


def test_otel_attributes_and_agentprocessbench_tools_hold_json_too(tmp_path):
    deep = json.dumps(nested(MAX_JSON_DEPTH + 1, "array"))
    span = otel_span({})
    span["attributes"].append({"key": "gen_ai.output.messages", "value": {"stringValue": deep}})
    path = _pretty(tmp_path, "otel.json", {"resourceSpans": [{"scopeSpans": [{"spans": [
        span]}]}]})
    error = import_error(path)
    assert (error.record, error.field) == ("span 0", "attributes.gen_ai.output.messages")
    path = write_jsonl(tmp_path, "apb.jsonl", [apb_row({"tools": deep})])
    error = import_error(path)
    assert (error.record, error.field) == ("line 1", "tools")
    # AgentProcessBench keeps a recorded agent's unreadable arguments verbatim, deep ones too.
    row = apb_row({})
    row["messages"] = [MESSAGES[0], {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": deep}}]}]
    [imported] = read_all(write_jsonl(tmp_path, "apb2.jsonl", [row]))
    assert imported.trace.messages[1].tool_calls[0].arguments == {"__unparsed_arguments__": deep}


def test_string_length_limit_at_its_boundary(tmp_path):
    limits = ImportLimits(max_string_chars=100)
    ok = write_jsonl(tmp_path, "ok.jsonl", [{"id": "a", "messages": [
        {"role": "user", "content": "x" * 100}], "feedback": [{"type": "comment",
                                                              "text": "y" * 100}]}])
    assert len(read_all(ok, limits=limits)) == 1
    cases = [
        ({"role": "user", "content": "x" * 101}, None, "messages[0].content"),
        ({"role": "user", "content": "x"}, {"type": "comment", "text": "y" * 101},
         "feedback[0].text"),
    ]
    for message, item, field in cases:
        path = write_json(tmp_path, "t.json", [{"id": "a", "messages": [message],
                                                "feedback": [item] if item else []}])
        error = import_error(path, limits=limits)
        assert (error.file, error.record, error.field) == (str(path), "index 0", field)
        assert "101 characters, over the limit of 100" in error.reason


def test_record_size_at_its_boundary(tmp_path):
    path = write_jsonl(tmp_path, "t.jsonl", [{"id": "a", "messages": MESSAGES}])
    size = len(path.read_bytes()) - 1  # the line without its newline
    assert len(read_all(path, limits=ImportLimits(max_record_bytes=size))) == 1
    error = import_error(path, limits=ImportLimits(max_record_bytes=size - 1))
    assert (error.record, "larger than the limit") == ("line 1", error.reason[10:31])


def test_file_size_at_its_boundary(tmp_path):
    path = write_jsonl(tmp_path, "t.jsonl", [{"id": "a", "messages": MESSAGES}] * 3)
    size = path.stat().st_size
    assert len(read_all(path, limits=ImportLimits(max_file_bytes=size))) == 3
    error = import_error(path, limits=ImportLimits(max_file_bytes=size - 1))
    assert error.file == str(path) and f"over the limit of {size - 1}" in error.reason


@pytest.mark.parametrize("layout", ["jsonl", "array", "document"])
def test_non_finite_numbers_are_refused(tmp_path, layout):
    def write(text: str) -> Path:
        path = tmp_path / ("t.jsonl" if layout == "jsonl" else "t.json")
        record = '{"id": "a", "messages": [{"role": "user", "content": "hi"}], ' + text + "}"
        path.write_text({"jsonl": record + "\n", "array": f"[{record}]",
                         "document": record.replace(", ", ",\n")}[layout])
        return path
    path = write('"metadata": {"score": NaN}')
    error = import_error(path)
    assert error.file == str(path) and ("NaN" in error.reason or "malformed" in error.reason)
    path = write('"metadata": {"score": 1e999}')
    error = import_error(path)
    assert error.file == str(path)
    assert "finite" in error.reason or "malformed" in error.reason
    path = write('"feedback": [{"type": "rating", "value": -1e999}]')
    error = import_error(path)
    assert "finite" in error.reason or "malformed" in error.reason


@pytest.mark.parametrize("layout", ["jsonl", "array", "document", "tau2"])
@pytest.mark.parametrize("escape", ["\\ud800", "\\udc00", "a\\udbff\\\\\\udc00"])
def test_lone_surrogate_escapes_are_refused_never_mangled(tmp_path, layout, escape):
    content = f'"x{escape}y"'
    message = '{"role": "user", "content": ' + content + "}"
    record = '{"id": "a", "messages": [' + message + "]}"
    text = {"jsonl": record + "\n", "array": f"[{record}]", "document": record.replace(
        '"messages"', '\n"messages"'),
        "tau2": '{"info": {}, "simulations": [{"id": "s", "messages": [' + message + "]}]}"}
    path = tmp_path / ("t.jsonl" if layout == "jsonl" else "t.json")
    path.write_text(text[layout])
    error = import_error(path)
    assert error.file == str(path) and error.record is not None
    assert "surrogate" in error.reason


def test_a_surrogate_pair_escape_is_one_character(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[{"id": "a", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}]')
    [imported] = read_all(path)
    assert imported.trace.messages[0].content == "\U0001f600"


def test_limits_are_positive_and_never_above_the_store_caps():
    for bad in ({"max_depth": 0}, {"max_record_bytes": -1}, {"max_file_bytes": 1.5},
                {"max_depth": MAX_JSON_DEPTH + 1}, {"max_string_chars": MAX_TEXT_CHARS + 1}):
        with pytest.raises(InputError) as caught:
            ImportLimits(**bad)
        assert caught.value.field == next(iter(bad))


def _scan(data: bytes, limit: int, piece: int) -> tuple[str | None, bytes]:
    """(what the scanner refused, the bytes it released to the parser)."""
    scanner = JsonScanner(limit)
    released = b""
    try:
        for start in range(0, len(data), piece):
            released += scanner.feed(data[start:start + piece])
        released += scanner.end()
    except JsonRefused as refused:
        kind = "deep" if isinstance(refused, NestingTooDeep) else "surrogate"
        return kind, released + refused.piece[:refused.offset]
    return None, released


def _reference(data: bytes, limit: int) -> tuple[str | None, int]:
    """Byte by byte: the first refused byte and why, as a parser would meet it."""
    high, low = rb"\\u[dD][89abAB][0-9a-fA-F]{2}", rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    depth, in_string, i = 0, False, 0
    while i < len(data):
        byte = data[i:i + 1]
        if in_string and byte == b"\\":
            if re.match(low, data[i:]) or (re.match(high, data[i:])
                                           and not re.match(low, data[i + 6:])):
                return "surrogate", i
            i += 12 if re.match(high, data[i:]) else 2
            continue
        if in_string:
            in_string = byte != b'"'
        elif byte == b'"':
            in_string = True
        elif byte in b"[{":
            depth += 1
            if depth > limit:
                return "deep", i
        elif byte in b"]}":
            depth -= 1
        i += 1
    return None, len(data)


def _random_value(rng: random.Random, level: int = 0):
    alphabet = 'ab"\\[]{}\n\u00e9\U0001f600\ud800\udc00'
    roll = rng.random()
    if level < 8 and roll < 0.3:
        return [_random_value(rng, level + 1) for _ in range(rng.randint(0, 3))]
    if level < 8 and roll < 0.6:
        return {"".join(rng.choice(alphabet) for _ in range(3)): _random_value(rng, level + 1)
                for _ in range(rng.randint(0, 3))}
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))


def test_the_byte_scanner_stops_the_parser_exactly_at_the_first_refused_byte():
    """Brackets, quotes and backslashes inside strings, escapes and surrogate pairs cut at any
    byte: the scanner refuses what a byte-by-byte walk refuses, and hands the parser exactly the
    bytes before it."""
    rng = random.Random(7)
    for _ in range(1500):
        value = _random_value(rng)
        data = json.dumps(value, ensure_ascii=rng.random() < 0.8).encode("utf-8", "surrogatepass")
        for limit in range(8):
            kind, position = _reference(data, limit)
            for piece in (1, 5, 13, 64):
                assert _scan(data, limit, piece) == (kind, data[:position]), (data, limit, piece)
