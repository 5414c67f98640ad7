"""How commands print: a readable table or text for people, one JSON object last for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def print_json(payload: Any) -> None:
    """One JSON object on one line: scripts read the last line of stdout."""
    print(json.dumps(payload, sort_keys=True, default=str))


def rounded(value: Any) -> Any:
    """A float in a table or a line for people: three decimals; anything else as it is."""
    return f"{value:.3f}" if isinstance(value, float) else value


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    cells = [[("" if row.get(c) is None else str(row.get(c))) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


def progress(items: Iterable[T], *, desc: str, unit: str) -> Iterator[T]:
    """A progress bar on stderr when a person is watching; silent in pipes and CI logs."""
    if not sys.stderr.isatty():
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)
