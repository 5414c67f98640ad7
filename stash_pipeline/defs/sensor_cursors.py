"""Cursors of the request sensors, and the page each tick reads: every tick costs a bounded number
of queries, whatever the number of users, models and requests (docs/pipeline.md, "Sensors at
scale").

A request is stamped when its transaction runs, and becomes visible when it commits: a little
later, and a request stamped earlier may commit after one stamped later. A cursor therefore only
moves past requests older than SETTLE_S; younger ones are asked for again on the next tick, where
their run keys (which name the request) make Dagster skip the runs that already exist.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from stash_pipeline.store.schema import utcnow

T = TypeVar("T")

# Requests one tick reads: more wait for the next tick (a few seconds later).
REQUESTS_PER_TICK = 200
# How long a request may take from its stamp to its commit (and the clocks of the hosts that
# stamp and read it may differ) before a cursor moves past it.
SETTLE_S = 60


def settled_cursor(items: Sequence[T], stamp: Callable[[T], datetime | None],
                   cursor: Callable[[T], str], previous: str | None,
                   now: datetime | None = None) -> str | None:
    """The cursor after ``items`` (oldest first): past the last of the leading items stamped more
    than SETTLE_S ago, else ``previous``."""
    limit = (now or utcnow()) - timedelta(seconds=SETTLE_S)
    moved = previous
    for item in items:
        at = stamp(item)
        if at is None or _aware(at) > limit:
            break
        moved = cursor(item)
    return moved


def _aware(at: datetime) -> datetime:
    """SQLite returns naive UTC times."""
    from datetime import timezone

    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def time_cursor(at: datetime, key: str) -> str:
    return json.dumps([_aware(at).isoformat(), key])


def parse_time_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    if not cursor:
        return None
    at, key = json.loads(cursor)
    return datetime.fromisoformat(at), key
