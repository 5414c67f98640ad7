"""Cursors of the request sensors, the page each tick reads and the runs it asks for: every tick
costs a bounded number of queries and creates a bounded number of runs, whatever the number of
users, models and requests (docs/pipeline.md, "Sensors at scale").

A request is stamped when its transaction runs, and becomes visible when it commits: a little
later, and a request stamped earlier may commit after one stamped later. A cursor therefore only
moves past requests older than SETTLE_S; younger ones are asked for again on the next tick, where
their run keys (which name the request) would make Dagster skip the runs that already exist,
but at a lookup per key: a tick asks only for the requests of its page that have no run yet
(``unstarted``, one query), RUNS_PER_TICK of them at most.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import TypeVar

import dagster as dg

from stash_pipeline.store.schema import utcnow

T = TypeVar("T")

# The tags by which the sensor daemon finds a run key's existing run and skips the key
# (dagster._daemon.sensor.fetch_existing_runs); a run without an origin matches on the name.
RUN_KEY_TAG = "dagster/run_key"
SENSOR_NAME_TAG = "dagster/sensor_name"
# Requests one tick reads: more wait for the next tick (a few seconds later).
REQUESTS_PER_TICK = 200
# The minimum interval of the sensors that start what a person waits for in seconds (Score
# again): the daemon's sensor loop (run_queue.py) and the run queue look as often, so a request's
# run is made and launched within a second or two. A tick that finds nothing reads one index.
REQUEST_INTERVAL_S = 1
# Runs one tick asks for. The daemon creates and queues each in Dagster's storage (some 20
# connections and 25 statements: 0.1-0.2 s on an idle machine, up to a second on a loaded one;
# benchmarks/sensor_ticks.py), one after another, so a tick stays within seconds; the rest are
# asked for by the next ticks, seconds later.
RUNS_PER_TICK = 10
# True while a `--wait` command evaluates a sensor in its own process (instance.
# run_sensor_requests): it creates only the run it wants, whatever the page asks for, and its
# request may come after more than RUNS_PER_TICK others without a run.
_every_request: ContextVar[bool] = ContextVar("every_unstarted_request", default=False)


@contextmanager
def every_unstarted_request() -> Iterator[None]:
    """Within it, a tick asks for the run of every request of its page that has none."""
    token = _every_request.set(True)
    try:
        yield
    finally:
        _every_request.reset(token)
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


def unstarted(context: dg.SensorEvaluationContext, items: Sequence[T],
              run_key: Callable[[T], str]) -> tuple[list[T], list[T]]:
    """Of a page of requests (oldest first), the ones whose run key has no run of this sensor yet,
    RUNS_PER_TICK at most (unless ``every_unstarted_request``), and the leading part of the page
    they cover (what the cursor may move past: every item in it has its run, or is asked for
    now). One query for the whole page."""
    limit = None if _every_request.get() else RUNS_PER_TICK
    keys = [run_key(item) for item in items]
    started = {run.tags.get(RUN_KEY_TAG) for run in context.instance.get_runs(
        filters=dg.RunsFilter(tags={RUN_KEY_TAG: keys, SENSOR_NAME_TAG: context.sensor_name}))
    } if keys else set()
    asked: list[T] = []
    covered: list[T] = []
    for item, key in zip(items, keys):
        if key not in started:
            if len(asked) == limit:
                break
            asked.append(item)
        covered.append(item)
    return asked, covered
