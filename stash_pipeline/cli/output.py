"""How commands print: a readable table or text for people, one JSON object last for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def print_json(payload: Any) -> None:
    """One JSON object on one line: scripts read the last line of stdout."""
    print(json.dumps(payload, sort_keys=True, default=str))


def rounded(value: Any) -> Any:
    """A float in a table or a line for people: three decimals; anything else as it is."""
    return f"{value:.3f}" if isinstance(value, float) else value


def print_table(rows: list[dict[str, Any]], columns: list[str], *, width: int | None = None,
                shrink: Sequence[Sequence[str]] = (),
                headings: Mapping[str, str] | None = None) -> None:
    """Columns padded to their widest cell. With ``width``, the ``shrink`` groups of columns are
    cut in turn (the first group first, its widest column first), each cell ending in "…", until
    a line fits."""
    headings = headings or {}
    titles = [headings.get(c, c).upper() for c in columns]
    cells = [[("" if row.get(c) is None else str(row.get(c))) for c in columns] for row in rows]
    widths = [max([len(t)] + [len(r[i]) for r in cells]) for i, t in enumerate(titles)]
    if width is not None:
        for group in shrink:
            _fit(widths, [columns.index(c) for c in group if c in columns], width)
    print("  ".join(_cut(t, w).ljust(w) for t, w in zip(titles, widths)).rstrip())
    for r in cells:
        print("  ".join(_cut(v, w).ljust(w) for v, w in zip(r, widths)).rstrip())


MIN_SHRUNK = 6


def _fit(widths: list[int], shrinkable: list[int], width: int) -> None:
    while sum(widths) + 2 * (len(widths) - 1) > width:
        candidates = [i for i in shrinkable if widths[i] > MIN_SHRUNK]
        if not candidates:
            return
        widest = max(candidates, key=lambda i: widths[i])
        widths[widest] -= 1


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def progress(items: Iterable[T], *, desc: str, unit: str) -> Iterator[T]:
    """A progress bar on stderr when a person is watching; silent in pipes and CI logs."""
    if not sys.stderr.isatty():
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)
