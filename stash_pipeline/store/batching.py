"""Bounded IN lists: PostgreSQL takes at most 65535 parameters a statement."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")
IN_LIST_SIZE = 1000


def chunks(items: Sequence[T], size: int = IN_LIST_SIZE) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
