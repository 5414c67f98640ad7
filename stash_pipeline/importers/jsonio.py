"""Streaming reads of JSON, JSON-array and JSONL files: a record at a time, each under the limits.

Memory stays bounded by the limits, not by the file: JSONL is read line by line, arrays and nested
arrays (tau2's ``simulations``, OTLP spans) item by item with ijson; every byte is checked for
nesting depth before a parser sees it (``importers.limits``), and every record for size.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import ijson

from stash_pipeline.core.errors import InputError
from stash_pipeline.importers.limits import ImportLimits, JsonRefused, JsonScanner, check_nesting

_BOM = b"\xef\xbb\xbf"
_GZIP_MAGIC = b"\x1f\x8b"
_WHITESPACE = b" \t\r\n"
_MAX_BUFFER = 64 * 1024

Layout = Literal["jsonl", "array", "object"]


@dataclass(frozen=True)
class RawRecord:
    """One source record: the parsed JSON and where it came from."""

    data: Any
    number: int  # JSONL: 1-based line; array: 0-based index; a single document: 0
    label: str  # "line 12", "index 3" or "document": the record an error names


def too_large(label: str, limit: int) -> InputError:
    return InputError(
        f"record is larger than the limit of {limit} bytes (raise max_record_bytes to accept it)",
        record=label,
    )


def open_binary(path: Path) -> BinaryIO:
    """The file's bytes; a gzip file (``.jsonl.gz``, as data sets ship) is decompressed on the fly,
    recognised by its magic bytes, so every layout and the record limits apply unchanged."""
    with open(path, "rb") as handle:
        compressed = handle.read(2) == _GZIP_MAGIC
    return _GzipFile(path, "rb") if compressed else open(path, "rb")  # type: ignore[return-value]


class _GzipFile(gzip.GzipFile):
    """A corrupt or cut-off gzip stream is bad input: an InputError naming the file."""

    def read(self, size: int | None = -1) -> bytes:
        try:
            return super().read(size)
        except (OSError, EOFError, zlib.error) as error:
            raise InputError(f"not a readable gzip file: {error}", file=str(self.name)) from None

    def readline(self, size: int | None = -1) -> bytes:
        try:
            return super().readline(size)
        except (OSError, EOFError, zlib.error) as error:
            raise InputError(f"not a readable gzip file: {error}", file=str(self.name)) from None


def check_file_size(path: Path, limits: ImportLimits) -> None:
    size = os.path.getsize(path)
    if size > limits.max_file_bytes:
        raise InputError(f"the file is {size} bytes, over the limit of {limits.max_file_bytes} "
                         "(max_file_bytes)", file=str(path))


def loads_text(text: str, field: str, max_depth: int) -> Any:
    """JSON held in a string (tool arguments, OTel attributes), under the same nesting limit.

    Raises InputError naming ``field`` for malformed JSON, NaN/Infinity, or too deep nesting.
    """
    try:
        check_nesting(text.encode("utf-8", "surrogatepass"), max_depth)
    except JsonRefused as error:
        raise InputError(str(error), field=field) from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except _NonFiniteNumber as error:
        raise InputError(str(error), field=field) from None


class _NonFiniteNumber(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    # Python's json reads NaN and Infinity, which are not JSON and which the databases disagree on.
    raise _NonFiniteNumber(f"{name} is not a JSON number")


def sniff_layout(path: Path, limits: ImportLimits) -> Layout:
    """JSON array, JSON Lines, or a single (possibly pretty-printed) JSON document."""
    with open_binary(path) as handle:
        first = _first_byte(handle)
        if first is None:
            raise InputError("the file is empty", file=str(path))
        if first == b"[":
            return "array"
        if first != b"{":
            return "jsonl"  # not JSON at all: the line reader reports line 1 as malformed
        handle.seek(0)
        line = _first_line(handle, limits.max_record_bytes)
    try:
        check_nesting(line, limits.max_depth)
        json.loads(line, parse_constant=_refuse_constant)
    except (JsonRefused, _NonFiniteNumber):
        return "jsonl"  # the line reader names line 1 and what is wrong with it
    except ValueError:
        return "object"  # the first line is not a whole record: one multi-line document
    return "jsonl"


def iter_records(path: Path, limits: ImportLimits) -> Iterator[RawRecord]:
    """Every top-level record: each JSONL line, each array item, or the one document."""
    layout = sniff_layout(path, limits)
    if layout == "jsonl":
        records = _jsonl_records(path, limits)
    elif layout == "array":
        records = iter_items(path, "item", limits)
    else:
        records = iter((read_document(path, limits),))
    empty = True
    for record in records:
        empty = False
        yield record
    if empty:
        raise InputError("the file holds no records", file=str(path))


def read_document(path: Path, limits: ImportLimits) -> RawRecord:
    """The whole file as one record (it must fit the record limit)."""
    with open_binary(path) as handle:
        raw = handle.read(limits.max_record_bytes + 1)
    if len(raw) > limits.max_record_bytes:
        raise too_large("document", limits.max_record_bytes).located(file=str(path))
    return RawRecord(_loads(raw.removeprefix(_BOM), path, limits, line_offset=0, label="document"),
                     0, "document")


def iter_items(path: Path, prefix: str, limits: ImportLimits,
               label: Callable[[int], str] = lambda i: f"index {i}") -> Iterator[RawRecord]:
    """Items of the array at an ijson prefix (``item``, ``simulations.item``), one at a time."""
    with open_binary(path) as handle:
        reader = _GuardedReader(handle, limits.max_depth, limits.max_record_bytes)
        index = 0
        try:
            for item in ijson.items(reader, prefix, use_float=True, buf_size=reader.buffer_size):
                yield RawRecord(item, index, label(index))
                index += 1
                reader.mark()
        except _RecordTooLarge:
            raise too_large(label(index), limits.max_record_bytes).located(file=str(path)) \
                from None
        except JsonRefused as error:
            raise InputError(str(error), file=str(path), record=label(index)) from None
        except UnicodeDecodeError:  # what JsonScanner let through, ijson cannot decode either
            raise InputError("not valid UTF-8 text or \\u escapes", file=str(path),
                             record=label(index)) from None
        except ijson.JSONError as error:
            raise _syntax_error(path, error, reader, limits) from None


def first_value(path: Path, prefix: str, limits: ImportLimits) -> Any:
    """The first value at an ijson prefix (e.g. tau2's ``info``), or None when there is none."""
    for record in iter_items(path, prefix, limits, label=lambda _: prefix):
        return record.data
    return None


def top_level_keys(path: Path, wanted: set[str], limits: ImportLimits) -> set[str]:
    """Keys of a top-level JSON object, stopping at the first key in ``wanted``: cheap to peek."""
    keys: set[str] = set()
    with open_binary(path) as handle:
        reader = _GuardedReader(handle, limits.max_depth, None)
        try:
            for prefix, event, value in ijson.parse(reader, buf_size=reader.buffer_size):
                if prefix == "" and event == "map_key":
                    keys.add(value)
                    if value in wanted:
                        break
        except JsonRefused as error:
            raise InputError(str(error), file=str(path), record="document") from None
        except UnicodeDecodeError:
            raise InputError("not valid UTF-8 text or \\u escapes", file=str(path),
                             record="document") from None
        except ijson.JSONError as error:
            raise _syntax_error(path, error, reader, limits) from None
    return keys


def _jsonl_records(path: Path, limits: ImportLimits) -> Iterator[RawRecord]:
    limit = limits.max_record_bytes
    with open_binary(path) as handle:
        number = 0
        while True:
            line = handle.readline(limit + 1)
            if not line:
                return
            number += 1
            if len(line) > limit and not line.endswith(b"\n"):
                raise too_large(f"line {number}", limit).located(file=str(path))
            if number == 1:
                line = line.removeprefix(_BOM)
            if not line.strip():
                continue
            yield RawRecord(_loads(line, path, limits, line_offset=number - 1,
                                   label=f"line {number}"), number, f"line {number}")


def _loads(raw: bytes, path: Path, limits: ImportLimits, *, line_offset: int, label: str) -> Any:
    """One whole record's bytes; errors name ``label`` (or the exact line, for syntax errors)."""
    try:
        check_nesting(raw, limits.max_depth)
    except JsonRefused as error:
        raise InputError(str(error), file=str(path), record=label) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = line_offset + raw[: error.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text (byte {error.start})", file=str(path),
                         record=f"line {line}") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except _NonFiniteNumber as error:
        raise InputError(str(error), file=str(path), record=label) from None
    except json.JSONDecodeError as error:
        raise InputError(f"malformed JSON: {error.msg} at column {error.colno}", file=str(path),
                         record=f"line {line_offset + error.lineno}") from None


def _syntax_error(path: Path, error: Exception, reader: _GuardedReader,
                  limits: ImportLimits) -> InputError:
    """Name the exact line when the file is small enough to re-parse, else the nearest line read."""
    raw = None
    if os.path.getsize(path) <= limits.max_record_bytes:
        with open_binary(path) as handle:  # bounded: a small gzip file may hold a large one
            raw = handle.read(limits.max_record_bytes + 1)
    if raw is not None and len(raw) <= limits.max_record_bytes:
        try:
            _loads(raw.removeprefix(_BOM), path, limits, line_offset=0, label="document")
        except InputError as exact:
            return exact
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return InputError(f"malformed JSON ({reason}) at or before line {reader.lines_read + 1}",
                      file=str(path), record=f"line {reader.lines_read + 1}")


class _RecordTooLarge(Exception):
    pass


class _GuardedReader:
    """A file reader for ijson that counts lines, and fails before handing over a byte that nests
    too deep or starts a lone surrogate escape, or once one record has read past the size limit."""

    def __init__(self, handle: BinaryIO, max_depth: int, max_record_bytes: int | None):
        self._handle = handle
        self._limit = max_record_bytes
        self._scanner = JsonScanner(max_depth)
        self._refused: JsonRefused | None = None
        self._since_mark = 0
        self._started = False
        self.lines_read = 0
        # A record is measured to within one buffer: keep that slack small against small limits.
        self.buffer_size = _MAX_BUFFER if max_record_bytes is None else \
            max(1024, min(_MAX_BUFFER, max_record_bytes // 4))

    def mark(self) -> None:
        self._since_mark = 0

    def read(self, size: int = -1) -> bytes:
        """Checked bytes only: an escape cut by the end of a read waits for the next one."""
        if self._refused is not None:
            raise self._refused
        while True:
            data = self._handle.read(size)
            if not self._started:
                self._started = True
                data = data.removeprefix(_BOM)
            self._since_mark += len(data)
            if self._limit is not None and self._since_mark > self._limit + self.buffer_size:
                raise _RecordTooLarge
            try:
                checked = self._scanner.feed(data) if data else self._scanner.end()
            except JsonRefused as refused:
                if not refused.offset:
                    raise
                # Hand the parser everything before the refused byte, so it finishes the records
                # before it (and the error names the right one); its next read raises.
                self._refused = refused
                checked = refused.piece[:refused.offset]
            if checked or not data:  # b"" is the end of the file for ijson
                self.lines_read += checked.count(b"\n")
                return checked


def _first_byte(handle: BinaryIO) -> bytes | None:
    start = handle.read(3)
    rest = start.removeprefix(_BOM)
    while True:
        for i in range(len(rest)):
            if rest[i:i + 1] not in (b" ", b"\t", b"\r", b"\n"):
                return rest[i:i + 1]
        rest = handle.read(_MAX_BUFFER)
        if not rest:
            return None


def _first_line(handle: BinaryIO, max_record_bytes: int) -> bytes:
    """The first non-blank line, at most one record long."""
    while True:
        line = handle.readline(max_record_bytes + 1)
        if not line or line.strip(_WHITESPACE).removeprefix(_BOM).strip(_WHITESPACE):
            return line.removeprefix(_BOM)
