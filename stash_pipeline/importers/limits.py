"""Import limits, and the nesting check that enforces the depth limit before a parser sees a byte.

Nesting is checked on the raw bytes, not on parsed values: ijson builds a prefix string for every
level it enters, so memory grows with the square of the depth (a 40 KB file of ``[`` peaked at
1 GB), and ``json.loads`` raises RecursionError past about a thousand levels. Both are stopped by
refusing the bytes that go one level too deep, before they reach the parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.validation import MAX_JSON_DEPTH, MAX_TEXT_CHARS

DEFAULT_MAX_FILE_BYTES = 2 * 1024 ** 3
DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ImportLimits:
    """What one import accepts; docs/importing.md has the table. Each refusal is an InputError."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES  # one source file
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES  # one record: a line, array item or span
    max_depth: int = MAX_JSON_DEPTH  # JSON nesting, from the file's top level (or a JSON string's)
    max_string_chars: int = MAX_TEXT_CHARS  # any one string of a trace or its feedback

    def __post_init__(self) -> None:
        for name in ("max_file_bytes", "max_record_bytes", "max_depth", "max_string_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name} must be a positive integer, got {value!r}", field=name)
        # The store checks every trace against its own caps: a higher import limit would only
        # move the refusal from the file's record to the store.
        for name, cap in (("max_depth", MAX_JSON_DEPTH), ("max_string_chars", MAX_TEXT_CHARS)):
            if getattr(self, name) > cap:
                raise InputError(f"{name} cannot exceed the store's limit of {cap}", field=name)


class JsonRefused(Exception):
    """Raised by JsonScanner with the reason; whoever fed it names the file and record.

    ``piece``: the bytes not handed on yet (what was carried, then what was just fed); ``offset``:
    how many of them come before the refused byte, and are safe to hand on.
    """

    piece = b""
    offset = 0


class NestingTooDeep(JsonRefused):
    def __init__(self, limit: int):
        super().__init__(f"JSON nested deeper than the limit of {limit} levels")


class LoneSurrogate(JsonRefused):
    """ijson would silently turn such an escape into '?', or crash on it."""

    def __init__(self) -> None:
        super().__init__("a string holds a lone surrogate escape (such as \\ud800), which is "
                         "not valid Unicode; neither database can store it")


_NOT_MARKS = bytes(b for b in range(256) if b not in b'"[]{}')
_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1 / -1 as signed bytes
_ANY_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
# A high and a low surrogate escape together are one character; either one alone is not.
_SURROGATE_ESCAPES = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW_SURROGATE = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_ESCAPE = len(rb"\ud83d")
_LONGEST_ESCAPE = 2 * _ESCAPE  # a surrogate pair


class JsonScanner:
    """Checks a JSON byte stream fed in pieces: nesting depth outside strings, and lone
    surrogate escapes inside them.

    The check runs in C-speed bytes operations: escaped backslashes and quotes are replaced, so
    every remaining quote opens or closes a string and every remaining backslash starts an escape;
    the brackets outside strings become +1/-1 steps whose running sum is the depth. An escape cut
    by the end of a piece is carried to the next one (at most 17 bytes), so ``feed`` returns the
    bytes it has checked: a parser must get those and no others. Only a refused piece is walked
    byte by byte, to find where the refused byte is. Malformed JSON may be measured wrongly, but
    the parser refuses it anyway.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.depth = 0
        self._in_string = False
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        """The bytes now checked (what was carried, and ``data`` up to an escape it may cut).

        Raises NestingTooDeep or LoneSurrogate when they hold what the limits refuse.
        """
        piece = self._carry + data
        checked, carry = _split_escape_at_end(piece)
        try:
            self._check(checked)
        except JsonRefused as refused:
            raise self._locate(piece, refused) from None
        self._carry = carry
        return checked

    def end(self) -> bytes:
        """The stream is over: check and return what was carried."""
        piece, self._carry = self._carry, b""
        try:
            self._check(piece)
        except JsonRefused as refused:
            raise self._locate(piece, refused) from None
        return piece

    def _check(self, data: bytes) -> None:
        if b"\\" in data:
            # Placeholders, not nothing: "\\ud800\\\\\\udc00" is no surrogate pair.
            data = data.replace(b"\\\\", b"_").replace(b'\\"', b"_")
            if _ANY_SURROGATE.search(data) and any(
                    len(m.group()) < _LONGEST_ESCAPE for m in _SURROGATE_ESCAPES.finditer(data)):
                raise LoneSurrogate
        # Only quotes and brackets matter. Two adjacent quotes (an empty string, or two strings
        # with no bracket between them) change nothing, so they go first, in C; what is left is
        # the brackets and the few strings that hold one.
        marks = data.translate(None, _NOT_MARKS).replace(b'""', b"")
        quotes = marks.count(b'"')
        if quotes:
            parts = marks.split(b'"')
            brackets = b"".join(parts[1::2] if self._in_string else parts[0::2])
        else:
            brackets = b"" if self._in_string else marks
        if self.depth + len(brackets) > self.limit:  # else it cannot reach the limit here
            steps = memoryview(brackets.translate(_STEPS)).cast("b")
            if max(accumulate(steps, initial=self.depth)) > self.limit:
                raise NestingTooDeep(self.limit)
        opened = brackets.count(b"[") + brackets.count(b"{")
        self.depth += 2 * opened - len(brackets)
        self._in_string ^= quotes % 2 == 1

    def _locate(self, piece: bytes, found: JsonRefused) -> JsonRefused:
        """The first refusal in a refused piece, walked byte by byte from the state before it,
        with where it is."""
        depth, in_string, i = self.depth, self._in_string, 0
        refused: JsonRefused | None = None
        while i < len(piece) and refused is None:
            byte = piece[i:i + 1]
            if in_string:
                if byte == b"\\":
                    if _LOW_SURROGATE.match(piece, i) or (
                            _HIGH_SURROGATE.match(piece, i)
                            and not _LOW_SURROGATE.match(piece, i + _ESCAPE)):
                        refused = LoneSurrogate()
                        break
                    i += _LONGEST_ESCAPE if _HIGH_SURROGATE.match(piece, i) else 2
                    continue
                in_string = byte != b'"'
            elif byte == b'"':
                in_string = True
            elif byte in b"[{":
                depth += 1
                if depth > self.limit:
                    refused = NestingTooDeep(self.limit)
                    break
            elif byte in b"]}":
                depth -= 1
            i += 1
        if refused is None:  # the fast check saw what this walk cannot place: refuse it all
            refused, i = found, 0
        refused.piece, refused.offset = piece, i
        return refused


def _split_escape_at_end(data: bytes) -> tuple[bytes, bytes]:
    """(what can be checked now, what to carry): an escape, or a surrogate pair, that starts this
    close to the end may go on in the next piece; it is carried there whole."""
    first = data.find(b"\\", max(0, len(data) - _LONGEST_ESCAPE + 1))
    if first >= 0 and _HIGH_SURROGATE.fullmatch(data, first - _ESCAPE, first):
        first -= _ESCAPE
    if first < 0:
        return data, b""
    run_start = len(data[:first].rstrip(b"\\"))
    run_end = len(data) - len(data[first:].lstrip(b"\\"))
    # Pairs of backslashes are escaped backslashes, and stay checked here; an odd one left
    # escapes what follows, and goes with it.
    cut = run_end - (run_end - run_start) % 2
    return data[:cut], data[cut:]


def check_nesting(data: bytes, limit: int) -> None:
    """Raise NestingTooDeep when one whole JSON text nests deeper than ``limit`` (or
    LoneSurrogate, when it finds one on the way)."""
    if data.count(b"[") + data.count(b"{") > limit:  # fewer brackets cannot nest that deep
        scanner = JsonScanner(limit)
        scanner.feed(data)
        scanner.end()
