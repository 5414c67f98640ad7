"""Writers take turns for a few slots before they take a thread, so reads never queue behind them.

A SQLite writer waits for the database's write lock (up to ``STASH_SQLITE_BUSY_TIMEOUT_S``) holding
a worker thread and a pooled connection; a PostgreSQL writer does the same behind a row or advisory
lock. Dozens of such writers filled the thread pool (40) and the connection pool (15) that reads
share, and ``GET /api/v1/account`` waited 13 s behind 45 of them. Here a request that writes (any
method but GET, HEAD and OPTIONS, except the POSTs that only read) first waits for one of
``STASH_API_WRITE_CONCURRENCY`` slots on the event loop, where waiting costs neither a thread nor
a connection: at most that many threads and connections ever wait for a lock, and the rest stay
free for reads. An import takes its slot after its body is on disk, not before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from fastapi import Request

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# POSTs that only read: the SQL endpoint (its own threads and slots) and the viewer's login.
READING_POSTS = frozenset({"/api/v1/sql", "/ui/login"})
# Takes its slot itself, once the body is received (``routes.traces.import_traces``).
IMPORT_PATH = "/api/v1/traces"
# Both /rewards routes (routes/rewards.py) only read: they wait for the scoring server, not a lock.
REWARDS_SUFFIX = "/rewards"


def writes(method: str, path: str) -> bool:
    path = path.rstrip("/") or "/"
    return method not in READ_METHODS and path not in READING_POSTS \
        and not (method == "POST" and (path == IMPORT_PATH or path.endswith(REWARDS_SUFFIX)))


def slots(request: Request) -> anyio.Semaphore:
    """The app's write slots (made in the event loop, at the first write)."""
    state = request.app.state
    if getattr(state, "write_slots", None) is None:
        state.write_slots = anyio.Semaphore(state.settings.write_concurrency)
    return state.write_slots


async def write_slot(request: Request) -> AsyncIterator[None]:
    """An app-wide dependency: a writing request holds a slot while its route runs."""
    if not writes(request.scope["method"], request.scope["path"]):
        yield
        return
    async with slots(request):
        yield
