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

from stash_pipeline.core.errors import StorageFullError, UnavailableError, disk_full

_MIGRATION_LOCK = "stash-pipeline:migrations"
# Trace locks are striped: a trace takes the lock of its stripe, so a transaction holds at most
# this many trace locks however many traces it writes. One lock per trace exhausted PostgreSQL's
# shared lock table ("out of shared memory", max_locks_per_transaction x max_connections slots)
# with one 30,000-trace import. Two writers of different traces in one stripe take turns.
TRACE_LOCK_STRIPES = 256


class ConcurrentWriteError(UnavailableError):
    """Another writer kept the database busy too long, or PostgreSQL chose this transaction to
    break a deadlock (``deadlock``: the other one has gone ahead, so an immediate retry is fine).
    Nothing of the call was stored; running it again is safe."""

    retry_after_s = 1

    def __init__(self, message: str, *, deadlock: bool = False):
        super().__init__(message)
        self.deadlock = deadlock


class DatabaseUnavailableError(UnavailableError):
    """The database could not be reached, or dropped the connection (it was stopped)."""


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
        if disk_full(error):
            raise database_full() from None
        if "database is locked" in str(error.orig):
            raise ConcurrentWriteError(
                f"the SQLite database stayed locked by another writer for {busy_timeout_s:g} s "
                "(STASH_SQLITE_BUSY_TIMEOUT_S); nothing was stored, run the command again"
            ) from error
        if getattr(error.orig, "sqlstate", None) in ("40P01", "40001"):  # deadlock, serialization
            raise ConcurrentWriteError(
                f"another writer conflicted with this one ({type(error.orig).__name__}); nothing "
                "was stored, run the command again", deadlock=True) from error
        if getattr(error.orig, "sqlstate", None) == "55P03":  # lock_timeout ran out
            raise ConcurrentWriteError(
                "another writer held a lock past the lock timeout; nothing was stored, run the "
                "command again") from error
        translated = unavailable_database(error)
        if translated is not None:
            raise translated from None
        raise
    except Exception as error:
        # The driver's own error, not wrapped by SQLAlchemy (PostgreSQL's COPY of an import).
        if not isinstance(error, OSError) and disk_full(error):
            raise database_full() from None
        raise


def unavailable_database(error: BaseException) -> UnavailableError | None:
    """The error as ours when the database went away or stayed locked, else None."""
    if not isinstance(error, sa.exc.DBAPIError):
        return None
    if "database is locked" in str(error.orig):
        return ConcurrentWriteError("the SQLite database stayed locked by another writer past "
                                    "its busy timeout; nothing was stored, try again")
    if not _unreachable(error):
        return None
    return DatabaseUnavailableError(
        "the database is unavailable; nothing was stored, try again once it is back",
        detail=_first_line(error.orig))


def database_full() -> StorageFullError:
    return StorageFullError("the disk that holds the database is full; nothing was stored "
                            "(free space, then run it again)")


def _unreachable(error: sa.exc.DBAPIError) -> bool:
    """A connection that failed or broke, not a statement the database refused."""
    if error.connection_invalidated or isinstance(error, sa.exc.InterfaceError):
        return True
    if not isinstance(error, sa.exc.OperationalError):
        return False
    state = getattr(error.orig, "sqlstate", None)
    # 08: connection exception; 57P01-57P03: the server is shutting down or starting up.
    if state is not None:
        return state.startswith("08") or state in ("57P01", "57P02", "57P03")
    text = str(error.orig).lower()
    return any(sign in text for sign in ("connection", "server closed", "unable to open database",
                                         "disk i/o error"))


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0].strip()
