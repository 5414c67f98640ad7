"""One caller query on SQLite, in a process of its own (``sqlite.py`` starts it; stdlib only).

Run as ``python -I -S sqlite_child.py``: it reads one job (pickle) on stdin and writes one answer
(pickle) on stdout. It builds a private temporary database holding only the caller's rows, copied
from the store file (attached read-only) by the endpoint's own view selects; then it detaches the
store, so the caller's query runs where no other account's row exists. The caller's expressions
are never evaluated on another account's row, so no error, value or timing can depend on one.

The parent kills this process at the statement timeout, so every query ends then, even one whose
time goes into a single function call (a long LIKE, GLOB or instr) that SQLite's progress handler
cannot interrupt. The process runs at a lower CPU priority than the API and with a memory limit.
"""

from __future__ import annotations

import os
import pickle
import re
import resource
import sqlite3
import sys
import time

PROGRESS_STEPS = 1000  # SQLite VM instructions between clock checks


def main() -> int:
    job = pickle.load(sys.stdin.buffer)
    try:
        os.nice(job["nice"])
        memory = job["memory_bytes"]
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        answer = run(job)
    except MemoryError:
        answer = {"error": "the query needs more memory than the SQL endpoint allows",
                  "code": "invalid"}
    sys.stdout.buffer.write(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()
    return 0


def run(job: dict) -> dict:
    deadline = time.monotonic() + job["timeout_s"]
    db = sqlite3.connect("file:", uri=True, isolation_level=None)  # private, temporary, on disk
    db.execute(f"PRAGMA hard_heap_limit = {int(job['heap_bytes'])}")
    db.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_STEPS)
    try:
        copy_rows(db, job)
        db.set_authorizer(authorizer(set(job["views"]), set(job["functions"])))
        db.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        cursor = db.execute(job["sql"])
        columns = [d[0] for d in cursor.description or ()]
        return {"columns": columns, "rows": cursor.fetchmany(job["max_rows"] + 1)}
    except sqlite3.OperationalError as error:
        if str(error) == "interrupted":
            return {"error": "timeout", "code": "timeout"}
        return refusal(error, job["views"])
    except (sqlite3.DatabaseError, sqlite3.ProgrammingError, sqlite3.Warning) as error:
        return refusal(error, job["views"])
    finally:
        db.close()


def copy_rows(db: sqlite3.Connection, job: dict) -> None:
    """Tables ``main.<view>`` holding the caller's rows of each view; only the views the query
    names are filled, and only with the columns it reads (others stay NULL, unread)."""
    db.execute("ATTACH DATABASE ? AS src", (job["source"],))
    selects: dict[str, str] = job["views"]
    for name, select in selects.items():
        db.execute(f'CREATE TABLE main."{name}" AS SELECT * FROM ({select}) WHERE 0')
    named = [name for name in selects if re.search(name, job["sql"], re.IGNORECASE)]
    every = {name: [d[1] for d in db.execute(f'PRAGMA table_info("{name}")')] for name in named}
    read = columns_read(db, job["sql"], every)
    for name in named:
        # A view read for its rows only (count(*)) still needs them: its first column is copied.
        columns = every[name] if read is None else (read.get(name) or every[name][:1])
        listed = ", ".join(f'"{c}"' for c in columns)
        db.execute(f'INSERT INTO main."{name}" ({listed}) SELECT {listed} FROM ({selects[name]})')
    db.execute("DETACH DATABASE src")


def columns_read(db: sqlite3.Connection, sql: str,
                 every: dict[str, list[str]]) -> dict[str, list[str]] | None:
    """The columns of each view that compiling the query reads: SQLite's authorizer reports every
    column a statement reads (an empty name when it reads a table's rows but no column). None
    when the query does not compile here: then every column is copied."""
    seen: dict[str, set[str]] = {name: set() for name in every}

    def record(action: int, first, second, database, source) -> int:
        if action == sqlite3.SQLITE_READ and database == "main" and first in seen and second:
            seen[first].add(second.lower())
        return sqlite3.SQLITE_OK if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ,
                                               sqlite3.SQLITE_FUNCTION,
                                               sqlite3.SQLITE_RECURSIVE) else sqlite3.SQLITE_DENY

    db.set_authorizer(record)
    try:
        db.execute(f"EXPLAIN {sql}").fetchone()
    except (sqlite3.Error, sqlite3.Warning):
        return None
    finally:
        db.set_authorizer(None)
    return {name: [c for c in every[name] if c.lower() in seen[name]] for name in every}


def refusal(error: Exception, views) -> dict:
    message = str(error)
    if "not authorized" in message or "prohibited" in message:
        return {"error": f"{message}: a query reads only {', '.join(views)} with ordinary "
                         "functions", "code": "refused"}
    if "one statement at a time" in message:
        return {"error": "send exactly one statement", "code": "refused"}
    return {"error": message, "code": "invalid"}


def authorizer(views: set[str], functions: set[str]):
    """SELECT, recursive CTEs, reads of the caller's tables, CTEs and subqueries, and the allowed
    functions; nothing else (no ATTACH, PRAGMA, sqlite_master, writes)."""

    def authorize(action: int, first: str | None, second: str | None, database: str | None,
                  source: str | None) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            allowed = database is None or (database == "main" and first in views)
            return sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_OK if (second or "").lower() in functions \
                else sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_DENY

    return authorize


if __name__ == "__main__":
    sys.exit(main())
