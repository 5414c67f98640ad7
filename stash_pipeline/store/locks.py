"""What makes concurrent writers safe: per-trace locks, the migration lock, and their errors.

SQLite has one writer at a time: every write transaction starts with ``BEGIN IMMEDIATE`` (see
``engine.create_engine``), so it holds the database's write lock from its first statement and the
locks here are no-ops. PostgreSQL runs writers side by side; these transaction-scoped advisory locks
serialise what must not interleave (two imports of one trace, a feedback write and a reimport of
its trace, two migrations), and are released at commit or rollback.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from stash_pipeline.core.errors import StashError

_MIGRATION_LOCK = "stash-pipeline:migrations"
# Trace locks are striped: a trace takes the lock of its stripe, so a transaction holds at most
# this many trace locks however many traces it writes. One lock per trace exhausted PostgreSQL's
# shared lock table ("out of shared memory", max_locks_per_transaction x max_connections slots)
# with one 30,000-trace import. Two writers of different traces in one stripe take turns.
TRACE_LOCK_STRIPES = 256


class ConcurrentWriteError(StashError):
    """Another writer kept the database busy too long, or PostgreSQL chose this transaction to
    break a deadlock (``deadlock``: the other one has gone ahead, so an immediate retry is fine).
    Nothing of the call was stored; running it again is safe."""

    def __init__(self, message: str, *, deadlock: bool = False):
        super().__init__(message)
        self.deadlock = deadlock


def lock_key(name: str) -> int:
    """A signed 64-bit advisory lock key for a name (collisions only serialise a little more)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big",
                          signed=True)


_STRIPE_KEYS = [lock_key(f"trace-stripe:{stripe}") for stripe in range(TRACE_LOCK_STRIPES)]


def lock_traces(connection: sa.Connection, trace_ids: Iterable[str]) -> None:
    """Hold each trace (its stripe) until the transaction ends. Keys are taken in sorted order,
    so two transactions that lock overlapping sets in one call never wait on each other in a
    cycle."""
    if connection.dialect.name != "postgresql":
        return
    stripes = {lock_key(f"trace:{trace_id}") % TRACE_LOCK_STRIPES for trace_id in trace_ids}
    if len(stripes) > TRACE_LOCK_STRIPES // 4:
        # A large write (an import's chunk) takes every stripe, in order, at once: its later
        # chunks then need no more, so two large imports take turns instead of deadlocking.
        stripes = set(range(TRACE_LOCK_STRIPES))
    keys = sorted(_STRIPE_KEYS[stripe] for stripe in stripes)
    if keys:  # unnest yields the array in order, and each row takes its lock in turn
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(k) "
                                   "FROM unnest(CAST(:keys AS bigint[])) AS k"), {"keys": keys})


def lock_migrations(connection: sa.Connection) -> None:
    """One migration at a time: the others wait, then find the schema at head."""
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"),
                           {"k": lock_key(_MIGRATION_LOCK)})


@contextmanager
def concurrent_write_errors(busy_timeout_s: float | None) -> Iterator[None]:
    """Turn the database's 'try again' answers into a ConcurrentWriteError, never a traceback."""
    try:
        yield
    except sa.exc.DBAPIError as error:
        if "database is locked" in str(error.orig):
            raise ConcurrentWriteError(
                f"the SQLite database stayed locked by another writer for {busy_timeout_s:g} s "
                "(STASH_SQLITE_BUSY_TIMEOUT_S); nothing was stored, run the command again"
            ) from error
        if getattr(error.orig, "sqlstate", None) in ("40P01", "40001"):  # deadlock, serialization
            raise ConcurrentWriteError(
                f"another writer conflicted with this one ({type(error.orig).__name__}); nothing "
                "was stored, run the command again", deadlock=True) from error
        raise
